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
// Instrument makes the guest count down a budget instead, and call back
// into the host when it runs out. It adds a function import
// YieldModule.YieldFunc of type () -> (), a mutable i32 global initialised
// to 0 and exported as BudgetGlobal, and inserts checks
//
//	global.get $budget
//	i32.const $weight
//	i32.sub
//	global.set $budget
//	global.get $budget
//	i32.const 0
//	i32.lt_s
//	if
//	  call $yield
//	end
//
// where $weight is the work, in cost units of about one instruction, done
// since the previous check. The host's yield function either fails the
// call (its deadline has passed, or it was cancelled) or refills the
// budget; a watchdog in the host empties the budget at the deadline, so
// the guest yields at its next check.
//
// # Where the checks go
//
// Loops are not the only way to run for ever: an exponential tree of
// recursive calls, or a chain of distinct functions each calling the next
// twice (2^n calls and no cycle), has no loop at all. Instrument bounds
// the work between two checks by SegmentCost whatever the code's shape:
//
//   - before every branch that can go back to the start of a loop (br,
//     br_if, br_table and br_on_null/br_on_non_null naming a loop label,
//     and at the start of the body of a try_table whose catch clauses name
//     one);
//   - before and after every call to a function of the caller's own
//     strongly connected component of the call graph (a call that may
//     recurse, directly or not, including tail calls), so that every
//     cycle of calls passes a check;
//   - before and after every indirect call (call_indirect, call_ref and
//     their tail forms), whose callee is not known;
//   - wherever else the work since the last check could pass SegmentCost:
//     the walk of a body keeps, for every point, the most work done since
//     the last check on any path to it, adding one per instruction and,
//     for a direct call, what the callee exposes (the work from its entry
//     to its first check, from its last check to its return, or through
//     it where no check is passed). Callees are walked before their
//     callers (components in reverse topological order), so that what
//     each exposes is known when its callers are walked.
//
// Small call trees, the hot leaf functions of real guests, get no check;
// large ones get one where their cost adds up. On wasp's default modules
// the checks outside loops add 1 to 7 % to the number of checks run
// (TestCallChecksAreRare); BenchmarkCallChecks measures the time.
//
// # Bulk instructions
//
// memory.fill and memory.copy do work in proportion to an operand, up to
// the whole memory: Instrument replaces each with a call to a function it
// appends, which does the same in parts of at most BulkChunk bytes, each
// charged its size before it runs (bulk.go). table.fill, table.copy,
// table.grow, table.init and memory.init are charged statically the most
// they can do. So the work between two checks stays bounded, whatever the
// memory's cap.
//
// # Tables
//
// A table lives in the host's memory, outside the linear memory cap: one
// table.grow of 2^27 entries costs a gigabyte. Instrument caps every
// table's maximum at MaxTableEntries divided among the module's tables, so
// that a table.grow past it fails as the specification says (it returns
// -1), and refuses a declared minimum above it.
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
