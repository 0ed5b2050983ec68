//! The vocabulary of ABI v1 shared by inputs and outputs: stages, protocols,
//! topology modes, weights and well-known names.

use std::fmt;

/// The ABI version this crate implements.
pub const ABI_VERSION: u32 = 1;

/// The function a module exports to declare that it speaks ABI v1. It is
/// never called; the host looks for it before anything else.
pub const MARKER_EXPORT: &str = "wasp_abi_v1";

/// The export returning a guest-owned input buffer:
/// `wasp_buffer(size i32) -> ptr i32`.
pub const BUFFER_EXPORT: &str = "wasp_buffer";

/// The export that hands a module its configuration:
/// `wasp_configure(ptr i32, len i32) -> i64`, 0 when accepted, else the
/// rejection message's `address << 32 | length`.
pub const CONFIGURE_EXPORT: &str = "wasp_configure";

/// The custom section that carries a module's [`Metadata`](crate::Metadata)
/// as JSON.
pub const METADATA_SECTION: &str = "wasp.metadata";

/// The node label holding the node's zone.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

/// The node label holding the node's region.
pub const LABEL_TOPOLOGY_REGION: &str = "topology.kubernetes.io/region";

/// The largest weight the endpoint-selection stage may assign.
pub const MAX_WEIGHT: u32 = 65535;

/// The longest message of an error record, in bytes. Longer messages are
/// truncated (at a character boundary).
pub const MAX_ERROR_LEN: usize = 1024;

/// One step of the per-service-port pipeline. Stages run in the order
/// topology, traffic-policy, endpoint-selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Stage {
    /// Decides which endpoints are eligible for cluster traffic on this
    /// node (topology hints, PreferSameZone, PreferSameNode).
    Topology = 1,
    /// Computes the cluster, local and all-reachable endpoint sets from
    /// internal and external traffic policy.
    TrafficPolicy = 2,
    /// Gives a weight to each chosen endpoint.
    EndpointSelection = 3,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 3] = [Stage::Topology, Stage::TrafficPolicy, Stage::EndpointSelection];

    /// The stage with the given number in the input header (1–3).
    pub const fn from_u8(v: u8) -> Option<Stage> {
        match v {
            1 => Some(Stage::Topology),
            2 => Some(Stage::TrafficPolicy),
            3 => Some(Stage::EndpointSelection),
            _ => None,
        }
    }

    /// The stage name used in metadata, configuration and logs, such as
    /// `"traffic-policy"`.
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Topology => "topology",
            Stage::TrafficPolicy => "traffic-policy",
            Stage::EndpointSelection => "endpoint-selection",
        }
    }

    /// The name of the function a module exports for the stage, such as
    /// `"wasp_traffic_policy"`.
    pub const fn export(self) -> &'static str {
        match self {
            Stage::Topology => "wasp_topology",
            Stage::TrafficPolicy => "wasp_traffic_policy",
            Stage::EndpointSelection => "wasp_endpoint_selection",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A service port's L4 protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Protocol {
    /// TCP.
    Tcp = 1,
    /// UDP.
    Udp = 2,
    /// SCTP.
    Sctp = 3,
}

impl Protocol {
    /// The protocol with the given number in a port record (1–3).
    pub const fn from_u8(v: u8) -> Option<Protocol> {
        match v {
            1 => Some(Protocol::Tcp),
            2 => Some(Protocol::Udp),
            3 => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The Kubernetes spelling: `"TCP"`, `"UDP"` or `"SCTP"`.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The topology stage's verdict for a service port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TopologyMode {
    /// Hints are not used; every endpoint is eligible.
    #[default]
    None = 0,
    /// Endpoints hinted for the node's zone.
    PreferSameZone = 1,
    /// Endpoints hinted for the node.
    PreferSameNode = 2,
}

impl TopologyMode {
    /// The mode with the given number (0–2).
    pub const fn from_u8(v: u8) -> Option<TopologyMode> {
        match v {
            0 => Some(TopologyMode::None),
            1 => Some(TopologyMode::PreferSameZone),
            2 => Some(TopologyMode::PreferSameNode),
            _ => None,
        }
    }
}

/// The weight of one endpoint in an endpoint-selection result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)] // the output record's layout: the SDK copies weights as they are
pub struct Weight {
    /// The endpoint's index in its service port.
    pub index: u32,
    /// Its relative share of new connections, in [1, [`MAX_WEIGHT`]].
    pub weight: u32,
}

/// The error a stage handler returns to decline a service port. The host
/// keeps that port's last good result (or its builtin semantics) and logs
/// the message; the other ports of the batch are unaffected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    msg: String,
}

impl Error {
    /// An error with the given message.
    pub fn new(msg: impl fmt::Display) -> Error {
        Error { msg: msg.to_string() }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl From<&str> for Error {
    fn from(msg: &str) -> Error {
        Error { msg: msg.to_string() }
    }
}

impl From<String> for Error {
    fn from(msg: String) -> Error {
        Error { msg }
    }
}
