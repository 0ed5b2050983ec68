package runtime_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// eligibleOf runs the configured module's topology stage over one port of
// three endpoints (trapping when trap is set) and returns how many it
// made eligible.
func eligibleOf(t *testing.T, m *runtime.Module, trap bool) (int, error) {
	t.Helper()
	p := abi.ServicePort{Namespace: "ns", Name: "web", Protocol: abi.ProtocolTCP, Port: 80}
	if trap {
		p.Annotations = []abi.Label{{Key: "wasp.test/trap", Value: "yes"}}
	}
	for j := range 3 {
		p.Endpoints = append(p.Endpoints, abi.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(j + 1)}), Port: 8080, Ready: true, Serving: true})
	}
	res, err := call(t, m, &abi.Batch{Stage: abi.StageTopology, Node: abi.Node{Name: "node-a"}, Ports: []abi.ServicePort{p}})
	if err != nil {
		return 0, err
	}
	if res[0].Err != "" {
		t.Fatalf("port failed: %s", res[0].Err)
	}
	return len(res[0].Decision.Eligible), nil
}

func TestConfigure(t *testing.T) {
	wasm := testModule(t, "configured")
	r := newRuntime(t, runtime.Config{})
	fast := runtime.Limits{Instances: 1, Timeout: 300 * time.Millisecond}
	tests := []struct {
		name     string
		config   string
		limits   runtime.Limits
		eligible int            // when the load succeeds
		class    error          // when it fails
		want     string         // in the load error
		reason   runtime.Reason // in the load error, when the call failed
	}{
		{name: "none", config: "", eligible: 3},
		{name: "null", config: "null", eligible: 3},
		{name: "empty object", config: "{}", eligible: 3},
		{name: "accepted", config: `{"eligible": 1}`, eligible: 1},
		{name: "space around", config: "\n  {\"eligible\": 2}\n", eligible: 2},
		{name: "rejected", config: `{"reject": "zones: must not be empty"}`, class: runtime.ErrConfigRejected,
			want: `module "configured" rejected its configuration: zones: must not be empty`},
		{name: "not json", config: `{"eligible": }`, class: runtime.ErrConfigRejected, want: "rejected its configuration: invalid character"},
		{name: "panic", config: `{"do": "panic"}`, class: runtime.ErrConfigRejected, want: "rejected its configuration: panic: configuration made me panic"},
		{name: "trap", config: `{"do": "trap"}`, limits: fast, class: runtime.ErrInvalidModule, reason: runtime.ReasonTrap},
		{name: "spin", config: `{"do": "spin"}`, limits: fast, class: runtime.ErrInvalidModule, reason: runtime.ReasonTimeout},
		{name: "bomb", config: `{"do": "bomb"}`, limits: runtime.Limits{Instances: 1, MemoryBytes: 32 << 20, Timeout: time.Minute},
			class: runtime.ErrInvalidModule, reason: runtime.ReasonMemory},
		{name: "too large", config: `{"reject": "` + strings.Repeat("x", abi.MaxConfigLen) + `"}`, class: runtime.ErrConfigRejected,
			want: "more than the 1048576 allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limits := tc.limits
			if limits == (runtime.Limits{}) {
				limits = runtime.Limits{Instances: 1}
			}
			m, err := r.Load(context.Background(), "configured", wasm, limits, runtime.WithConfig([]byte(tc.config)))
			if tc.class != nil {
				want := tc.want
				if tc.reason != "" {
					want = abi.ConfigureExport + ": " + string(tc.reason)
				}
				if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, want %v containing %q", err, tc.class, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			n, err := eligibleOf(t, m, false)
			if err != nil || n != tc.eligible {
				t.Fatalf("eligible %d (%v), want %d", n, err, tc.eligible)
			}
		})
	}
}

// TestConfigureEveryInstance: every instance of the pool, those created
// under concurrent calls and those replacing failed ones, runs with the
// configuration.
func TestConfigureEveryInstance(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	m, err := r.Load(context.Background(), "configured", testModule(t, "configured"), runtime.Limits{Instances: 4}, runtime.WithConfig([]byte(`{"eligible": 1}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				if g%2 == 0 && i%5 == 0 {
					if _, err := eligibleOf(t, m, true); runtime.ReasonOf(err) != runtime.ReasonTrap {
						t.Errorf("trapping call: %v, want reason trap", err)
					}
					continue
				}
				if n, err := eligibleOf(t, m, false); err != nil || n != 1 {
					t.Errorf("eligible %d (%v), want 1: an instance without its configuration", n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := m.Stats(); st.Recycled == 0 {
		t.Errorf("no instance was replaced: %+v", st)
	}
	// Shrink creates a fresh instance too.
	if err := m.Shrink(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, err := eligibleOf(t, m, false); err != nil || n != 1 {
		t.Errorf("after Shrink: eligible %d (%v), want 1", n, err)
	}
}

// TestConfigureSameCode: the same binary under two configurations is
// compiled once but loads as two modules, each with its own.
func TestConfigureSameCode(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	wasm := testModule(t, "configured")
	var mods []*runtime.Module
	for _, c := range []string{`{"eligible": 1}`, `{"eligible": 2}`} {
		m, err := r.Load(context.Background(), "configured", wasm, runtime.Limits{Instances: 1}, runtime.WithConfig([]byte(c)))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		mods = append(mods, m)
	}
	if mods[0].Digest != mods[1].Digest || string(mods[0].Config) == string(mods[1].Config) {
		t.Errorf("digests %s, %s and configs %s, %s: want the same digest, different configs", mods[0].Digest, mods[1].Digest, mods[0].Config, mods[1].Config)
	}
	for i, m := range mods {
		if n, err := eligibleOf(t, m, false); err != nil || n != i+1 {
			t.Errorf("module %d: eligible %d (%v), want %d", i, n, err, i+1)
		}
	}
}

// abiModule assembles a minimal ABI v1 module with a topology stage;
// configure, if not nil, is the body of its wasp_configure export, of
// type (i32, i32) -> i64 unless noArgs. Its memory holds msg at offset 16.
func abiModule(t *testing.T, configure []byte, noArgs bool, msg string) []byte {
	t.Helper()
	uleb := func(v uint64) []byte {
		var b []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v != 0 {
				b = append(b, c|0x80)
				continue
			}
			return append(b, c)
		}
	}
	vec := func(items ...[]byte) []byte {
		b := uleb(uint64(len(items)))
		for _, it := range items {
			b = append(b, it...)
		}
		return b
	}
	name := func(s string) []byte { return append(uleb(uint64(len(s))), s...) }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	section := func(id byte, payload []byte) { wasm = cat(wasm, []byte{id}, uleb(uint64(len(payload))), payload) }
	const i32, i64 = 0x7f, 0x7e
	// Types: 0 () -> (), 1 (i32) -> i32, 2 (i32, i32) -> i64.
	section(1, vec([]byte{0x60, 0, 0}, []byte{0x60, 1, i32, 1, i32}, []byte{0x60, 2, i32, i32, 1, i64}))
	funcs := [][]byte{{0}, {1}, {2}}
	bodies := [][]byte{
		{0x0b},                   // wasp_abi_v1
		{0x41, 0x80, 0x08, 0x0b}, // wasp_buffer: 1024
		{0x42, 0x00, 0x0b},       // wasp_topology: no output
	}
	exports := [][]byte{
		cat(name("wasp_abi_v1"), []byte{0, 0}),
		cat(name("wasp_buffer"), []byte{0, 1}),
		cat(name("wasp_topology"), []byte{0, 2}),
		cat(name("memory"), []byte{2, 0}),
	}
	if configure != nil {
		typ := byte(2)
		if noArgs {
			typ = 0
		}
		funcs = append(funcs, []byte{typ})
		bodies = append(bodies, configure)
		exports = append(exports, cat(name(abi.ConfigureExport), []byte{0, 3}))
	}
	section(3, vec(funcs...))
	section(5, vec([]byte{0, 1}))
	section(7, vec(exports...))
	var code [][]byte
	for _, b := range bodies {
		body := cat([]byte{0}, b) // no locals
		code = append(code, cat(uleb(uint64(len(body))), body))
	}
	section(10, vec(code...))
	section(11, vec(cat([]byte{0, 0x41, 16, 0x0b}, name(msg))))
	section(0, cat(name(abi.MetadataSection), []byte(`{"name":"tiny","version":"0.0.1","abi":1,"stages":["topology"]}`)))
	return wasm
}

// i64Const is the body of a function returning v.
func i64Const(v int64) []byte {
	b := []byte{0x42}
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c, 0x0b)
		}
		b = append(b, c|0x80)
	}
}

// TestConfigureExport covers modules with and without wasp_configure, and
// what the host reads of a rejection.
func TestConfigureExport(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	long := strings.Repeat("z", 5000)
	tests := []struct {
		name   string
		wasm   []byte
		config string
		class  error
		want   string
	}{
		{name: "no export, no config", wasm: abiModule(t, nil, false, "")},
		{name: "no export, null", wasm: abiModule(t, nil, false, ""), config: "null"},
		{name: "no export, empty object", wasm: abiModule(t, nil, false, ""), config: " { } "},
		{name: "no export, config", wasm: abiModule(t, nil, false, ""), config: `{"zones":["a"]}`, class: runtime.ErrConfigRejected,
			want: `module "tiny": has configuration but does not export wasp_configure`},
		{name: "accepts", wasm: abiModule(t, i64Const(0), false, ""), config: `{"zones":["a"]}`},
		{name: "rejects", wasm: abiModule(t, i64Const(16<<32|9), false, "bad zone\n"), config: `{}`, class: runtime.ErrConfigRejected,
			want: `module "tiny" rejected its configuration: bad zone`},
		{name: "rejects no config", wasm: abiModule(t, i64Const(16<<32|8), false, "required"), class: runtime.ErrConfigRejected,
			want: `rejected its configuration: required`},
		{name: "long message truncated", wasm: abiModule(t, i64Const(16<<32|5000), false, long), class: runtime.ErrConfigRejected,
			want: "configuration: " + long[:abi.MaxConfigErrorLen]},
		{name: "message outside memory", wasm: abiModule(t, i64Const(0x10000<<32|4), false, ""), class: runtime.ErrInvalidModule,
			want: "wasp_configure: invalid-output"},
		{name: "wrong signature", wasm: abiModule(t, []byte{0x0b}, true, ""), class: runtime.ErrInvalidModule,
			want: `export "wasp_configure" has signature () -> (), want (i32, i32) -> (i64)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := r.Load(context.Background(), "tiny", tc.wasm, runtime.Limits{Instances: 1}, runtime.WithConfig([]byte(tc.config)))
			if tc.class == nil {
				if err != nil {
					t.Fatal(err)
				}
				m.Close()
				return
			}
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %v containing %q", err, tc.class, tc.want)
			}
			if strings.Contains(err.Error(), long[:abi.MaxConfigErrorLen+1]) {
				t.Errorf("message not truncated to %d bytes", abi.MaxConfigErrorLen)
			}
		})
	}
}
