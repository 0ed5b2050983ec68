//go:build linux

package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/reference"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
	"github.com/wasp-proxy/wasp/modules"
	"github.com/wasp-proxy/wasp/modules/builds"
)

// TestMain fails the package if its tests leave file descriptors open:
// each worker holds two pipes and its stderr's.
func TestMain(m *testing.M) {
	// The network poller's descriptors, which the first pipe opens and
	// the process keeps, are not a leak.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	code := m.Run()
	if after := openFDs(); code == 0 && after > before {
		fmt.Fprintf(os.Stderr, "%d file descriptors open after the tests, %d before\n", after, before)
		code = 1
	}
	os.Exit(code)
}

func openFDs() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0 // not Linux: not checked
	}
	return len(fds)
}

func skipUnsupported(t testing.TB) {
	t.Helper()
	if !supported {
		t.Skip(ErrNotSupported)
	}
}

// load loads wasm in a worker, closed at the end of the test.
func load(t testing.TB, name string, wasm []byte, limits runtime.Limits) *Module {
	t.Helper()
	skipUnsupported(t)
	m, err := Load(context.Background(), Opts{Name: name, Wasm: wasm, Limits: limits, Runtime: runtime.Config{CacheDir: cacheDir(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// cacheDir is a compilation cache shared by the package's tests, as the
// node's is by its modules.
var cacheDir = func() func(t testing.TB) string {
	var (
		once sync.Once
		dir  string
	)
	return func(t testing.TB) string {
		once.Do(func() {
			var err error
			if dir, err = os.MkdirTemp("", "wasp-worker-test-"); err != nil {
				t.Fatal(err)
			}
		})
		return dir
	}
}()

// builtin returns the Wasm of the default module of stage in build b.
func builtin(t testing.TB, b builds.Build, stage abi.Stage) []byte {
	t.Helper()
	wasm, err := builds.Wasm(b, modules.Default(stage).Name)
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// inProcess loads wasm in this process.
func inProcess(t testing.TB, name string, wasm []byte, limits runtime.Limits) *runtime.Module {
	t.Helper()
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	m, err := rt.Load(context.Background(), name, wasm, limits)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// topologyInput encodes a topology batch of n ports.
func topologyInput(t testing.TB, n int) []byte {
	t.Helper()
	node, sps := referencetest.Batch(7, n, 10)
	in, err := new(abi.Encoder).Encode(nil, &abi.Batch{Stage: abi.StageTopology, Node: node, Ports: sps})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// twin calls a module in this process and in a worker with the same
// input, and counts the calls whose outputs or errors differ.
type twin struct {
	local  *runtime.Module
	worker *Module
	calls  atomic.Int64
	differ atomic.Int64
	first  atomic.Value // string: the first difference
}

func (tw *twin) Call(ctx context.Context, stage abi.Stage, input, dst []byte) ([]byte, error) {
	want, werr := tw.local.Call(ctx, stage, input, nil)
	got, err := tw.worker.Call(ctx, stage, input, dst)
	tw.calls.Add(1)
	if !bytes.Equal(got[len(dst):], want) || (err == nil) != (werr == nil) {
		tw.differ.Add(1)
		tw.first.CompareAndSwap(nil, fmt.Sprintf("stage %s, %d bytes in: worker %d bytes out, %v; in process %d bytes, %v",
			stage, len(input), len(got)-len(dst), err, len(want), werr))
	}
	return got, err
}

func (tw *twin) Instances() int { return tw.worker.Instances() }

// TestSameOutputs runs random batches through the default modules of
// each build, each stage's module both in this process and in a worker:
// their outputs are byte for byte the same, and the pipeline's results
// those of the native reference.
func TestSameOutputs(t *testing.T) {
	skipUnsupported(t)
	for _, b := range builds.All {
		t.Run(string(b), func(t *testing.T) {
			limits := runtime.Limits{Instances: 2}
			var opts pipeline.Options
			var twins []*twin
			for _, stage := range abi.Stages {
				wasm := builtin(t, b, stage)
				name := "builtin:" + modules.Default(stage).Name
				tw := &twin{local: inProcess(t, name, wasm, limits), worker: load(t, name, wasm, limits)}
				opts.Modules[stage] = tw
				twins = append(twins, tw)
			}
			opts.MinChunk, opts.MaxChunk = 64, 256 // calls in parallel, of several sizes
			p := pipeline.New(opts)
			for seed, n := range []int{1, 2, 10, 100, 1000, 3000} {
				node, sps := referencetest.Batch(uint64(seed), n, 1+seed*3)
				ps := make([]pipeline.Port, len(sps))
				for i, sp := range sps {
					ps[i] = pipeline.Port{Key: fmt.Sprint(seed, "/", i), ServicePort: sp}
				}
				for i, r := range p.Run(context.Background(), node, ps) {
					if r.Source != pipeline.SourceModules {
						t.Fatalf("%d ports: port %d: %s: %v", n, i, r.Source, r.Err)
					}
					if want := reference.Categorize(&node, &sps[i]); !decisionsEqual(r.Decision, want) {
						t.Fatalf("%d ports: port %d: %+v, reference %+v", n, i, r.Decision, want)
					}
				}
			}
			for _, tw := range twins {
				if tw.differ.Load() != 0 {
					t.Errorf("%s: %d of %d calls differ; first: %s", tw.worker.Name, tw.differ.Load(), tw.calls.Load(), tw.first.Load())
				}
			}
		})
	}
}

func decisionsEqual(a, b abi.Decision) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// callTopology calls m's topology stage over in.
func callTopology(ctx context.Context, m *Module, in []byte) error {
	_, err := m.Call(ctx, abi.StageTopology, in, nil)
	return err
}

// wantCallError checks that err is a *runtime.CallError of module
// "m" with reason, wrapping ErrWorkerDied if died.
func wantCallError(t *testing.T, err error, reason runtime.Reason, died bool) {
	t.Helper()
	var ce *runtime.CallError
	if !errors.As(err, &ce) || ce.Reason != reason || ce.Module != "m" || errors.Is(err, ErrWorkerDied) != died {
		t.Fatalf("error %v; want a CallError of module \"m\" with reason %s, worker died %v", err, reason, died)
	}
}

// gone reports whether process pid was reaped: no zombie is left.
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestSpinStoppedInWorker: a guest that spins is stopped by the worker's
// runtime at its deadline, as in this process; the worker lives on.
func TestSpinStoppedInWorker(t *testing.T) {
	spin := hostile.Guest{Stage: append(hostile.TreeCall(62), 0x42, 0x00, 0x0b)}.Module()
	m := load(t, "m", spin, runtime.Limits{Timeout: 200 * time.Millisecond, Instances: 1})
	pid := m.Stats().PID
	in := topologyInput(t, 1)
	for range 2 {
		wantCallError(t, callTopology(context.Background(), m, in), runtime.ReasonTimeout, false)
	}
	if st := m.Stats(); st.PID != pid || st.Restarts != 0 {
		t.Errorf("worker %d, %d restarts; want the same worker %d", st.PID, st.Restarts, pid)
	}
}

// TestWatchdog: a worker that does not answer (stopped, as a guest that
// nothing stops would leave it) is killed past the call's bounds; the
// next call starts another.
func TestWatchdog(t *testing.T) {
	m := load(t, "m", builtin(t, builds.Rust, abi.StageTopology), runtime.Limits{Timeout: 100 * time.Millisecond, InitTimeout: 100 * time.Millisecond, Instances: 1})
	in := topologyInput(t, 10)
	if err := callTopology(context.Background(), m, in); err != nil {
		t.Fatal(err)
	}
	pid := m.Stats().PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := callTopology(context.Background(), m, in)
	wantCallError(t, err, runtime.ReasonTimeout, true)
	if d := time.Since(start); d < m.limits.watchdog {
		t.Errorf("killed after %s, before the watchdog's %s", d, m.limits.watchdog)
	}
	if !gone(pid) {
		t.Errorf("worker %d not reaped", pid)
	}
	if err := callTopology(context.Background(), m, in); err != nil {
		t.Fatalf("call after the watchdog: %v", err)
	}
	if st := m.Stats(); st.Restarts != 1 || st.PID == pid {
		t.Errorf("worker %d after %d restarts; want a new one after 1", st.PID, st.Restarts)
	}
}

// TestWorkerKilled: a worker killed in the middle of calls fails them
// with CallErrors, not the process; the next call starts another, and a
// worker that keeps dying is restarted with a growing delay.
func TestWorkerKilled(t *testing.T) {
	spin := hostile.Guest{Stage: append(hostile.TreeCall(62), 0x42, 0x00, 0x0b)}.Module()
	m := load(t, "m", spin, runtime.Limits{Timeout: time.Minute, Instances: 2})
	in := topologyInput(t, 1)
	for round := range 3 {
		pid := m.Stats().PID
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- callTopology(context.Background(), m, in) }()
		}
		time.Sleep(300 * time.Millisecond) // both calls spinning (a worker starts in about 7 ms; slack for a loaded machine)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			wantCallError(t, <-errs, runtime.ReasonTrap, true)
		}
		if !gone(pid) {
			t.Errorf("worker %d not reaped", pid)
		}
		// The next call restarts it: at once after the first death,
		// which a call answered before? Not here: it never answers.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := callTopology(ctx, m, in)
		cancel()
		switch round {
		case 0: // restarted at once, and spins until ctx ends
			wantCallError(t, err, runtime.ReasonTimeout, false)
		default: // died twice without an answer between: waits to restart
			wantCallError(t, err, runtime.ReasonInstantiate, true)
			time.Sleep(restartMin << (round - 1))
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			wantCallError(t, callTopology(ctx, m, in), runtime.ReasonTimeout, false)
			cancel()
		}
		if st := m.Stats(); st.Restarts != uint64(round+1) || st.PID == pid || st.PID == 0 {
			t.Fatalf("round %d: worker %d after %d restarts", round, st.PID, st.Restarts)
		}
	}
}

// TestMemoryBomb: a worker whose resident memory grows past its limit is
// killed, and only it.
func TestMemoryBomb(t *testing.T) {
	// The stage touches every page of its 64 MiB memory, round and round:
	//	i = 0; loop { mem[i] = 1; i = (i + 4096) & (64 MiB - 1); br 0 }
	bomb := []byte{
		0x41, 0x00, 0x21, 0x00,
		0x03, 0x40,
		0x20, 0x00, 0x41, 0x01, 0x36, 0x02, 0x00,
		0x20, 0x00, 0x41, 0x80, 0x20, 0x6a,
		0x41, 0xff, 0xff, 0xff, 0x1f, 0x71,
		0x21, 0x00,
		0x0c, 0x00,
		0x0b,
		0x42, 0x00, 0x0b,
	}
	wasm := hostile.Guest{Pages: 1024, Stage: bomb}.Module()
	m := load(t, "m", wasm, runtime.Limits{MemoryBytes: 128 << 20, Timeout: time.Minute, Instances: 1})
	st := m.Stats()
	if st.ResidentBytes == 0 {
		t.Skip("resident memory cannot be read here")
	}
	// Room for half the bomb above what the worker holds now.
	m.limits.resident = st.ResidentBytes + 32<<20
	err := callTopology(context.Background(), m, topologyInput(t, 1))
	wantCallError(t, err, runtime.ReasonMemory, true)
	if !gone(st.PID) {
		t.Errorf("worker %d not reaped", st.PID)
	}
}

// TestConcurrentCalls: calls from many goroutines, more than the
// instances, all get their own answers, and some give up on the way.
func TestConcurrentCalls(t *testing.T) {
	wasm := builtin(t, builds.Rust, abi.StageTopology)
	m := load(t, "m", wasm, runtime.Limits{Instances: 3})
	local := inProcess(t, "m", wasm, runtime.Limits{Instances: 3})
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			node, sps := referencetest.Batch(uint64(g), 1+g*50, 5)
			in, err := new(abi.Encoder).Encode(nil, &abi.Batch{Stage: abi.StageTopology, Node: node, Ports: sps})
			if err != nil {
				t.Error(err)
				return
			}
			want, err := local.Call(context.Background(), abi.StageTopology, in, nil)
			if err != nil {
				t.Error(err)
				return
			}
			buf := make([]byte, 0, 64)
			for i := range 50 {
				ctx, cancel := context.WithCancel(context.Background())
				if i%7 == 3 {
					cancel() // given up before or during the call
				}
				got, err := m.Call(ctx, abi.StageTopology, in, buf[:0])
				cancel()
				switch {
				case i%7 == 3 && err != nil:
					var ce *runtime.CallError
					if !errors.As(err, &ce) || ce.Reason != runtime.ReasonTimeout {
						t.Errorf("cancelled call: %v", err)
					}
				case err != nil:
					t.Errorf("goroutine %d call %d: %v", g, i, err)
				case !bytes.Equal(got, want):
					t.Errorf("goroutine %d call %d: %d bytes, want %d", g, i, len(got), len(want))
				}
				buf = got
			}
		})
	}
	wg.Wait()
	if st := m.Stats(); st.Restarts != 0 {
		t.Errorf("%d restarts", st.Restarts)
	}
}

// TestClose: Close stops and reaps the worker, leaves no goroutine behind,
// may be called twice, and calls after it fail; until then, the signals
// that stop wasp leave the worker running.
func TestClose(t *testing.T) {
	skipUnsupported(t)
	goroutines := goruntime.NumGoroutine()
	m, err := Load(context.Background(), Opts{Name: "m", Wasm: builtin(t, builds.Go, abi.StageTopology), Limits: runtime.Limits{Instances: 1}})
	if err != nil {
		t.Fatal(err)
	}
	in := topologyInput(t, 5)
	if err := callTopology(context.Background(), m, in); err != nil {
		t.Fatal(err)
	}
	if err := m.Shrink(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The signals that stop wasp do not stop its workers first.
	pid, dir := m.Stats().PID, m.tmpDir
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if err := callTopology(context.Background(), m, in); err != nil || m.Stats().PID != pid {
		t.Fatalf("call after SIGINT, SIGTERM and SIGHUP: %v, worker %d, want %d", err, m.Stats().PID, pid)
	}
	m.Close()
	m.Close()
	if !gone(pid) {
		t.Errorf("worker %d not reaped", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cache directory %s: %v, want removed", dir, err)
	}
	wantCallError(t, callTopology(context.Background(), m, in), runtime.ReasonInstantiate, false)
	deadline := time.Now().Add(5 * time.Second)
	for goruntime.NumGoroutine() > goroutines+1 { // +1: the spawner's, for good
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before the load", goruntime.NumGoroutine(), goroutines)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLoadErrors: a worker's load errors have the classes of a load in
// this process.
func TestLoadErrors(t *testing.T) {
	skipUnsupported(t)
	tests := []struct {
		name   string
		wasm   []byte
		config string
		class  error
	}{
		{"garbage", []byte("\x00asm garbage"), "", runtime.ErrInvalidModule},
		{"configuration", builtin(t, builds.Rust, abi.StageTopology), `{"zones": ["a"]}`, runtime.ErrConfigRejected},
		{"compile", hostile.Module(0, hostile.Nest(100000)), "", runtime.ErrCompile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(context.Background(), Opts{Name: "m", Wasm: tt.wasm, Config: []byte(tt.config)})
			if !errors.Is(err, tt.class) {
				t.Fatalf("Load: %v, want %v", err, tt.class)
			}
		})
	}
}
