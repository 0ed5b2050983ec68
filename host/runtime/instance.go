package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime/internal/wasmbin"
)

// instance is one instantiation of a module, used by one call at a time.
type instance struct {
	mod    api.Module
	buffer api.Function
	stages [len(abi.Stages) + 1]api.Function // by abi.Stage
	// configureFn is wasp_configure; nil if the module does not export it.
	configureFn api.Function
	budget      api.MutableGlobal // nil with InterruptCloseOnContextDone
	// watch is the deadline watchdog of the instance's calls; nil
	// without budget.
	watch     *callState
	stderr    *head
	stack     []uint64
	calls     int
	limit     uint64 // memory cap in bytes
	pool      *memoryPool
	refused   uint64        // pool.refused when the current call started
	timeout   time.Duration // per call
	closeOnce sync.Once
}

// newInstance instantiates the module, which runs its initialisation, and
// configures the instance (wasp_configure, if exported).
func (m *Module) newInstance(ctx context.Context) (*instance, error) {
	stderr := &head{max: 4096}
	cfg := wazero.NewModuleConfig().
		WithName(""). // many instances of one compiled module
		WithStartFunctions("_initialize").
		WithStderr(stderr).
		WithStdout(stderr)
	// The instance's minimum is reserved first: wazero panics when an
	// allocator cannot give a new memory its minimum.
	if !m.memory.reserve(m.minMemory + m.hostBytes) {
		return nil, classified{fmt.Errorf("instantiate: no room for a new instance's %d MiB of memory: the module's instances hold %d MiB of its %d MiB pool",
			(m.minMemory+m.hostBytes)>>20, m.memory.inUse()>>20, m.memory.limit>>20), errPoolFull}
	}
	res := &reservation{pool: m.memory, bytes: m.minMemory, extra: m.hostBytes}
	ictx, cancel := context.WithTimeout(ctx, m.limits.InitTimeout)
	defer cancel()
	ictx = experimental.WithMemoryAllocator(ictx, res)
	mod, err := instantiate(ictx, m.engine, m.compiled, cfg)
	res.cancel(err != nil)
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w%s", err, stderr.suffix())
	}
	in := &instance{mod: mod, stderr: stderr, stack: make([]uint64, 2), limit: m.limits.MemoryBytes, timeout: m.limits.InitTimeout, pool: m.memory}
	in.buffer = mod.ExportedFunction(abi.BufferExport)
	for _, s := range abi.Stages {
		in.stages[s] = mod.ExportedFunction(s.Export())
	}
	in.configureFn = mod.ExportedFunction(abi.ConfigureExport)
	if g, ok := mod.ExportedGlobal(wasmbin.BudgetGlobal).(api.MutableGlobal); ok {
		in.budget = g
		in.watch = newCallState(g)
		watchdogs.Store(mod, in.watch)
	}
	// Every instance gets the same configuration before its first call:
	// a pool is many copies of one configured module.
	msg, cerr := in.configure(ctx, m.Config)
	switch {
	case cerr != nil:
		in.close()
		return nil, fmt.Errorf("%s: %s", abi.ConfigureExport, cerr.detail())
	case msg != "":
		in.close()
		return nil, classified{fmt.Errorf("module %q rejected its configuration: %s", m.Name, msg), ErrConfigRejected}
	}
	in.timeout = m.limits.Timeout // configured under InitTimeout; calls get Timeout
	return in, nil
}

// instantiate is e.InstantiateModule, with a panic turned into an error:
// whatever a module makes wazero do while creating an instance, it must
// not take the process down.
func instantiate(ctx context.Context, e wazero.Runtime, c wazero.CompiledModule, cfg wazero.ModuleConfig) (mod api.Module, err error) {
	defer func() {
		if p := recover(); p != nil {
			mod, err = nil, fmt.Errorf("%w: %v", errRecovered, p)
		}
	}()
	return e.InstantiateModule(ctx, c, cfg)
}

// call writes input into the guest, runs the stage and copies the output.
func (in *instance) call(ctx context.Context, stage abi.Stage, input, dst []byte) ([]byte, *CallError) {
	in.calls++
	fn := in.stages[stage]
	if fn == nil {
		return dst, in.failure(stage, ReasonNoOutput, fmt.Errorf("no export %s", stage.Export()))
	}
	res, cerr := in.invoke(ctx, fn, input)
	if cerr != nil {
		cerr.Stage = stage
		return dst, cerr
	}
	optr, olen := uint32(res>>32), uint32(res)
	if olen == 0 {
		return dst, in.failure(stage, ReasonNoOutput, errors.New("the stage returned no output (malformed batch or unregistered stage)"))
	}
	// Refused before it is read: a copy of a huge output would cost the
	// host as much again.
	if max := abi.MaxOutputLen(input); max > 0 && uint64(olen) > uint64(max) {
		return dst, in.failure(stage, ReasonInvalidOutput, fmt.Errorf("output of %d bytes is longer than any valid output for this batch (%d)", olen, max))
	}
	view, ok := in.mod.Memory().Read(optr, olen)
	if !ok {
		return dst, in.failure(stage, ReasonInvalidOutput, fmt.Errorf("output [%d,+%d) outside linear memory", optr, olen))
	}
	return append(dst, view...), nil
}

// configure hands the instance its configuration through wasp_configure,
// if the module exports it. It returns the module's rejection message ("":
// accepted), or a *CallError (Stage 0) if the call itself failed.
func (in *instance) configure(ctx context.Context, config []byte) (string, *CallError) {
	if in.configureFn == nil {
		return "", nil
	}
	res, cerr := in.invoke(ctx, in.configureFn, config)
	if cerr != nil {
		return "", cerr
	}
	if res == 0 {
		return "", nil
	}
	optr, olen := uint32(res>>32), uint32(res)
	view, ok := in.mod.Memory().Read(optr, min(olen, abi.MaxConfigErrorLen))
	if !ok {
		return "", in.failure(0, ReasonInvalidOutput, fmt.Errorf("rejection message [%d,+%d) outside linear memory", optr, olen))
	}
	msg := strings.ToValidUTF8(strings.TrimSpace(string(view)), "\uFFFD")
	if msg == "" {
		msg = "(no message)"
	}
	return msg, nil
}

// failure is a failed call of the instance, with the first line of its
// stderr.
func (in *instance) failure(stage abi.Stage, r Reason, err error) *CallError {
	return &CallError{Stage: stage, Reason: r, Err: err, Stderr: in.stderr.String()}
}

// invoke writes input into a buffer from wasp_buffer and runs fn on it,
// under one deadline, and returns fn's result. The error's Stage is left
// for the caller to set.
func (in *instance) invoke(ctx context.Context, fn api.Function, input []byte) (uint64, *CallError) {
	in.refused = in.pool.refused.Load()
	var cctx context.Context
	if st := in.watch; st != nil {
		// The instance's own watchdog, armed at the call's first yield
		// (callState.arm): no timer nor context to make per call, which
		// cost as much as a small stage's guest code.
		// yield finds it by the instance (watchdogs): no context to
		// make per call either.
		st.start(in.timeout)
		cctx = ctx
		defer st.end()
	} else {
		// wazero closes the module when this context is done.
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, in.timeout)
		defer cancel()
	}
	classify := func(err error) (uint64, *CallError) {
		var exit *sys.ExitError
		interrupted := in.isInterrupted(err)
		switch {
		case in.outOfMemory():
			// Checked first: a guest near its cap often spends its last
			// moments collecting garbage until the deadline stops it.
			return 0, in.failure(0, ReasonMemory, fmt.Errorf("linear memory at its cap of %d MiB: %w", in.limit>>20, err))
		case interrupted && ctx.Err() != nil:
			// The caller's context ended, not the call's own deadline.
			return 0, in.failure(0, ReasonTimeout, ctx.Err())
		case interrupted:
			return 0, in.failure(0, ReasonTimeout, fmt.Errorf("deadline exceeded: %w", context.DeadlineExceeded))
		case errors.As(err, &exit):
			return 0, in.failure(0, ReasonExit, err)
		}
		return 0, in.failure(0, ReasonTrap, err)
	}

	in.stack = in.stack[:2]
	in.stack[0] = uint64(len(input))
	if err := in.buffer.CallWithStack(cctx, in.stack); err != nil {
		return classify(err)
	}
	ptr := uint32(in.stack[0])
	if ptr == 0 || !in.mod.Memory().Write(ptr, input) {
		if in.outOfMemory() {
			return 0, in.failure(0, ReasonMemory, fmt.Errorf("no room for a %d-byte input under the %d MiB cap", len(input), in.limit>>20))
		}
		return 0, in.failure(0, ReasonTrap, fmt.Errorf("%s returned an unusable buffer for %d bytes", abi.BufferExport, len(input)))
	}
	in.stack[0], in.stack[1] = uint64(ptr), uint64(len(input))
	if err := fn.CallWithStack(cctx, in.stack); err != nil {
		return classify(err)
	}
	return in.stack[0], nil
}

// outOfMemory reports whether linear memory has reached its cap (within a
// page of slack a failed grow leaves), or the module's pool refused a grow
// during the call.
func (in *instance) outOfMemory() bool {
	size := uint64(in.mod.Memory().Size())
	return size+pageSize*16 >= in.limit || in.pool.refused.Load() > in.refused ||
		strings.Contains(in.stderr.String(), "out of memory")
}

// isInterrupted reports whether err is how an interrupted call ends: a
// panic of yield or of a host function's checkDeadline, or wazero's own
// close on deadline.
func (in *instance) isInterrupted(err error) bool {
	if errors.Is(err, errInterrupted) {
		// yield, or a host function's checkDeadline (either mode).
		return true
	}
	var exit *sys.ExitError
	return in.budget == nil && errors.As(err, &exit) && (exit.ExitCode() == sys.ExitCodeDeadlineExceeded || exit.ExitCode() == sys.ExitCodeContextCanceled)
}

// yieldInterval is how much work, in the cost units of package wasmbin
// (about one Wasm instruction each), an instrumented guest does between
// two calls to yield at first: each check charges the work since the
// previous one. A yield costs about as much as a few hundred instructions,
// so this keeps its cost within noise (BenchmarkGuestLoop in package
// wasmbin), while a guest that never returns still comes back into Go
// every millisecond or so, so a garbage collection waiting to stop the
// world is never held up for long.
//
// Checks after a call whose callee is not known charge the most any
// function could have done, which is far more than most do: a guest making
// many such calls would yield far more often than every millisecond. So a
// call adapts its grant to the time between its yields: it doubles the
// grant, up to maxGrant, while yields come less than yieldPeriod/4 apart,
// and halves it, down to yieldInterval, when they come more than
// yieldPeriod apart. The deadline does not depend on the grant: the
// watchdog empties the budget when it fires.
const (
	yieldInterval = 1 << 20
	maxGrant      = 1 << 26
	yieldPeriod   = time.Millisecond
)

// errInterrupted is the panic of yield in a call whose context is done.
// wazero recovers it and returns it wrapped from the call.
var errInterrupted = errors.New("guest interrupted at a loop iteration")

// callState is what yield and the deadline watchdog of an instance's
// calls share. One serves every call of the instance, one at a time.
type callState struct {
	mu     sync.Mutex // serialises writes to budget
	budget api.MutableGlobal
	ended  bool // the call returned, and the instance may serve another
	// grant is what the next yield grants; last is when the previous one
	// happened (or the call started), on the monotonic clock.
	grant int64
	last  time.Duration
	// deadline is when the call runs out of time, on the monotonic
	// clock; timer empties the budget then.
	deadline time.Duration
	timer    *time.Timer
	// armed: timer, and stopParent if the caller's context can end, are
	// set for the current call. Only the call's goroutine touches them.
	armed      bool
	stopParent func() bool
}

// newCallState returns the watchdog of the instance whose budget global
// is budget, not armed.
func newCallState(budget api.MutableGlobal) *callState {
	st := &callState{budget: budget, ended: true}
	st.timer = time.AfterFunc(time.Hour, st.interrupt)
	st.timer.Stop()
	return st
}

// start sets the watchdog up for a call of timeout.
func (st *callState) start(timeout time.Duration) {
	now := monotonic()
	st.mu.Lock()
	st.ended, st.grant, st.last, st.deadline = false, yieldInterval, now, now+timeout
	st.mu.Unlock()
}

// arm starts the timer of the call, and ties the watchdog to the caller's
// context ctx, at the call's first yield. Before it, the call has done at
// most its first grant of work (yieldInterval, about a millisecond), so
// the calls that end sooner, nearly all, need neither; a call that
// reaches its first yield past its deadline, or with its context done,
// fails there, as later ones do.
func (st *callState) arm(ctx context.Context, now time.Duration) {
	st.armed = true
	st.timer.Reset(st.deadline - now)
	if ctx.Done() != nil {
		st.stopParent = context.AfterFunc(ctx, st.interrupt)
	}
}

// expired reports whether the call is past its deadline.
func (st *callState) expired(now time.Duration) bool {
	return now >= st.deadline
}

// epoch is the origin of monotonic.
var epoch = time.Now()

// monotonic is the monotonic clock's time since epoch: cheaper than
// time.Now, which reads the wall clock too, on every call.
func monotonic() time.Duration { return time.Since(epoch) }

// watchdogs maps each instance with a watchdog (an api.Module) to it, for
// yield, which wazero gives the calling instance and the call's context.
// Found there rather than in a context value, a call needs no context of
// its own: that was an allocation per call, three per service port.
var watchdogs sync.Map

// nextGrant adapts the grant to the time since the previous yield (see
// yieldInterval) and returns it.
func (st *callState) nextGrant(now time.Duration) int64 {
	switch since := now - st.last; {
	case since < yieldPeriod/4:
		st.grant = min(st.grant*2, maxGrant)
	case since > yieldPeriod:
		st.grant = max(st.grant/2, yieldInterval)
	}
	st.last = now
	return st.grant
}

// interrupt runs when the call's deadline passes or its context is done
// (or late, after the call, and then does nothing): it empties the budget,
// so that the guest yields at its next loop iteration instead of finishing
// its current allowance. The guest's own decrement may overwrite the zero;
// it then yields when the allowance runs out, at most yieldInterval
// iterations later.
func (st *callState) interrupt() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.ended {
		st.budget.Set(0)
	}
}

// end disarms the watchdog, and stops a late interrupt from touching the
// instance. An interrupt that runs anyway during the instance's next call
// (its timer fired just as this one ended) costs that call one early
// yield, which grants it more: yield fails a call only past its own
// deadline.
func (st *callState) end() {
	if st.armed {
		st.armed = false
		st.timer.Stop()
		if st.stopParent != nil {
			st.stopParent()
			st.stopParent = nil
		}
	}
	st.mu.Lock()
	st.ended = true
	st.mu.Unlock()
}

// yield is the function instrumented guests import (see package wasmbin):
// they call it each time their budget of loop iterations runs out. wazero
// passes it the context of the call. If that context is done, or the call
// is past its deadline, yield fails the call; otherwise it grants the
// guest more iterations (see yieldInterval).
// Either way the guest's goroutine is back in Go code, where the Go
// scheduler can preempt it: without that, a garbage collection starting
// while a guest spins waits forever to stop the world, and the timer that
// would end the call never runs.
func yield(ctx context.Context, mod api.Module, _ []uint64) {
	if ctx.Err() != nil {
		panic(fmt.Errorf("%w: %w", errInterrupted, context.Cause(ctx)))
	}
	if v, ok := watchdogs.Load(mod); ok {
		st := v.(*callState)
		now := monotonic()
		if !st.armed {
			st.arm(ctx, now)
		}
		st.mu.Lock()
		if st.expired(now) {
			st.mu.Unlock()
			panic(fmt.Errorf("%w: %w", errInterrupted, context.DeadlineExceeded))
		}
		st.budget.Set(uint64(st.nextGrant(now)))
		st.mu.Unlock()
		return
	}
	// Instantiation, which runs the module's start functions, has no
	// watchdog and no state.
	if g, ok := mod.ExportedGlobal(wasmbin.BudgetGlobal).(api.MutableGlobal); ok {
		g.Set(yieldInterval)
	}
}

// checkDeadline stops the calling guest, as yield does, if its call is
// past its deadline or its context is done; otherwise it returns. Host
// functions whose work depends on their arguments call it before (and,
// for long work, between parts of) that work, so that a guest cannot
// outrun its deadline inside the host.
func checkDeadline(ctx context.Context, mod api.Module) {
	if ctx.Err() != nil {
		panic(fmt.Errorf("%w: %w", errInterrupted, context.Cause(ctx)))
	}
	if v, ok := watchdogs.Load(mod); ok {
		st := v.(*callState)
		st.mu.Lock()
		expired := !st.ended && st.expired(monotonic())
		st.mu.Unlock()
		if expired {
			panic(fmt.Errorf("%w: %w", errInterrupted, context.DeadlineExceeded))
		}
	}
}

func (in *instance) close() {
	in.closeOnce.Do(func() {
		if in.watch != nil {
			in.watch.timer.Stop()
			watchdogs.Delete(in.mod)
		}
		_ = in.mod.Close(context.Background())
	})
}

// head keeps the first max bytes written to it: a Go guest's fatal error
// or panic message comes first, its goroutine dump after.
type head struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (h *head) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// String returns the first non-empty line written.
func (h *head) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, line := range strings.Split(string(h.buf), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

func (h *head) suffix() string {
	if s := h.String(); s != "" {
		return " (stderr: " + s + ")"
	}
	return ""
}
