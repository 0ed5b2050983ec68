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
// Instrument makes every loop count down a budget instead, and call back
// into the host when it runs out. It adds a function import
// YieldModule.YieldFunc of type () -> (), a mutable i32 global initialised
// to 0 and exported as BudgetGlobal, and inserts at the start of every loop
// body
//
//	global.get $budget
//	i32.const 1
//	i32.sub
//	global.set $budget
//	global.get $budget
//	i32.const 0
//	i32.lt_s
//	if
//	  call $yield
//	end
//
// The host's yield function either fails the call (its deadline has
// passed, or it was cancelled) or refills the budget; a watchdog in the
// host empties the budget at the deadline, so the guest yields at its next
// loop iteration. Every back-edge of a WebAssembly function targets a loop,
// so no loop runs unchecked; code without loops runs to completion in
// bounded time, and calls into host functions are the host's to bound.
//
// # Why yield, and not only a flag
//
// An earlier version inserted only a check of an interrupt flag the host
// set at the deadline (global.get; if; unreachable; end). That deadlocks:
// a goroutine running a guest's machine code cannot be preempted by the Go
// scheduler, so when a garbage collection starts, its stop-the-world waits
// for the spinning goroutine forever, and the timer goroutine that would
// set the flag never runs. A guest must come back into Go code
// periodically whether or not a deadline has passed; the yield import is
// that way back, and the deadline check rides on it. The flag would now
// only duplicate what an empty budget does, at the cost of a second load
// and branch per iteration, so there is none.
//
// The check decrements before it tests, and tests for a negative budget,
// so that a zero the watchdog writes between the guest's reads makes it
// yield at the next iteration instead of wrapping around; the guest's
// own write may overwrite the zero, and then it yields when its budget
// runs out, as it would anyway. The cost is a load, a store, another load
// and a not-taken branch per iteration, and a call into Go every budget's
// worth of iterations: BenchmarkGuestLoop measures it against both
// alternatives in one run.
//
// # Renumbering
//
// The yield import goes after the existing imports, so its function index
// is the number of imported functions, and every defined function moves up
// by one. Instrument renumbers every place a module names a function: call,
// return_call and ref.func in code; ref.func in constant expressions
// (global and table initialisers, element segment offsets and items);
// function exports; the start function; and the function index vectors of
// element segments. The import's type is the first () -> () type of the
// type section outside recursion groups, or one appended to it. Only the
// function index space changes: the added global goes after all others and
// the added type after all others.
//
// The rewrite decodes every instruction, so that the immediates of one are
// never mistaken for another's opcode. It knows the core specification 2.0
// and the extensions Go and Rust toolchains emit (sign extension,
// non-trapping conversions, bulk memory, reference types, multi-value,
// SIMD, threads, exception handling, tail calls, multi-memory) and returns
// an error wrapping ErrUnknownOpcode on anything else, such as GC
// instructions. It drops the "name", ".debug_*" and "metadata.code.*"
// custom sections, whose function indices or code offsets become stale.
// The same input always gives the same output.
package wasmbin
