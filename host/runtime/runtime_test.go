package runtime_test

import (
	"context"
	"errors"
	"io/fs"
	"net/netip"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
	"github.com/wasp-proxy/wasp/modules"
)

var built sync.Map // dir -> []byte

// testModule builds one of testdata/modules once per test binary.
func testModule(t testing.TB, name string) []byte {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("building test modules needs the go command:", err)
	}
	dir := "testdata/modules/" + name
	if b, ok := built.Load(dir); ok {
		return b.([]byte)
	}
	b, err := modbuild.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	built.Store(dir, b)
	return b
}

func newRuntime(t testing.TB, cfg runtime.Config) *runtime.Runtime {
	t.Helper()
	r, err := runtime.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

// batch returns a topology batch of ports named after behaviours; each
// port's Service carries the misbehave module's annotation.
func batch(stage abi.Stage, behaviours ...string) *abi.Batch {
	b := &abi.Batch{Stage: stage, Node: abi.Node{Name: "node-a"}}
	for i, beh := range behaviours {
		p := abi.ServicePort{Namespace: "ns", Name: beh, Protocol: abi.ProtocolTCP, Port: 80}
		if beh != "" {
			p.Annotations = []abi.Label{{Key: "wasp.test/behaviour", Value: beh}}
		}
		for j := range 3 {
			p.Endpoints = append(p.Endpoints, abi.Endpoint{
				Addr: netip.AddrFrom4([4]byte{10, 0, byte(i), byte(j + 1)}), Port: 8080, Ready: true, Serving: true,
			})
		}
		b.Ports = append(b.Ports, p)
	}
	return b
}

func call(t *testing.T, m *runtime.Module, b *abi.Batch) ([]abi.Result, error) {
	t.Helper()
	var enc abi.Encoder
	in, err := enc.Encode(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Call(context.Background(), b.Stage, in, nil)
	if err != nil {
		return nil, err
	}
	return abi.DecodeOutput(out, b, nil)
}

func TestLoadBuiltins(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	for _, b := range modules.Builtins {
		wasm, err := modules.Wasm(b.Name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := r.Load(context.Background(), "builtin:"+b.Name, wasm, runtime.Limits{})
		if err != nil {
			t.Fatalf("%s: %v", b.Name, err)
		}
		if !m.Metadata.Implements(b.Stage) || m.Metadata.Name != b.Name {
			t.Errorf("%s: metadata %+v does not declare stage %s", b.Name, m.Metadata, b.Stage)
		}
		if !strings.HasPrefix(m.Digest, "sha256:") {
			t.Errorf("%s: digest %q", b.Name, m.Digest)
		}
	}
}

// TestContainment runs each misbehaviour and checks its reason, and that
// the module keeps working afterwards (the failed instance was replaced).
func TestContainment(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  runtime.Config
	}{
		{"instrumented", runtime.Config{}},
		{"close-on-context-done", runtime.Config{Interrupt: runtime.InterruptCloseOnContextDone}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			r := newRuntime(t, mode.cfg)
			load := func(l runtime.Limits) *runtime.Module {
				m, err := r.Load(context.Background(), "misbehave", testModule(t, "misbehave"), l)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			// A Go guest collects garbage ever more often as it nears its
			// cap, so the memory bomb gets a deadline it cannot reach.
			fast := load(runtime.Limits{Timeout: 300 * time.Millisecond, Instances: 1})
			roomy := load(runtime.Limits{Timeout: time.Minute, MemoryBytes: 32 << 20, Instances: 1})
			tests := []struct {
				behaviour string
				m         *runtime.Module
				reason    runtime.Reason
			}{
				{"spin", fast, runtime.ReasonTimeout},
				{"tree", fast, runtime.ReasonTimeout},
				{"bomb", roomy, runtime.ReasonMemory},
				{"trap", fast, runtime.ReasonTrap},
				{"exit", fast, runtime.ReasonExit},
			}
			for _, tc := range tests {
				m := tc.m
				t.Run(tc.behaviour, func(t *testing.T) {
					for _, stage := range abi.Stages {
						_, err := call(t, m, batch(stage, "", tc.behaviour))
						var ce *runtime.CallError
						if !errors.As(err, &ce) || ce.Reason != tc.reason || ce.Stage != stage || ce.Module != "misbehave" {
							t.Fatalf("stage %s: got %v, want a CallError with reason %s", stage, err, tc.reason)
						}
						res, err := call(t, m, batch(stage, "", ""))
						if err != nil {
							t.Fatalf("stage %s: module unusable after %s: %v", stage, tc.behaviour, err)
						}
						if len(res) != 2 || res[0].Err != "" || res[1].Err != "" {
							t.Fatalf("stage %s: after %s: results %+v", stage, tc.behaviour, res)
						}
					}
				})
			}
		})
	}
}

// collectUntilDone runs garbage collections back to back until t ends.
func collectUntilDone(t *testing.T) {
	stop := make(chan struct{})
	var gcs sync.WaitGroup
	gcs.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				goruntime.GC()
			}
		}
	})
	t.Cleanup(func() {
		close(stop)
		gcs.Wait()
	})
}

// TestSpinUnderGC: a guest spinning in machine code cannot be preempted, so
// a garbage collection waits for it to come back into Go before it can stop
// the world, and meanwhile the timer that ends the call cannot run. The
// instrumented guest yields to the host regularly; without that, this test
// hangs.
func TestSpinUnderGC(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	m, err := r.Load(context.Background(), "misbehave", testModule(t, "misbehave"), runtime.Limits{Timeout: 200 * time.Millisecond, Instances: 2})
	if err != nil {
		t.Fatal(err)
	}
	collectUntilDone(t)
	for _, stage := range abi.Stages {
		done := make(chan error, 1)
		go func() {
			_, err := call(t, m, batch(stage, "", "spin"))
			done <- err
		}()
		select {
		case err := <-done:
			var ce *runtime.CallError
			if !errors.As(err, &ce) || ce.Reason != runtime.ReasonTimeout {
				t.Fatalf("stage %s: got %v, want a CallError with reason %s", stage, err, runtime.ReasonTimeout)
			}
		case <-time.After(30 * time.Second): // failure guard only
			t.Fatalf("stage %s: spinning call still running after 30s of forced collections", stage)
		}
	}
}

// TestCallCancelled: cancelling the caller's context stops a spinning guest
// with the context's error.
func TestCallCancelled(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	m, err := r.Load(context.Background(), "misbehave", testModule(t, "misbehave"), runtime.Limits{Timeout: time.Minute, Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	var enc abi.Encoder
	in, err := enc.Encode(nil, batch(abi.StageTopology, "spin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = m.Call(ctx, abi.StageTopology, in, nil)
	var ce *runtime.CallError
	if !errors.As(err, &ce) || ce.Reason != runtime.ReasonTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a CallError with reason %s wrapping %v", err, runtime.ReasonTimeout, context.DeadlineExceeded)
	}
	if _, err := call(t, m, batch(abi.StageTopology, "")); err != nil {
		t.Fatalf("module unusable after a cancelled call: %v", err)
	}
}

// TestPortFailures: a panic, an error or an invalid record fails only its
// own port, with the call itself succeeding.
func TestPortFailures(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	m, err := r.Load(context.Background(), "misbehave", testModule(t, "misbehave"), runtime.Limits{Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		behaviour string
		stage     abi.Stage
		invalid   bool
		want      string
	}{
		{"panic", abi.StageTopology, false, "panic: boom"},
		{"error", abi.StageTrafficPolicy, false, "declined on purpose"},
		{"badindex", abi.StageTopology, true, "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.behaviour, func(t *testing.T) {
			b := batch(tc.stage, "", tc.behaviour, "")
			if tc.stage != abi.StageTopology {
				for range b.Ports {
					b.Decisions = append(b.Decisions, abi.Decision{Eligible: abi.Indices{0, 1, 2}})
				}
			}
			res, err := call(t, m, b)
			if err != nil {
				t.Fatal(err)
			}
			if res[1].Invalid != tc.invalid || !strings.Contains(res[1].Err, tc.want) {
				t.Errorf("port 1: %+v, want Err containing %q (invalid=%v)", res[1], tc.want, tc.invalid)
			}
			if res[0].Err != "" || res[2].Err != "" {
				t.Errorf("neighbours failed: %q, %q", res[0].Err, res[2].Err)
			}
		})
	}
}

func TestGarbageOutput(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	m, err := r.Load(context.Background(), "garbage", testModule(t, "garbage"), runtime.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = call(t, m, batch(abi.StageTopology, ""))
	if !errors.Is(err, abi.ErrMalformedOutput) {
		t.Fatalf("got %v, want ErrMalformedOutput", err)
	}
}

func TestInspectRejects(t *testing.T) {
	good := testModule(t, "garbage")
	tests := []struct {
		name string
		wasm []byte
		want string
	}{
		{"not wasm", []byte("hello"), "invalid module"},
		{"empty", nil, "invalid module"},
		{"no marker", moduleWith(t, nil, []string{"wasp_buffer", "memory"}), "no wasp_abi_v1 export"},
		{"future abi", moduleWith(t, nil, []string{"wasp_abi_v2"}), "speaks ABI v2"},
		{"no metadata", moduleWith(t, nil, []string{"wasp_abi_v1"}), `no "wasp.metadata" custom section`},
		{"forbidden import", moduleWith(t, []string{"env"}, []string{"wasp_abi_v1"}), "imports env.f"},
		// Only the instrumenter adds imports from wasp, after Inspect.
		{"imports from wasp", moduleWith(t, []string{"wasp"}, []string{"wasp_abi_v1"}), "imports wasp.f"},
		{"truncated", good[:len(good)/2], "invalid module"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runtime.Inspect(tc.wasm)
			if !errors.Is(err, runtime.ErrInvalidModule) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrInvalidModule containing %q", err, tc.want)
			}
		})
	}
}

// moduleWith assembles a minimal module that imports a function f from
// each of imports and exports a function under each name of exports
// (metadata is added separately where a test needs it).
func moduleWith(t *testing.T, imports, exports []string) []byte {
	t.Helper()
	b := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	section := func(id byte, payload []byte) {
		b = append(b, id, byte(len(payload)))
		b = append(b, payload...)
	}
	section(1, []byte{1, 0x60, 0, 0}) // type 0: () -> ()
	if len(imports) > 0 {
		p := []byte{byte(len(imports))}
		for _, m := range imports {
			p = append(p, byte(len(m)))
			p = append(p, m...)
			p = append(p, 1, 'f', 0, 0)
		}
		section(2, p)
	}
	section(3, []byte{1, 0}) // one function of type 0
	p := []byte{byte(len(exports))}
	for _, e := range exports {
		p = append(p, byte(len(e)))
		p = append(p, e...)
		p = append(p, 0, byte(len(imports))) // func index after the imports
	}
	section(7, p)
	section(10, []byte{1, 2, 0, 0x0b}) // body: no locals, end
	return b
}

func TestMinHostVersion(t *testing.T) {
	wasm := testModule(t, "garbage")
	for _, tc := range []struct {
		min string
		ok  bool
	}{
		{"", true}, {"0.0.1", true}, {runtime.HostVersion, true}, {"v0.1.0-rc.1", true},
		{"0.2.0", false}, {"1.0.0", false}, {"0.1.1", false},
	} {
		meta := &metadata.Metadata{Name: "garbage", Version: "0.0.1", ABI: abi.Version, Stages: []string{"topology"}, MinHostVersion: tc.min}
		annotated, err := runtime.Annotate(wasm, meta)
		if err == nil {
			_, err = runtime.Inspect(annotated)
		}
		if ok := err == nil; ok != tc.ok {
			t.Errorf("minHostVersion %q: err %v, want ok=%v", tc.min, err, tc.ok)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "needs wasp "+tc.min)) {
			t.Errorf("minHostVersion %q: error %v does not say what is needed", tc.min, err)
		}
	}
}

// TestCompilationCache: a runtime with a cache directory leaves compiled
// code there, and a second runtime loads from it; Config.Compiled hears of
// a miss, then hits: the runtime's own, then the directory's.
func TestCompilationCache(t *testing.T) {
	dir := t.TempDir()
	wasm, err := modules.Wasm("selection")
	if err != nil {
		t.Fatal(err)
	}
	var cached []bool
	for i := range 2 {
		r := newRuntime(t, runtime.Config{CacheDir: dir, Compiled: func(c bool) { cached = append(cached, c) }})
		for range 2 - i {
			if _, err := r.Load(context.Background(), "selection", wasm, runtime.Limits{Instances: 1}); err != nil {
				t.Fatalf("load %d: %v", i, err)
			}
		}
		var files int
		_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, _ error) error {
			if d != nil && !d.IsDir() {
				files++
			}
			return nil
		})
		if files == 0 {
			t.Fatalf("load %d: nothing cached in %s", i, dir)
		}
	}
	if want := []bool{false, true, true}; !slices.Equal(cached, want) {
		t.Errorf("Compiled told %v, want %v", cached, want)
	}
}

// TestHostileModules: binaries whose counts would make wazero's decoder
// allocate without bound are refused before they reach it. Without that
// check these cases do not fail: they kill the test process.
func TestHostileModules(t *testing.T) {
	sec := func(id byte, payload ...byte) []byte { return append([]byte{id, byte(len(payload))}, payload...) }
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	exports := []byte{4}
	for _, e := range []string{"wasp_abi_v1", "wasp_buffer", "memory", "wasp_topology"} {
		exports = append(exports, name(e)...)
		exports = append(exports, 0, 0)
	}
	meta := []byte(`{"name":"hostile","version":"0.0.1","abi":1,"stages":["topology"]}`)
	custom := append(name(abi.MetadataSection), meta...)
	build := func(global, code []byte) []byte {
		b := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
		b = append(b, sec(1, 1, 0x60, 0, 0)...) // type () -> ()
		b = append(b, sec(3, 1, 0)...)          // one function
		b = append(b, global...)
		b = append(b, sec(7, exports...)...)
		b = append(b, sec(10, code...)...)
		b = append(b, 0, byte(len(custom)))
		return append(b, custom...)
	}
	huge := []byte{0xf0, 0xff, 0xff, 0xff, 0x0f} // 4,294,967,280
	tests := []struct {
		name string
		wasm []byte
		want string
	}{
		{"global count", build(sec(6, append(huge, 0x7f)...), []byte{1, 2, 0, 0x0b}), "exceeds"},
		{"locals count", build(nil, append([]byte{1, 8, 1}, append(huge, 0x7f, 0x0b)...)), "locals"},
	}
	for _, mode := range []runtime.Config{{}, {Interrupt: runtime.InterruptCloseOnContextDone}} {
		r := newRuntime(t, mode)
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := r.Load(context.Background(), "hostile", tc.wasm, runtime.Limits{})
				if !errors.Is(err, runtime.ErrInvalidModule) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want ErrInvalidModule containing %q", err, tc.want)
				}
			})
		}
	}
}
