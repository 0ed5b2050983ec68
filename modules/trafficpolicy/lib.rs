//! trafficpolicy is wasp's default traffic-policy stage, in Rust: upstream
//! kube-proxy's endpoint categorisation for internal and external traffic
//! policy, the same semantics as main.go beside it, line for line.
//!
//!   - Cluster set (when the port uses cluster endpoints): ready endpoints
//!     the topology stage made eligible; if there are none, every serving
//!     and terminating endpoint, ignoring topology.
//!   - Local set (when the port uses local endpoints): local ready
//!     endpoints; if there are none, local serving and terminating
//!     endpoints; if there are none of those either, the set stays nil.
//!     Topology never applies.
//!   - All reachable: the union of the sets in use.
//!   - has_any_endpoints: any usable endpoint anywhere, even when neither
//!     set can use it (iTP=Local with only remote endpoints must drop, not
//!     reject).
//!
//! Sets a policy does not use stay nil; nil and empty mean different things
//! to the dataplane.

use wasp::{Error, Node, PolicyResult, ServicePort, Set};

fn traffic_policy(_node: Node, sp: ServicePort, out: &mut PolicyResult) -> Result<(), Error> {
    let n = sp.len();
    if n == 0 {
        return Ok(());
    }
    if sp.uses_cluster_endpoints() {
        // Used but possibly empty: upstream's cluster set is [] rather than
        // nil when no endpoint qualifies.
        out.cluster.mark_used();
        for i in sp.decision().eligible().iter() {
            if sp.endpoint(i).ready() {
                out.cluster.add(i);
            }
        }
        if out.cluster.is_empty() {
            for (i, ep) in sp.endpoints().enumerate() {
                if ep.serving() && ep.terminating() {
                    out.cluster.add(i);
                }
            }
        }
        out.has_any_endpoints = !out.cluster.is_empty();
    }
    if !sp.uses_local_endpoints() {
        copy_set(&mut out.all, &out.cluster);
        return Ok(());
    }

    let (mut local_ready, mut local_terminating) = (false, false);
    for ep in sp.endpoints() {
        let usable = ep.ready() || (ep.serving() && ep.terminating());
        if usable {
            out.has_any_endpoints = true;
        }
        if ep.local() {
            local_ready = local_ready || ep.ready();
            local_terminating = local_terminating || (ep.serving() && ep.terminating());
        }
    }
    for (i, ep) in sp.endpoints().enumerate() {
        if !ep.local() {
        } else if local_ready && ep.ready() {
            out.local.add(i);
        } else if !local_ready && local_terminating && ep.serving() && ep.terminating() {
            out.local.add(i);
        }
    }
    if !sp.uses_cluster_endpoints() {
        copy_set(&mut out.all, &out.local);
        return Ok(());
    }
    // Both sets in use: all reachable is their union. The SDK sorts and
    // removes duplicates.
    copy_set(&mut out.all, &out.cluster);
    copy_set(&mut out.all, &out.local);
    Ok(())
}

/// Adds the members of src to dst; dst becomes used if src is.
fn copy_set(dst: &mut Set, src: &Set) {
    if src.is_nil() {
        return;
    }
    dst.mark_used();
    for &i in src.indices() {
        dst.add(i as usize);
    }
}

wasp::module! {
    name: "trafficpolicy",
    version: "1.0.0",
    min_host_version: "0.1.0",
    description: "Upstream kube-proxy internal/external traffic policy with per-policy terminating fallback.",
    traffic_policy: traffic_policy,
}
