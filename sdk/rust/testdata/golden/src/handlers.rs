//! The handlers of the golden module: they give the results of
//! abi/testdata's golden outputs. The SDK's unit tests use them too.

use wasp::{Error, Node, PolicyResult, SelectionResult, ServicePort, TopologyMode, TopologyResult};

pub fn topology(_: Node, sp: ServicePort, out: &mut TopologyResult) -> Result<(), Error> {
    if sp.name() == "web" {
        out.mode = TopologyMode::PreferSameZone;
    }
    out.add(0);
    Ok(())
}

pub fn traffic_policy(_: Node, sp: ServicePort, out: &mut PolicyResult) -> Result<(), Error> {
    out.has_any_endpoints = true;
    if sp.name() == "web" {
        out.cluster.add(0);
        out.local.add(0);
        out.all.add(0);
    } else {
        out.local.mark_used();
        out.all.mark_used();
    }
    Ok(())
}

pub fn endpoint_selection(_: Node, sp: ServicePort, out: &mut SelectionResult) -> Result<(), Error> {
    if sp.name() != "web" {
        return Err("no local endpoint".into());
    }
    out.set(0, 1);
    Ok(())
}

/// Accepts any configuration but one that contains "reject".
pub fn configure(config: &[u8]) -> Result<(), Error> {
    if config.windows(6).any(|w| w == b"reject") {
        return Err(Error::new(format!("rejected on purpose ({} bytes)", config.len())));
    }
    Ok(())
}
