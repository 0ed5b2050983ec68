// Package runtime loads and runs wasp policy modules in wazero.
//
// A Runtime compiles each module once per content digest (and caches the
// machine code on disk when given a directory), checks its ABI marker,
// metadata, imports and exports before instantiating it, and keeps a small
// pool of instances per module with their function handles looked up once.
//
// Modules run sandboxed: they get WASI with no filesystem, network,
// environment, arguments or real clock (wazero's deterministic defaults), a
// cap on linear memory, and a per-call deadline that really stops a spinning
// guest. The deadline works by instrumenting the module binary (see package
// wasmbin) instead of wazero's WithCloseOnContextDone, whose per-loop exit
// into Go costs several times the guest's own work; both are available and
// measured in docs/performance.md.
//
// # Yielding
//
// An instrumented module counts down a budget of loop iterations (the
// exported global wasp.budget) and calls the host function wasp.yield when
// it runs out, every 2^16 iterations. Each engine provides that function.
// It finds the call's state in the context wazero passes it: if the call's
// deadline has passed or its context was cancelled, it panics with an
// error wazero returns from the call, which is classified ReasonTimeout;
// otherwise it refills the budget. At the deadline a watchdog also empties
// the budget, so the guest yields at its next iteration.
//
// The yield is not only how the deadline is enforced: it is what keeps a
// spinning guest from deadlocking the whole process. The Go scheduler
// cannot preempt a goroutine running a guest's machine code, so a garbage
// collection that starts while a guest spins waits to stop the world until
// the guest returns into Go, and until then no other goroutine runs,
// including the timer that would end the call. A guest that only checked a
// flag set by that timer (as wasp once did) hangs the process at the first
// collection; a guest that yields comes back into Go every few tens of
// microseconds of tight looping, deadline or not. TestSpinUnderGC spins a
// guest while forcing collections.
//
// Modules may not import from wasp themselves: Inspect accepts only WASI
// imports, and runs on the binary before the instrumenter adds its import.
//
// # Configuration
//
// A module may export wasp_configure (docs/abi.md §2.7). Load's WithConfig
// gives it its configuration, which every instance, the first at load and
// each one the pool creates later, receives after its initialisation and
// before its first call. Load fails with ErrConfigRejected when the module
// rejects the configuration or cannot take one; the compiled code stays
// keyed by the binary's digest alone, so one binary under several
// configurations is compiled once.
//
// # Compiling
//
// wazero's compiler takes time quadratic in some shapes of valid code and
// cannot be stopped once started. Load measures every function body first
// and refuses a module past CompileLimits, naming the function and the
// limit; with Config.IsolateCompile it then compiles in a child process
// (this executable, started again: see compile_child.go), which is killed
// past the time or memory limit, and loads the machine code from the
// compilation cache. Without it, Load stops waiting at the time limit
// and the compilation goes on in the background. Either way the error
// wraps ErrCompile.
//
// A call that traps, times out, exhausts memory or returns garbage is
// reported as a *CallError with a Reason; the instance is discarded and
// replaced on the next call, so one bad call never poisons the next.
// Instances are also recycled after a number of calls or when their linear
// memory grows past a threshold, because Wasm memory never shrinks.
package runtime
