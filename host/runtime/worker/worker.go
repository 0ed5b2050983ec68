package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// ErrWorkerDied is wrapped by the error of a call whose worker died or
// was killed before it answered, and of the calls made while it restarts.
var ErrWorkerDied = errors.New("module worker died")

// ErrNotSupported is returned by Load where workers cannot run (not
// Linux).
var ErrNotSupported = errors.New("module workers are not supported on " + goruntime.GOOS)

// Opts say what a worker loads, and how.
type Opts struct {
	// Name is the module's name, for logs, metrics and errors, as
	// runtime.Runtime.Load's. Required.
	Name string
	// Wasm is the module binary. Required.
	Wasm []byte
	// Limits bound what the module may use, as in this process; the
	// worker's own memory is bounded from them too. Optional.
	Limits runtime.Limits
	// Config is the module's configuration (runtime.WithConfig).
	// Optional.
	Config []byte
	// Runtime configures the worker's runtime. Its Compiled is called in
	// this process, after the load. Give every module the same CacheDir,
	// so that a restarted worker loads the machine code from there; a
	// Module without one keeps a temporary directory of its own.
	// Optional.
	Runtime runtime.Config
}

// Limits on the worker process, beside those of the module.
const (
	// watchdogGrace is how long past a call's own bounds (Limits.Timeout,
	// and Limits.InitTimeout for an instance it may have to create) the
	// worker may take to answer before it is killed.
	watchdogGrace = time.Second
	// residentOverhead is what a worker may hold in resident memory
	// besides its instances' linear memories (Limits.PoolMemoryBytes):
	// the Go runtime, the module's machine code, a batch's input and
	// output per instance (in its slot, shared with this process). An idle worker of a default module holds
	// about 25 MiB (docs/performance.md).
	residentOverhead = 192 << 20
	// dataOverhead is what the worker's RLIMIT_DATA allows besides the
	// address space its instances reserve (Instances × MemoryBytes).
	dataOverhead = 1 << 30
	// memoryPollInterval is how often the resident memory of a worker
	// with calls in flight is read.
	memoryPollInterval = 20 * time.Millisecond
	// loadTimeout bounds, besides the compilation's own limit, a
	// worker's start up to its loaded module.
	loadTimeout = 10 * time.Second
)

// Restarts of a worker that died without answering a call since it last
// did are delayed: not at all the first time, then restartMin, doubling
// up to restartMax, so that a crash-looping module cannot keep the node's
// CPUs busy starting workers.
const (
	restartMin = 100 * time.Millisecond
	restartMax = 30 * time.Second
)

// Module is a module loaded in a worker process. It implements
// pipeline.Module and has what runtime.Module says about the module. It
// is safe for concurrent use.
type Module struct {
	// Name is the name the module was loaded under.
	Name string
	// Digest is "sha256:<hex>" of the module binary.
	Digest string
	// Metadata is what the module declares about itself.
	Metadata *metadata.Metadata
	// Config is the module's configuration, as runtime.Module.Config.
	Config []byte

	opts     Opts
	limits   limits
	tmpDir   string // a cache directory of its own, removed by Close
	compiled func(bool)

	ids      atomic.Uint64
	calls    atomic.Uint64
	restarts atomic.Uint64
	// failing counts the workers that died, or did not start, since
	// one last answered a call.
	failing atomic.Int64

	mu       sync.Mutex
	cur      *proc         // the running worker; nil: none
	starting chan struct{} // closed when the start under way ends
	// notBefore is when a worker may start again, and lastDeath why the
	// last one died.
	notBefore time.Time
	lastDeath error
	closed    bool
}

// limits are the module's limits with their defaults, and the bounds of
// its worker derived from them.
type limits struct {
	runtime.Limits
	// watchdog is how long a call may wait for its answer.
	watchdog time.Duration
	// resident is the resident memory past which the worker is killed,
	// and data its RLIMIT_DATA.
	resident, data uint64
	// slots is the number of the worker's shared memory slots: calls it
	// runs at once.
	slots int
}

// limitsOf fills in the defaults of l that the worker's bounds depend on,
// as runtime.Runtime.Load does, and derives the bounds.
func limitsOf(l runtime.Limits) limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = runtime.DefaultMemoryBytes
	}
	if l.Timeout == 0 {
		l.Timeout = runtime.DefaultTimeout
	}
	if l.InitTimeout == 0 {
		l.InitTimeout = 5 * l.Timeout
	}
	if l.Instances <= 0 {
		l.Instances = goruntime.GOMAXPROCS(0)
	}
	if l.PoolMemoryBytes == 0 {
		l.PoolMemoryBytes = l.MemoryBytes + l.MemoryBytes/2
	}
	return limits{
		Limits:   l,
		watchdog: l.InitTimeout + l.Timeout + watchdogGrace,
		resident: l.PoolMemoryBytes + residentOverhead,
		data:     uint64(l.Instances)*l.MemoryBytes + dataOverhead,
		slots:    min(l.Instances, maxSlots),
	}
}

// Load starts a worker process (this executable, started again: see
// serve.go), which loads the module as runtime.Runtime.Load does in this
// process; Load returns its errors, which errors.Is finds to be
// runtime.ErrInvalidModule, runtime.ErrConfigRejected or
// runtime.ErrCompile as Runtime.Load's are. The worker keeps running
// until Close; one that dies is started again by the next call.
func Load(ctx context.Context, opts Opts) (*Module, error) {
	if !supported {
		return nil, fmt.Errorf("module %q: %w", opts.Name, ErrNotSupported)
	}
	m := &Module{Name: opts.Name, Digest: runtime.Digest(opts.Wasm), opts: opts, limits: limitsOf(opts.Limits), compiled: opts.Runtime.Compiled}
	m.opts.Limits = m.limits.Limits
	if m.opts.Runtime.CacheDir == "" {
		// Each start of the worker would compile the module again.
		dir, err := os.MkdirTemp("", "wasp-worker-")
		if err != nil {
			return nil, fmt.Errorf("module %q: %w", opts.Name, err)
		}
		m.tmpDir, m.opts.Runtime.CacheDir = dir, dir
	}
	p, reply, err := m.start(ctx)
	if err != nil {
		m.removeTmp()
		return nil, err
	}
	m.Metadata, m.Config = reply.Metadata, reply.Config
	m.cur = p
	return m, nil
}

// Call runs stage over an encoded input batch in the worker and appends
// the raw output to dst, as runtime.Module.Call. Errors are
// *runtime.CallError: the worker's, or, when the worker did not answer,
//
//   - ReasonTimeout for a call past its bounds (Limits.Timeout and
//     Limits.InitTimeout, and a grace), whose worker was killed, and for
//     one whose ctx ended;
//   - ReasonMemory for the calls in flight when the worker's resident
//     memory grew past its limit, and it was killed;
//   - ReasonTrap for the calls in flight when it died otherwise;
//   - ReasonInstantiate, wrapping ErrWorkerDied, for the other calls in
//     flight when it was killed for a call past its bounds (they did
//     nothing wrong: their caller may retry them at once), and for the
//     calls made while a worker that died waits to restart.
func (m *Module) Call(ctx context.Context, stage abi.Stage, input, dst []byte) ([]byte, error) {
	if !m.Metadata.Implements(stage) {
		return dst, &runtime.CallError{Module: m.Name, Stage: stage, Reason: runtime.ReasonNoOutput, Err: fmt.Errorf("module does not implement stage %s", stage)}
	}
	m.calls.Add(1)
	out, err := m.request(ctx, kindCall, stage, input, dst)
	if err != nil {
		return dst, err
	}
	if m.failing.Load() != 0 {
		m.failing.Store(0)
	}
	return out, nil
}

// Shrink has the worker shrink the module's instance pool, as
// runtime.Module.Shrink, and give back to the system the memory its
// instances and buffers held, and that of the calls' shared memory. A
// worker that is not running is not started.
func (m *Module) Shrink(ctx context.Context) error {
	m.mu.Lock()
	p := m.cur
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	_, err := p.request(ctx, m, kindShrink, 0, nil, nil)
	p.slots.trim()
	return err
}

// Instances returns the size of the module's instance pool: how many
// calls can run at once.
func (m *Module) Instances() int { return m.limits.Instances }

// String returns the module's name.
func (m *Module) String() string { return m.Name }

// Stats are counters of a module's lifetime and its worker's memory.
type Stats struct {
	Calls    uint64 // calls made
	Restarts uint64 // workers started after the first
	// PID is the running worker's process ID, 0 if none runs.
	PID int
	// ResidentBytes and PeakResidentBytes are the running worker's
	// resident memory and its peak (VmRSS and VmHWM); 0 where they
	// cannot be read.
	ResidentBytes, PeakResidentBytes uint64
}

// Stats returns the module's counters.
func (m *Module) Stats() Stats {
	s := Stats{Calls: m.calls.Load(), Restarts: m.restarts.Load()}
	m.mu.Lock()
	p := m.cur
	m.mu.Unlock()
	if p != nil {
		s.PID = p.pid
		s.ResidentBytes, s.PeakResidentBytes, _ = residentMemory(p.pid)
	}
	return s
}

// Close stops the worker: it finishes the calls in flight (for at most
// their bounds) and exits. Calls after Close fail.
func (m *Module) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	p := m.cur
	m.cur = nil
	starting := m.starting
	m.mu.Unlock()
	if starting != nil {
		<-starting // the start sees closed and stops what it started
	}
	if p != nil {
		p.stop(m.limits.watchdog)
	}
	m.removeTmp()
}

func (m *Module) removeTmp() {
	if m.tmpDir != "" {
		_ = os.RemoveAll(m.tmpDir)
	}
}

// request sends a request to the running worker, starting one if none
// runs, and returns its answer.
func (m *Module) request(ctx context.Context, k kind, stage abi.Stage, input, dst []byte) ([]byte, error) {
	p, err := m.running(ctx)
	if err != nil {
		return dst, &runtime.CallError{Module: m.Name, Stage: stage, Reason: runtime.ReasonInstantiate, Err: err}
	}
	return p.request(ctx, m, k, stage, input, dst)
}

// running returns the running worker, or starts one if the restart
// backoff allows.
func (m *Module) running(ctx context.Context) (*proc, error) {
	m.mu.Lock()
	for {
		switch {
		case m.closed:
			m.mu.Unlock()
			return nil, errors.New("module closed")
		case m.cur != nil:
			p := m.cur
			m.mu.Unlock()
			return p, nil
		case m.starting != nil:
			ch := m.starting
			m.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			m.mu.Lock()
			continue
		}
		if wait := time.Until(m.notBefore); wait > 0 {
			err := fmt.Errorf("%w, restarting in %s: %w", ErrWorkerDied, wait.Round(time.Millisecond), m.lastDeath)
			m.mu.Unlock()
			return nil, err
		}
		ch := make(chan struct{})
		m.starting = ch
		m.mu.Unlock()
		p, _, err := m.start(ctx)
		m.mu.Lock()
		m.starting = nil
		close(ch)
		if err != nil {
			m.mu.Unlock()
			if ctx.Err() == nil {
				m.died(nil, err)
			}
			return nil, err
		}
		m.restarts.Add(1)
		if m.closed {
			m.mu.Unlock()
			p.stop(0)
			return nil, errors.New("module closed")
		}
		m.cur = p
	}
}

// died records that worker p died (nil: one did not start) of err, and
// when the next may start.
func (m *Module) died(p *proc, err error) {
	n := m.failing.Add(1)
	delay := time.Duration(0)
	if n > 1 {
		delay = min(restartMax, restartMin<<min(n-2, 20))
	}
	m.mu.Lock()
	if p != nil && m.cur == p {
		m.cur = nil
	}
	m.notBefore, m.lastDeath = time.Now().Add(delay), err
	m.mu.Unlock()
}
