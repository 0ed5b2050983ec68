//! A module implementing every stage with the results of abi/testdata's
//! golden outputs: run over the golden inputs inside wasp's runtime, it must
//! return the golden outputs byte for byte (sdk/rust/sdk_test.go).

mod handlers;

use handlers::{configure, endpoint_selection, topology, traffic_policy};

wasp::module! {
    name: "rust-golden",
    version: "1.0.0",
    min_host_version: "0.1.0",
    description: "The golden outputs of abi/testdata, for the Rust SDK's tests.",
    configure: configure,
    topology: topology,
    traffic_policy: traffic_policy,
    endpoint_selection: endpoint_selection,
}
