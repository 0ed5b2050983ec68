//! rust-prefer-local is an example endpoint-selection module written in
//! Rust: it sends a service port's cluster traffic to the closest endpoints
//! there are, those on this node, else those in this node's zone, else all
//! of them.
//!
//! The Service annotation `wasp.dev/prefer-local` sets how close: `node`
//! (the default) tries this node then the zone, `zone` only the zone, `off`
//! keeps every endpoint. Any other value fails the port, and the host keeps
//! its last good result. Every endpoint of the local set (externalTraffic-
//! or internalTrafficPolicy Local) keeps its weight: that traffic is already
//! local. See README.md.

use wasp::{Error, Indices, Node, SelectionResult, ServicePort};

/// The Service annotation that sets the preference.
pub const ANNOTATION: &str = "wasp.dev/prefer-local";

/// How far the cluster set is narrowed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    Node,
    Zone,
    All,
}

/// The closest tier the annotation allows.
fn preference(sp: &ServicePort) -> Result<Tier, Error> {
    match sp.annotation(ANNOTATION) {
        None | Some("node") => Ok(Tier::Node),
        Some("zone") => Ok(Tier::Zone),
        Some("off") => Ok(Tier::All),
        Some(v) => Err(Error::new(format!(
            "annotation {}: {:?} is not one of node, zone, off",
            ANNOTATION, v
        ))),
    }
}

/// Whether endpoint i is in tier. An endpoint without a zone, or a node
/// without one, is never in the zone tier.
fn within(sp: &ServicePort, zone: &str, i: usize, tier: Tier) -> bool {
    let ep = sp.endpoint(i);
    match tier {
        Tier::Node => ep.local(),
        Tier::Zone => !zone.is_empty() && ep.zone() == zone,
        Tier::All => true,
    }
}

/// The closest tier, from `closest` on, with an endpoint of set.
fn closest_tier(sp: &ServicePort, zone: &str, set: &Indices, closest: Tier) -> Tier {
    for tier in [Tier::Node, Tier::Zone] {
        if tier >= closest && set.iter().any(|i| within(sp, zone, i, tier)) {
            return tier;
        }
    }
    Tier::All
}

fn selection(node: Node, sp: ServicePort, out: &mut SelectionResult) -> Result<(), Error> {
    let closest = preference(&sp)?;
    let d = sp.decision();
    let (cluster, local) = (d.cluster(), d.local());
    let zone = node.zone();
    let tier = closest_tier(&sp, zone, &cluster, closest);
    for i in cluster.iter().filter(|&i| within(&sp, zone, i, tier)) {
        out.set(i, 1);
    }
    for i in local.iter() {
        out.set(i, 1);
    }
    Ok(())
}

wasp::module! {
    name: "rust-prefer-local",
    version: "0.1.0",
    min_host_version: "0.1.0",
    description: "Cluster traffic to the endpoints on this node, else in its zone, else anywhere; the wasp.dev/prefer-local Service annotation (node, zone, off) sets how close.",
    endpoint_selection: selection,
}
