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
// to 0 and exported as BudgetGlobal, and inserts before every branch that
// can go back to the start of a loop (br, br_if, br_table and br_on_null/
// br_on_non_null naming a loop label)
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
// backward branch. Control reaches the start of a loop again only by a
// branch to its label (or by a try_table catch clause naming it, whose
// check goes at the start of the try_table body, which every such
// iteration enters anew), so every iteration but a loop's first pays for
// itself, and no loop runs unchecked; code without backward branches runs
// to completion in bounded time (unbounded recursion exhausts the stack),
// and calls into host functions are the host's to bound.
//
// # Why at backward branches, and not at loop headers
//
// An earlier version put the check at the start of every loop body. Go's
// wasip1 port compiles every function into a loop, used to resume a
// goroutine at any call site, so that version paid the check on every
// call of every Go function, not only on iterations: about 1.4 times the
// uninstrumented time of wasp's full recomputation benchmark. Entering a
// loop is not an iteration, and the first pass through a loop body is
// bounded like any straight-line code, so only the branches back need a
// check; that brings the same benchmark within noise of uninstrumented
// code. A br_if to a loop is checked whether or not it is taken (a loop
// falls through it at most once per run); a br_table is checked if any
// of its targets is a loop.
//
// A cheaper check per iteration, a per-activation local counter that
// touches the global once every K iterations, was considered: it charges
// the shared budget K up front for each activation that branches back
// even once, so either the host refills K times more (and a spinning loop
// yields K times less often) or guests with many short loops yield K
// times more often. With the check at backward branches already within
// noise of uninstrumented code, that trade was not made.
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
// and a not-taken branch per backward branch, and a call into Go every
// budget's worth of them: BenchmarkGuestLoop measures it against both
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
