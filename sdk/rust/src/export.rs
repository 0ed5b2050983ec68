//! The exports of a module (docs/abi.md §2.1) and the macro that declares
//! them.

use std::cell::UnsafeCell;

use crate::output::Module;
use crate::types::Stage;

/// The module instance's state, kept in a static by [`module!`](crate::module).
///
/// A Wasm instance runs one call at a time and has a single thread, so the
/// exported functions are its only users and never overlap. It is not meant
/// for native code: use a [`Module`] there.
#[doc(hidden)]
pub struct Global(UnsafeCell<Module>);

// SAFETY: only the exported functions touch the cell, and the host calls
// them one at a time on a single-threaded instance (docs/abi.md §2.3).
unsafe impl Sync for Global {}

impl Global {
    #[doc(hidden)]
    pub const fn new(m: Module) -> Global {
        Global(UnsafeCell::new(m))
    }

    #[doc(hidden)]
    pub fn buffer(&self, size: u32) -> u32 {
        // SAFETY: see the Sync impl; no other reference to the module exists
        // during this call.
        unsafe { (*self.0.get()).buffer(size) as usize as u32 }
    }

    #[doc(hidden)]
    pub fn call(&self, stage: Stage, ptr: u32, len: u32) -> u64 {
        // SAFETY: as in buffer.
        unsafe { (*self.0.get()).call(stage, ptr, len) }
    }

    /// Runs f on the module: a stage export's way to pass its handler
    /// to the generic [`Module`] call of its stage.
    #[doc(hidden)]
    pub fn with<R>(&self, f: impl FnOnce(&mut Module) -> R) -> R {
        // SAFETY: as in buffer; the reference ends with f.
        unsafe { f(&mut *self.0.get()) }
    }

    #[doc(hidden)]
    pub fn configure(&self, ptr: u32, len: u32) -> u64 {
        // SAFETY: as in buffer.
        unsafe { (*self.0.get()).call_configure(ptr, len) }
    }
}

/// Declares a module: its metadata and its handlers. It exports, for the
/// host, `memory` (the linker does), `wasp_abi_v1`, `wasp_buffer`,
/// `wasp_configure`, the function of every stage given, and writes the
/// `wasp.metadata` custom section. Use it once, in the crate built as the
/// module's `cdylib`.
///
/// Fields, in this order: `name` and `version` (required), then
/// `min_host_version` and `description` (optional), then `configure`
/// (optional, a [`ConfigureFn`](crate::ConfigureFn): without it the module
/// accepts only no configuration), then at least one of `topology`,
/// `traffic_policy` and `endpoint_selection`, each a function of the
/// matching handler type ([`TopologyFn`](crate::TopologyFn),
/// [`TrafficPolicyFn`](crate::TrafficPolicyFn),
/// [`EndpointSelectionFn`](crate::EndpointSelectionFn)). The metadata's
/// stages are the handlers given. Invalid metadata is a compile error.
///
/// ```ignore
/// wasp::module! {
///     name: "all-equal",
///     version: "0.1.0",
///     description: "Weight 1 for every chosen endpoint.",
///     endpoint_selection: selection,
/// }
/// ```
#[macro_export]
macro_rules! module {
    (
        name: $name:expr,
        version: $version:expr,
        $(min_host_version: $min:expr,)?
        $(description: $desc:expr,)?
        $(configure: $cfg:expr,)?
        $(topology: $topo:expr,)?
        $(traffic_policy: $policy:expr,)?
        $(endpoint_selection: $sel:expr $(,)?)?
    ) => {
        const _: () = {
            const HANDLERS: $crate::Handlers = $crate::Handlers {
                topology: $crate::__option!($($topo)?),
                traffic_policy: $crate::__option!($($policy)?),
                endpoint_selection: $crate::__option!($($sel)?),
                configure: $crate::__option!($($cfg)?),
            };
            const METADATA: $crate::Metadata = $crate::Metadata {
                name: $name,
                version: $version,
                stages: &[
                    $($crate::__first!($crate::Stage::Topology, $topo),)?
                    $($crate::__first!($crate::Stage::TrafficPolicy, $policy),)?
                    $($crate::__first!($crate::Stage::EndpointSelection, $sel),)?
                ],
                min_host_version: $crate::__or_empty!($($min)?),
                description: $crate::__or_empty!($($desc)?),
            };
            const _: () = METADATA.check();

            #[link_section = "wasp.metadata"]
            #[used]
            static SECTION: [u8; METADATA.json_len()] = METADATA.json();

            static MODULE: $crate::__export::Global =
                $crate::__export::Global::new($crate::Module::new(HANDLERS));

            /// Marks the module as speaking ABI v1; never called.
            #[no_mangle]
            pub extern "C" fn wasp_abi_v1() {}

            #[no_mangle]
            pub extern "C" fn wasp_buffer(size: u32) -> u32 {
                MODULE.buffer(size)
            }

            #[no_mangle]
            pub extern "C" fn wasp_configure(ptr: u32, len: u32) -> u64 {
                MODULE.configure(ptr, len)
            }

            $(
                #[no_mangle]
                pub extern "C" fn wasp_topology(ptr: u32, len: u32) -> u64 {
                    MODULE.with(|m| m.call_topology(ptr, len, $topo))
                }
            )?
            $(
                #[no_mangle]
                pub extern "C" fn wasp_traffic_policy(ptr: u32, len: u32) -> u64 {
                    MODULE.with(|m| m.call_traffic_policy(ptr, len, $policy))
                }
            )?
            $(
                #[no_mangle]
                pub extern "C" fn wasp_endpoint_selection(ptr: u32, len: u32) -> u64 {
                    MODULE.with(|m| m.call_endpoint_selection(ptr, len, $sel))
                }
            )?
        };
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __option {
    () => {
        ::core::option::Option::None
    };
    ($f:expr) => {
        ::core::option::Option::Some($f)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __or_empty {
    () => {
        ""
    };
    ($s:expr) => {
        $s
    };
}

/// Expands to its first argument; the second only drives a repetition.
#[doc(hidden)]
#[macro_export]
macro_rules! __first {
    ($a:expr, $b:expr) => {
        $a
    };
}
