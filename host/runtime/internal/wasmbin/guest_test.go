package wasmbin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Guests are built once per test binary run; the first test that needs one
// builds it into its temporary directory and keeps the bytes.
var guests struct {
	sync.Mutex
	wasm map[string][]byte
}

// goGuest returns the Go guest testdata/name built as a wasip1 reactor.
func goGuest(tb testing.TB, name string) []byte {
	tb.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Skipf("building Go guests needs the go command: %v", err)
	}
	return buildGuest(tb, "go/"+name, func(out string) *exec.Cmd {
		cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", out, "./testdata/"+name)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		return cmd
	})
}

// rustGuest returns testdata/rust/lib.rs built as a wasm32-unknown-unknown
// cdylib, or skips the test if rustc or that target's standard library is
// not installed.
func rustGuest(tb testing.TB) []byte {
	tb.Helper()
	rustc, err := exec.LookPath("rustc")
	if err != nil {
		tb.Skipf("building the Rust guest needs rustc: %v", err)
	}
	const target = "wasm32-unknown-unknown"
	libdir, err := exec.Command(rustc, "--print", "target-libdir", "--target", target).Output()
	if err != nil {
		tb.Skipf("rustc does not know target %s: %v", target, err)
	}
	libs, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(libdir)), "libstd-*.rlib"))
	if len(libs) == 0 {
		tb.Skipf("the standard library of target %s is not installed in %s (rustup target add %s)", target, strings.TrimSpace(string(libdir)), target)
	}
	return buildGuest(tb, "rust", func(out string) *exec.Cmd {
		return exec.Command(rustc, "--target", target, "--crate-type", "cdylib", "-C", "opt-level=2", "-o", out, "testdata/rust/lib.rs")
	})
}

func buildGuest(tb testing.TB, key string, command func(out string) *exec.Cmd) []byte {
	tb.Helper()
	guests.Lock()
	defer guests.Unlock()
	if wasm, ok := guests.wasm[key]; ok {
		return wasm
	}
	out := filepath.Join(tb.TempDir(), "guest.wasm")
	cmd := command(out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, msg)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	if guests.wasm == nil {
		guests.wasm = map[string][]byte{}
	}
	guests.wasm[key] = wasm
	return wasm
}

// mustInstrument instruments wasm and checks the result parses, exports the
// budget global and imports the yield function.
func mustInstrument(tb testing.TB, wasm []byte) []byte {
	tb.Helper()
	out, err := Instrument(wasm)
	if err != nil {
		tb.Fatalf("Instrument: %v", err)
	}
	m, err := Parse(out)
	if err != nil {
		tb.Fatalf("Parse(Instrument()): %v", err)
	}
	if e, ok := m.Export(BudgetGlobal); !ok || e.Kind != KindGlobal {
		tb.Fatalf("instrumented module does not export global %q", BudgetGlobal)
	}
	if imp := m.Imports[len(m.Imports)-1]; imp != (Import{YieldModule, YieldFunc, KindFunc}) {
		tb.Fatalf("instrumented module's last import is %v", imp)
	}
	return out
}

// instantiate compiles and instantiates wasm in rt, as a WASI reactor if it
// exports _initialize.
func instantiate(tb testing.TB, ctx context.Context, rt wazero.Runtime, wasm []byte) api.Module {
	tb.Helper()
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		tb.Fatalf("compile: %v", err)
	}
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions()
	if _, ok := cm.ExportedFunctions()["_initialize"]; ok {
		cfg = cfg.WithStartFunctions("_initialize")
	}
	mod, err := rt.InstantiateModule(ctx, cm, cfg)
	if err != nil {
		tb.Fatalf("instantiate: %v", err)
	}
	return mod
}

// yielder is a host for the yield import of instrumented modules, like
// wasp's: it stops the call once the call's context is done, and otherwise
// grants the guest interval more loop iterations.
type yielder struct {
	interval uint32
	yields   atomic.Int64
}

func (y *yielder) yield(ctx context.Context, mod api.Module, _ []uint64) {
	y.yields.Add(1)
	if err := ctx.Err(); err != nil {
		panic(err)
	}
	mod.ExportedGlobal(BudgetGlobal).(api.MutableGlobal).Set(uint64(y.interval))
}

// newRuntime returns a runtime with WASI and a yielder, closed when tb
// ends.
func newRuntime(tb testing.TB, ctx context.Context, cfg wazero.RuntimeConfig) (wazero.Runtime, *yielder) {
	tb.Helper()
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	tb.Cleanup(func() { rt.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	y := &yielder{interval: 1 << 16}
	_, err := rt.NewHostModuleBuilder(YieldModule).NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(y.yield), nil, nil).Export(YieldFunc).
		Instantiate(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return rt, y
}

func call(tb testing.TB, ctx context.Context, mod api.Module, name string, args ...uint64) []uint64 {
	tb.Helper()
	res, err := mod.ExportedFunction(name).Call(ctx, args...)
	if err != nil {
		tb.Fatalf("%s%v: %v", name, args, err)
	}
	return res
}

// TestInstrumentGuestResults checks that instrumented guests compute what the
// originals do.
func TestInstrumentGuestResults(t *testing.T) {
	tests := []struct {
		name  string
		wasm  func(testing.TB) []byte
		fn    string
		calls [][]uint64
	}{
		{name: "go sortSum", wasm: func(tb testing.TB) []byte { return goGuest(tb, "compute") }, fn: "sortSum", calls: [][]uint64{{0, 1}, {10, 7}, {10000, 42}, {100000, 1 << 40}}},
		{name: "go primes", wasm: func(tb testing.TB) []byte { return goGuest(tb, "compute") }, fn: "primes", calls: [][]uint64{{0}, {100}, {1000000}}},
		{name: "go opcodes", wasm: func(tb testing.TB) []byte { return goGuest(tb, "opcodes") }, fn: "run", calls: [][]uint64{{0}, {1}, {2}, {3}, {12345}, {1 << 62}}},
		{name: "go count", wasm: func(tb testing.TB) []byte { return goGuest(tb, "spin") }, fn: "count", calls: [][]uint64{{0}, {1}, {100000}}},
		{name: "rust count", wasm: rustGuest, fn: "count", calls: [][]uint64{{0}, {1}, {100000}}},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := tt.wasm(t)
			instr := mustInstrument(t, orig)
			rt, y := newRuntime(t, ctx, wazero.NewRuntimeConfig())
			a, b := instantiate(t, ctx, rt, orig), instantiate(t, ctx, rt, instr)
			for _, args := range tt.calls {
				want := call(t, ctx, a, tt.fn, args...)
				got := call(t, ctx, b, tt.fn, args...)
				if len(got) != len(want) || (len(got) > 0 && got[0] != want[0]) {
					t.Errorf("%s%v = %v instrumented, %v originally", tt.fn, args, got, want)
				}
			}
			if y.yields.Load() == 0 {
				t.Error("the instrumented guest never yielded")
			}
			// Every call runs a loop, so with no budget left the guest
			// yields at once, and the yield stops a cancelled call.
			b.ExportedGlobal(BudgetGlobal).(api.MutableGlobal).Set(0)
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			args := tt.calls[len(tt.calls)-1]
			if _, err := b.ExportedFunction(tt.fn).Call(cctx, args...); !errors.Is(err, context.Canceled) {
				t.Errorf("%s%v cancelled: err = %v, want %v", tt.fn, args, err, context.Canceled)
			}
		})
	}
}

// TestInterruptSpinningGuest checks that a guest that never returns
// yields often enough for the Go garbage collector to stop the world (a
// guest spinning in machine code cannot be preempted), and that cancelling
// its context stops it.
func TestInterruptSpinningGuest(t *testing.T) {
	tests := []struct {
		name string
		wasm func(testing.TB) []byte
	}{
		{name: "go", wasm: func(tb testing.TB) []byte { return goGuest(tb, "spin") }},
		{name: "rust", wasm: rustGuest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wasm := mustInstrument(t, tt.wasm(t))
			rt, y := newRuntime(t, context.Background(), wazero.NewRuntimeConfig())
			mod := instantiate(t, context.Background(), rt, wasm)
			spin := mod.ExportedFunction("spin")

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := spin.Call(ctx)
				done <- err
			}()
			// Without yields, the first collection would wait for the
			// spinning goroutine forever.
			for range 20 {
				runtime.GC()
			}
			select {
			case err := <-done:
				t.Fatalf("spin returned before the cancel: %v", err)
			default:
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("spin: err = %v, want %v", err, context.Canceled)
				}
			case <-time.After(10 * time.Second): // failure guard only
				t.Fatal("spin still running 10s after the cancel")
			}
			if y.yields.Load() < 2 {
				t.Errorf("spin yielded %d times", y.yields.Load())
			}
		})
	}
}

// TestInstrumentGoGuestsKeepMetadata checks the custom sections a real guest
// keeps and drops.
func TestInstrumentGoGuestsKeepMetadata(t *testing.T) {
	wasm := AppendCustomSection(goGuest(t, "compute"), "wasp.metadata", []byte(`{"name":"compute"}`))
	out := mustInstrument(t, wasm)
	m, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if data, ok := m.CustomSection("wasp.metadata"); !ok || string(data) != `{"name":"compute"}` {
		t.Errorf("wasp.metadata = %q, %v", data, ok)
	}
	for _, s := range m.Sections {
		if s.ID == SectionCustom && (s.Name == "name" || strings.HasPrefix(s.Name, ".debug_")) {
			t.Errorf("custom section %q kept", s.Name)
		}
	}
	again, err := Instrument(wasm)
	if err != nil || !bytes.Equal(again, out) {
		t.Errorf("Instrument is not deterministic (err %v)", err)
	}
	if _, err := Instrument(out); !errors.Is(err, ErrInstrumented) {
		t.Errorf("Instrument(instrumented) = %v, want %v", err, ErrInstrumented)
	}
}

// BenchmarkGuestLoop compares, in one run, the cost of a tight guest loop
// (a) uninstrumented in a default runtime, (b) instrumented, yielding every
// 2^16 iterations, (d) instrumented, yielding every 2^10 iterations, and (c)
// uninstrumented in a runtime with WithCloseOnContextDone(true), called
// with a deadline. It reports ns per call of each and the ratios to a.
func BenchmarkGuestLoop(b *testing.B) {
	benchmarks := []struct {
		name string
		wasm func(testing.TB) []byte
	}{
		{name: "go", wasm: func(tb testing.TB) []byte { return goGuest(tb, "spin") }},
		{name: "rust", wasm: rustGuest},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			orig := bm.wasm(b)
			instr := mustInstrument(b, orig)
			ctx := context.Background()
			plain, _ := newRuntime(b, ctx, wazero.NewRuntimeConfig())
			often, y := newRuntime(b, ctx, wazero.NewRuntimeConfig())
			y.interval = 1 << 10
			closing, _ := newRuntime(b, ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
			fa := instantiate(b, ctx, plain, orig).ExportedFunction("count")
			fb := instantiate(b, ctx, plain, instr).ExportedFunction("count")
			fd := instantiate(b, ctx, often, instr).ExportedFunction("count")
			fc := instantiate(b, ctx, closing, orig).ExportedFunction("count")

			const n = 1 << 20 // iterations per call
			var ta, tb, tc, td time.Duration
			timed := func(f api.Function, ctx context.Context, d *time.Duration) {
				start := time.Now()
				if _, err := f.Call(ctx, n); err != nil {
					b.Fatal(err)
				}
				*d += time.Since(start)
			}
			for b.Loop() {
				timed(fa, ctx, &ta)
				timed(fb, ctx, &tb)
				timed(fd, ctx, &td)
				dctx, cancel := context.WithTimeout(ctx, time.Hour)
				timed(fc, dctx, &tc)
				cancel()
			}
			calls := float64(b.N)
			b.ReportMetric(float64(ta.Nanoseconds())/calls, "a-plain-ns/call")
			b.ReportMetric(float64(tb.Nanoseconds())/calls, "b-instrumented-ns/call")
			b.ReportMetric(float64(tc.Nanoseconds())/calls, "c-closeondone-ns/call")
			b.ReportMetric(float64(td.Nanoseconds())/calls, "d-instrumented-1k-ns/call")
			b.ReportMetric(float64(tb)/float64(ta), "b/a")
			b.ReportMetric(float64(tc)/float64(ta), "c/a")
			b.ReportMetric(float64(td)/float64(ta), "d/a")
		})
	}
}

// BenchmarkInstrument measures instrumenting the largest Go test guest.
func BenchmarkInstrument(b *testing.B) {
	wasm := goGuest(b, "opcodes")
	b.SetBytes(int64(len(wasm)))
	for b.Loop() {
		if _, err := Instrument(wasm); err != nil {
			b.Fatal(err)
		}
	}
}
