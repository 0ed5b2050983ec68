//! The Rust SDK for wasp policy modules.
//!
//! A module implements one or more stages of the per-service-port pipeline —
//! topology, traffic-policy, endpoint-selection — as plain functions, and
//! declares them, with its metadata, through [`module!`]:
//!
//! ```ignore
//! use wasp::{Error, Node, SelectionResult, ServicePort};
//!
//! fn selection(_node: Node, sp: ServicePort, out: &mut SelectionResult) -> Result<(), Error> {
//!     let d = sp.decision();
//!     for i in d.cluster().iter().chain(d.local().iter()) {
//!         out.set(i, 1);
//!     }
//!     Ok(())
//! }
//!
//! wasp::module! {
//!     name: "all-equal",
//!     version: "0.1.0",
//!     endpoint_selection: selection,
//! }
//! ```
//!
//! Build the crate as a `cdylib` for `wasm32-unknown-unknown` with `rustc`
//! (see the crate's README.md). The crate has no dependencies beyond `std`.
//!
//! # Reading input
//!
//! [`Node`], [`ServicePort`], [`Endpoint`], [`Strings`], [`Decision`] and
//! [`Indices`] are views over the batch the host wrote into the module's
//! memory: reading them copies and allocates nothing, and the strings they
//! return borrow the batch, valid during the call.
//!
//! # Writing output
//!
//! A result can only name endpoints by their index in the service port, so a
//! module chooses among the endpoints it was given and can never add one.
//! Index sets are sorted and de-duplicated by the SDK; the host validates
//! every record and treats invalid output as a failure of that service port.
//! Returning an [`Error`] fails only the service port at hand: the host keeps
//! that port's last good result. A panic traps the call; the host then
//! retries the batch in halves, so it too ends up failing only the ports
//! that panic, at the cost of the retries.
//!
//! # Configuration
//!
//! A module that takes a configuration (wasp's `modules[].config`, a
//! ServiceProxyModule's `spec.config`) names a [`ConfigureFn`] in
//! [`module!`]'s `configure` field. It receives the configuration's JSON
//! on every new instance before the first stage call, and returns an
//! [`Error`] to reject it: wasp then does not load the module. Without a
//! handler a module accepts only no configuration.
//!
//! The byte layout is docs/abi.md of the wasp repository; this crate is
//! tested against its golden vectors.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod input;
mod layout;
mod metadata;
mod output;
mod types;

#[doc(hidden)]
pub mod __export {
    pub use crate::export::Global;
}
mod export;

pub use input::{Decision, Endpoint, Indices, Input, Node, ServicePort, Strings};
pub use metadata::Metadata;
pub use output::{
    ConfigureFn, EndpointSelectionFn, Handlers, Module, PolicyResult, SelectionResult, Set, TopologyFn,
    TopologyResult, TrafficPolicyFn,
};
pub use types::{
    Error, Protocol, Stage, TopologyMode, Weight, ABI_VERSION, BUFFER_EXPORT, CONFIGURE_EXPORT,
    LABEL_TOPOLOGY_REGION, LABEL_TOPOLOGY_ZONE, MARKER_EXPORT, MAX_ERROR_LEN, MAX_WEIGHT,
    METADATA_SECTION,
};

// The tests share their handlers with a module crate, which names this
// crate wasp.
#[cfg(test)]
extern crate self as wasp;
#[cfg(test)]
mod tests;
