//! topology is wasp's default topology stage, in Rust: upstream
//! kube-proxy's topology-aware routing, the same semantics as main.go beside
//! it, line for line. It picks the topology mode from the hints of the ready
//! endpoints and marks the endpoints that mode makes available for cluster
//! traffic on this node.
//!
//! The mode is all-or-nothing, as upstream:
//!   - PreferSameNode when every ready endpoint has a node hint and at least
//!     one is hinted for this node;
//!   - else PreferSameZone when every ready endpoint has a zone hint and at
//!     least one is hinted for this node's zone;
//!   - else none: every endpoint is eligible. One ready endpoint without
//!     hints disables topology for the whole service port. Unready endpoints
//!     are not looked at.

use std::cell::RefCell;

use wasp::{Error, Node, ServicePort, TopologyMode, TopologyResult};

const FOR_NODE: u8 = 1;
const FOR_ZONE: u8 = 2;

thread_local! {
    /// Per endpoint of the port at hand, whether it is hinted for this node
    /// and for this node's zone. Reused across ports: no allocation once it
    /// has grown to the largest port. A Wasm instance has one thread.
    static HINTED: RefCell<Vec<u8>> = RefCell::new(Vec::new());
}

fn topology(node: Node, sp: ServicePort, out: &mut TopologyResult) -> Result<(), Error> {
    let n = sp.len();
    if !sp.uses_cluster_endpoints() {
        // Topology only shapes the cluster set; the local set ignores hints.
        for i in 0..n {
            out.add(i);
        }
        return Ok(());
    }
    let (zone, name) = (node.zone(), node.name());
    HINTED.with(|hinted| {
        let mut hinted = hinted.borrow_mut();
        hinted.clear();
        hinted.resize(n, 0);
        // One pass over the endpoints records their hints and, over the
        // ready ones only, whether every one has node (zone) hints and
        // whether any is hinted for this node (zone).
        let (mut all_node, mut all_zone) = (true, true);
        let (mut any_node, mut any_zone) = (false, false);
        for (i, ep) in sp.endpoints().enumerate() {
            let (nh, zh) = (ep.node_hints(), ep.zone_hints());
            let mut h = 0;
            if nh.contains(name) {
                h |= FOR_NODE;
            }
            if zh.contains(zone) {
                h |= FOR_ZONE;
            }
            hinted[i] = h;
            if !ep.ready() {
                continue;
            }
            all_node = all_node && !nh.is_empty();
            all_zone = all_zone && !zh.is_empty();
            any_node = any_node || h & FOR_NODE != 0;
            any_zone = any_zone || h & FOR_ZONE != 0;
            if !all_node && !all_zone {
                // A ready endpoint without hints: no mode applies and
                // every endpoint is eligible, whatever the others hold.
                break;
            }
        }
        let want = if all_node && any_node {
            out.mode = TopologyMode::PreferSameNode;
            FOR_NODE
        } else if all_zone && any_zone {
            out.mode = TopologyMode::PreferSameZone;
            FOR_ZONE
        } else {
            0
        };
        for (i, &h) in hinted.iter().enumerate() {
            if want == 0 || h & want != 0 {
                out.add(i);
            }
        }
    });
    Ok(())
}

wasp::module! {
    name: "topology",
    version: "1.0.0",
    min_host_version: "0.1.0",
    description: "Upstream kube-proxy topology-aware routing: PreferSameNode and PreferSameZone hints, all or nothing.",
    topology: topology,
}
