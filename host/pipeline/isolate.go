package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// fanOut is how many parts a call that failed as a whole is split into,
// when it carried more than fanOut² ports; a smaller one is split into
// single ports at once. A spinning port costs each call that carries it
// the whole timeout (2 s by default), so isolation costs its failed calls,
// not its ports: halving makes up to 2k failed calls per level for k
// spinning ports, one level after the other, where single ports make k,
// and sixteen parts reach single ports in two levels up to 4,096 ports
// (RATIONALE.md, "Why bisect a failing batch?"). A call of one port that
// succeeds costs tens of microseconds, so 256 of them are cheaper than a
// single failed call more.
const fanOut = 16

// outcome is what a stage's evaluation did with a port.
type outcome uint8

const (
	// outCalled: a call that succeeded carried the port (its result, or
	// the module's error record for it, is in decisions or errs).
	outCalled outcome = iota
	// outIsolated: a call that carried the port alone failed.
	outIsolated
	// outNotIsolated: a call that carried the port with others failed,
	// and the budget ran out before it was told apart.
	outNotIsolated
	// outSkipped: the port's failure in quarantine was applied again
	// without a call.
	outSkipped
	// outUnrun: the call could not run (no instance, the sync stopped);
	// nothing was learnt about the port.
	outUnrun
)

// task is one call to make: the ports idx.
type task struct {
	idx []int
	// isolating: a part of a failed call, or a port in quarantine; it is
	// not started once the budget is spent.
	isolating bool
	// known is the port's quarantine entry, for a port in quarantine.
	known *suspect
	// cause is the failure of the call it is a part of.
	cause error
	// chunk is where a chunk of the batch keeps its encoding for the
	// next stage; nil for the other tasks.
	chunk *chunkInput
}

// isolation runs one stage's calls of a Run on up to len(workers)
// goroutines: the batch's chunks first, then the parts of the calls that
// failed, breadth first, then the ports in quarantine, each alone.
type isolation struct {
	p         *Pipeline
	ctx       context.Context
	stage     abi.Stage
	node      abi.Node
	mod       Module
	sps       []abi.ServicePort
	decisions []abi.Decision
	// errs and outcomes are per port; each task writes only its ports'.
	errs     []error
	outcomes []outcome
	workers  []worker

	mu      sync.Mutex
	cond    sync.Cond
	queue   []task // chunks, then parts of failed calls
	alone   []task // ports in quarantine
	running int    // tasks taken and not done
	started int    // goroutines working, this one included
	spent   time.Duration
	wg      sync.WaitGroup
}

// run makes the calls of tasks and alone, and of the parts of those that
// fail, and returns when all are done.
func (is *isolation) run(tasks, alone []task) {
	is.cond.L = &is.mu
	is.queue, is.alone = tasks, alone
	is.mu.Lock()
	is.started = 1
	is.spawnLocked()
	is.mu.Unlock()
	is.work(&is.workers[0])
	is.wg.Wait()
}

// spawnLocked starts a goroutine for each task waiting beyond those the
// running goroutines can take, up to one per worker.
func (is *isolation) spawnLocked() {
	for is.started < len(is.workers) && is.started < is.running+len(is.queue)+len(is.alone) {
		w := &is.workers[is.started]
		is.started++
		is.wg.Add(1)
		go func() {
			defer is.wg.Done()
			is.work(w)
		}()
	}
}

// work takes tasks until there are none left.
func (is *isolation) work(w *worker) {
	for {
		is.mu.Lock()
		for len(is.queue)+len(is.alone) == 0 && is.running > 0 {
			is.cond.Wait()
		}
		var t task
		switch {
		case len(is.queue) > 0:
			t, is.queue = is.queue[0], is.queue[1:]
		case len(is.alone) > 0:
			t, is.alone = is.alone[0], is.alone[1:]
		default:
			is.mu.Unlock()
			is.cond.Broadcast()
			return
		}
		is.running++
		is.mu.Unlock()

		parts := is.do(w, t)

		is.mu.Lock()
		is.queue = append(is.queue, parts...)
		is.running--
		is.spawnLocked()
		is.mu.Unlock()
		is.cond.Broadcast()
	}
}

// overBudget reports whether the failed calls used up the budget.
func (is *isolation) overBudget() bool {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.spent >= is.p.opts.BisectBudget
}

// charge counts a failed call's duration against the budget.
func (is *isolation) charge(d time.Duration) {
	is.mu.Lock()
	is.spent += d
	is.mu.Unlock()
}

// do makes t's call and returns the parts to call next if it failed.
func (is *isolation) do(w *worker, t task) []task {
	if t.isolating && is.overBudget() {
		if t.known != nil && t.known.isolated {
			// Its retry waits for a Run with budget to spare.
			is.set(t.idx, outSkipped, fmt.Errorf("%w: its retry waits for an evaluation with bisect budget to spare; it failed alone: %w",
				ErrQuarantined, t.known.err))
			return nil
		}
		is.notIsolated(t.idx, t.cause)
		return nil
	}
	d, err := is.call(w, t)
	if runtime.ReasonOf(err) == runtime.ReasonInstantiate && is.ctx.Err() == nil {
		// No instance ran the ports: a fresh one may start (the last
		// may have run out of time on a loaded machine).
		is.charge(d)
		d, err = is.call(w, t)
	}
	if err == nil {
		is.set(t.idx, outCalled, nil)
		return nil
	}
	is.charge(d)
	switch {
	case is.ctx.Err() != nil || runtime.ReasonOf(err) == runtime.ReasonInstantiate:
		is.set(t.idx, outUnrun, err)
	case len(t.idx) == 1:
		is.set(t.idx, outIsolated, err)
	case is.overBudget():
		is.notIsolated(t.idx, err)
	default:
		return split(t.idx, err)
	}
	return nil
}

// call makes t's call, with a panic anywhere on its path (the module's
// runtime, the output's decoding) turned into a failed call of t's ports:
// it runs on a goroutine of its own, where a panic would end the process.
func (is *isolation) call(w *worker, t task) (d time.Duration, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &runtime.CallError{Module: nameOf(is.mod), Stage: is.stage, Reason: runtime.ReasonTrap, Err: fmt.Errorf("wasp recovered from a panic on the call path: %v", p)}
		}
	}()
	return is.p.call(is.ctx, w, is.mod, is.stage, is.node, is.sps, t.idx, is.decisions, is.errs, t.chunk)
}

// set records the outcome of the ports idx, and their error.
func (is *isolation) set(idx []int, o outcome, err error) {
	for _, i := range idx {
		is.outcomes[i] = o
		if err != nil {
			is.errs[i] = err
		}
	}
}

// notIsolated fails the ports idx, which a call that failed with cause
// carried, without blaming them.
func (is *isolation) notIsolated(idx []int, cause error) {
	if cause == nil {
		cause = fmt.Errorf("its last failure was not isolated either")
	}
	// cause is not wrapped: it is not known to be this port's.
	is.set(idx, outNotIsolated, fmt.Errorf("%w within the bisect budget (%v of failed calls), evaluated alone next time; a call with it failed: %v",
		ErrNotIsolated, is.p.opts.BisectBudget, cause))
}

// split divides the ports of a failed call into fanOut parts, or into
// single ports when there are at most fanOut² of them.
func split(idx []int, cause error) []task {
	n := fanOut
	if len(idx) <= fanOut*fanOut {
		n = len(idx)
	}
	parts := make([]task, 0, n)
	for k := range n {
		lo, hi := k*len(idx)/n, (k+1)*len(idx)/n
		parts = append(parts, task{idx: idx[lo:hi], isolating: true, cause: cause})
	}
	return parts
}
