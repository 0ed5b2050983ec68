//! selection is wasp's default endpoint-selection stage, in Rust, the same
//! semantics as main.go beside it: every endpoint of the cluster and local
//! sets gets the same weight, which is upstream kube-proxy's uniform random
//! choice.

use wasp::{Error, Node, SelectionResult, ServicePort};

fn selection(_node: Node, sp: ServicePort, out: &mut SelectionResult) -> Result<(), Error> {
    let d = sp.decision();
    for i in d.cluster().iter().chain(d.local().iter()) {
        out.set(i, 1);
    }
    Ok(())
}

wasp::module! {
    name: "selection",
    version: "1.0.0",
    min_host_version: "0.1.0",
    description: "Equal weights for every cluster and local endpoint: upstream's uniform random choice.",
    endpoint_selection: selection,
}
