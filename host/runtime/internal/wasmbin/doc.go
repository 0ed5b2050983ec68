// Package wasmbin reads and rewrites WebAssembly module binaries before wasp
// compiles them.
//
// # Reading
//
// Parse checks the header and the section framing of a module and decodes
// its imports and exports; everything else stays undecoded bytes, so parsing
// a multi-megabyte Go module costs one pass over its section headers.
// AppendCustomSection embeds data (such as module metadata) in a custom
// section, replacing an earlier one of the same name.
//
// # Interrupting a runaway guest
//
// A guest that spins in a loop never returns to the host, and wazero cannot
// preempt native code. wazero's own answer,
// RuntimeConfig.WithCloseOnContextDone(true), compiles a call into the Go
// runtime at every loop back-edge of every function, which makes tight loops
// several times slower (4.6× to 9× measured on wasp's guests), whether or not
// a deadline is ever reached.
//
// Instrument applies "epoch interruption" to the binary instead. It adds one
// mutable i32 global, initialised to 0 and exported as InterruptGlobal, and
// inserts at the start of every loop body
//
//	global.get $interrupt
//	if
//	  unreachable
//	end
//
// A watchdog in the host sets the global to 1 when a call's deadline
// passes; the guest traps at its next loop iteration and the host discards
// the instance, whose state may be inconsistent. Every back-edge of a
// WebAssembly function targets a loop, so no loop can run unchecked; code
// without loops runs to completion in bounded time, and calls into host
// functions are the host's to bound. The cost is a global load and a
// not-taken branch per iteration: BenchmarkGuestLoop measures it against
// both alternatives in one run (on a tight Go loop: instrumented within
// noise of uninstrumented, WithCloseOnContextDone about 24× slower).
//
// The rewrite decodes every instruction, so that the immediates of one are
// never mistaken for another's opcode. It knows the core specification 2.0
// and the extensions Go and Rust toolchains emit (sign extension,
// non-trapping conversions, bulk memory, reference types, multi-value,
// SIMD, threads, exception handling, tail calls, multi-memory) and returns
// an error wrapping ErrUnknownOpcode on anything else, such as GC
// instructions. It drops the "name" and ".debug_*" custom sections, whose
// code offsets become stale.
package wasmbin
