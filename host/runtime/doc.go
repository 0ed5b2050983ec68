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
// A call that traps, times out, exhausts memory or returns garbage is
// reported as a *CallError with a Reason; the instance is discarded and
// replaced on the next call, so one bad call never poisons the next.
// Instances are also recycled after a number of calls or when their linear
// memory grows past a threshold, because Wasm memory never shrinks.
package runtime
