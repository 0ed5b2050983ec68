// Package worker runs a module in a process of its own: a worker, which
// is the running executable started again (see serve.go), with the
// module loaded by package runtime in it exactly as it would be in this
// process. A Module is a pipeline.Module: the pipeline hands it the
// encoded batches it would hand a runtime.Module, and gets back the same
// outputs and errors (*runtime.CallError).
//
// Whatever the module's code does, it does in the worker: a guest that
// escapes the runtime's bounds (a class of fault no bound foresaw) can
// stall or crash its worker, not the proxy, its health checks or the
// other stages. The worker runs under bounds of its own:
//
//   - a watchdog: a call not answered within the module's bounds
//     (Limits.Timeout, Limits.InitTimeout for an instance it may create)
//     and a grace of a second gets the worker killed;
//   - its resident memory, read every 20 ms while it has calls in flight,
//     may not pass Limits.PoolMemoryBytes and an overhead of 192 MiB
//     (killed past it); it counts the pages of the calls' shared memory
//     the worker touched, as it counted the buffers it read inputs into;
//   - RLIMIT_DATA at the address space its instances may reserve and
//     1 GiB, a bound that holds even between two readings;
//   - an OOM score of 1000, so that the kernel kills it first when the
//     node or wasp's cgroup runs out of memory;
//   - SIGKILL when the proxy dies (PR_SET_PDEATHSIG).
//
// The calls in flight when a worker dies fail (see Module.Call for their
// reasons), the worker is reaped, and the next call starts another,
// after a delay that grows while workers keep dying without answering a
// call. The pipeline then does what it does for any failed call:
// bisection, quarantine and the module's failure policy.
//
// # Protocol
//
// Parent and worker talk over two pipes in frames (frame.go): a load
// request with the module binary, its limits and configuration, then
// calls, answered by the module's raw output or its error. A call's input
// batch, exactly as the pipeline encoded it (docs/abi.md), and its output
// do not cross the pipes: they are in shared memory, a slot per call the
// worker may run at once (slots.go), which the parent copies the input
// into and the output out of, once each, checking where the worker says
// the output is. Calls run concurrently in the worker, up to
// Limits.Instances, and are answered in any order.
//
// Workers run on Linux only (ErrNotSupported elsewhere).
package worker
