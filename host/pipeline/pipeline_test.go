package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/reference"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
	"github.com/wasp-proxy/wasp/modules"
	"github.com/wasp-proxy/wasp/modules/builds"
)

// embedded is the build of the default modules wasp embeds.
var embedded = builds.Build(modules.Build)

// defaults loads build b of the default modules into a pipeline.
func defaults(t testing.TB, b builds.Build, cfg runtime.Config, limits runtime.Limits) (*pipeline.Pipeline, [4]*runtime.Module) {
	t.Helper()
	rt, err := runtime.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	var opts pipeline.Options
	var mods [4]*runtime.Module
	for _, m := range modules.Builtins {
		wasm, err := builds.Wasm(b, m.Name)
		if err != nil {
			t.Fatal(err)
		}
		mod, err := rt.Load(context.Background(), "builtin:"+m.Name, wasm, limits)
		if err != nil {
			t.Fatalf("%s build: %v", b, err)
		}
		opts.Modules[m.Stage], mods[m.Stage] = mod, mod
	}
	return pipeline.New(opts), mods
}

func ports(sps []abi.ServicePort) []pipeline.Port {
	out := make([]pipeline.Port, len(sps))
	for i, sp := range sps {
		out[i] = pipeline.Port{Key: fmt.Sprintf("%s/%s:%s#%d", sp.Namespace, sp.Name, sp.PortName, i), ServicePort: sp}
	}
	return out
}

// checkAgainstReference compares every result of build b with the native
// reference.
func checkAgainstReference(t *testing.T, b builds.Build, node abi.Node, sps []abi.ServicePort, got []pipeline.Result) {
	t.Helper()
	for i := range sps {
		want := reference.Categorize(&node, &sps[i])
		if got[i].Source != pipeline.SourceModules {
			t.Fatalf("%s build: port %d: source %s: %v", b, i, got[i].Source, got[i].Err)
		}
		if !reflect.DeepEqual(got[i].Decision, want) {
			t.Fatalf("%s build: port %d (%+v):\nwasm:      %+v\nreference: %+v", b, i, sps[i], got[i].Decision, want)
		}
	}
}

// eachBuild runs f as a subtest for every build of the default modules.
func eachBuild(t *testing.T, f func(t *testing.T, b builds.Build)) {
	for _, b := range builds.All {
		t.Run(string(b), func(t *testing.T) { f(t, b) })
	}
}

// TestDefaultModulesMatchReference runs each build of the Wasm default
// chain and the native reference over a realistic batch and requires
// identical decisions, nil versus empty included.
func TestDefaultModulesMatchReference(t *testing.T) {
	eachBuild(t, func(t *testing.T, b builds.Build) {
		p, _ := defaults(t, b, runtime.Config{}, runtime.Limits{})
		node, sps := referencetest.Batch(1, 3000, 10)
		checkAgainstReference(t, b, node, sps, p.Run(context.Background(), node, ports(sps)))
	})
}

// randomPorts builds adversarial service ports: every condition
// combination, partial and empty hints, "" zones, all policies.
func randomPorts(r *rand.Rand, n int) (abi.Node, []abi.ServicePort) {
	zones := []string{"", "zone-a", "zone-b"}
	nodes := []string{"", "node-a", "node-b"}
	node := abi.Node{Name: nodes[1+r.IntN(2)]}
	if z := zones[r.IntN(3)]; r.IntN(4) != 0 {
		node.Labels = []abi.Label{{Key: abi.LabelTopologyZone, Value: z}}
	}
	var sps []abi.ServicePort
	for p := range n {
		sp := abi.ServicePort{
			Namespace: "ns", Name: fmt.Sprint("svc-", p), Protocol: abi.ProtocolTCP, Port: 80,
			InternalPolicyLocal: r.IntN(3) == 0, ExternalPolicyLocal: r.IntN(3) == 0, ExternallyAccessible: r.IntN(2) == 0,
		}
		for e := range r.IntN(7) {
			ep := abi.Endpoint{
				Addr: netip.AddrFrom4([4]byte{10, 0, byte(p), byte(e + 1)}), Port: 8080,
				Ready: r.IntN(2) == 0, Serving: r.IntN(2) == 0, Terminating: r.IntN(2) == 0,
				NodeName: nodes[r.IntN(3)],
			}
			ep.Local = ep.NodeName == node.Name && node.Name != ""
			for range r.IntN(3) {
				ep.ZoneHints = append(ep.ZoneHints, zones[r.IntN(3)])
			}
			for range r.IntN(2) {
				ep.NodeHints = append(ep.NodeHints, nodes[r.IntN(3)])
			}
			sp.Endpoints = append(sp.Endpoints, ep)
		}
		sps = append(sps, sp)
	}
	return node, sps
}

// FuzzChain is the differential fuzz test: every build of the Wasm
// default chain equals the native reference on random service ports.
// Under plain go test it runs its seeds; the loop in TestChainRandom
// covers many more. WASP_FUZZ_BUILD=go or rust fuzzes one build alone.
func FuzzChain(f *testing.F) {
	var chains []*pipeline.Pipeline
	var names []builds.Build
	for _, b := range builds.All {
		if only := os.Getenv("WASP_FUZZ_BUILD"); only != "" && only != string(b) {
			continue
		}
		p, _ := defaults(f, b, runtime.Config{}, runtime.Limits{})
		chains, names = append(chains, p), append(names, b)
	}
	if len(chains) == 0 {
		f.Fatalf("WASP_FUZZ_BUILD=%q names no build (want one of %v)", os.Getenv("WASP_FUZZ_BUILD"), builds.All)
	}
	for s := range uint64(8) {
		f.Add(s, uint8(20))
	}
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		node, sps := randomPorts(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), int(n))
		for k, p := range chains {
			checkAgainstReference(t, names[k], node, sps, p.Run(context.Background(), node, ports(sps)))
		}
	})
}

func TestChainRandom(t *testing.T) {
	eachBuild(t, func(t *testing.T, b builds.Build) {
		p, _ := defaults(t, b, runtime.Config{}, runtime.Limits{})
		for seed := range uint64(200) {
			node, sps := randomPorts(rand.New(rand.NewPCG(seed, 7)), 100)
			checkAgainstReference(t, b, node, sps, p.Run(context.Background(), node, ports(sps)))
		}
	})
}

var (
	misbehaveOnce sync.Once
	misbehaveWasm []byte
	misbehaveErr  error
)

func misbehave(t testing.TB) []byte {
	t.Helper()
	misbehaveOnce.Do(func() {
		misbehaveWasm, misbehaveErr = modbuild.Build(context.Background(), "../runtime/testdata/modules/misbehave")
	})
	if misbehaveErr != nil {
		t.Fatal(misbehaveErr)
	}
	return misbehaveWasm
}

// misbehaving loads the misbehave module into a runtime of the test's,
// with a short call timeout.
func misbehaving(t *testing.T) *runtime.Module {
	t.Helper()
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	m, err := rt.Load(context.Background(), "misbehave", misbehave(t), runtime.Limits{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// behaving returns n service ports, each with one endpoint in
// 10.subnet.0.0/16 (a decision made then is told by its endpoints), and
// the misbehave module's behaviour for those in behaviour.
func behaving(n int, subnet byte, behaviour map[int]string) []pipeline.Port {
	var out []pipeline.Port
	for i := range n {
		sp := abi.ServicePort{Namespace: "ns", Name: fmt.Sprint("svc-", i), Protocol: abi.ProtocolTCP, Port: 80}
		if b, ok := behaviour[i]; ok {
			sp.Annotations = []abi.Label{{Key: "wasp.test/behaviour", Value: b}}
		}
		sp.Endpoints = []abi.Endpoint{{Addr: netip.AddrFrom4([4]byte{10, subnet, 0, byte(i)}), Port: 80, Ready: true, Serving: true}}
		out = append(out, pipeline.Port{Key: sp.Name, ServicePort: sp})
	}
	return out
}

// TestContainment puts misbehaving ports among good ones and checks that
// only they fall back, first to the builtin semantics, then to their last
// good decision.
func TestContainment(t *testing.T) {
	m := misbehaving(t)
	node := abi.Node{Name: "node-a"}
	mk := func(behaviour map[int]string) []pipeline.Port { return behaving(40, 1, behaviour) }
	for _, stage := range abi.Stages {
		t.Run(stage.String(), func(t *testing.T) {
			var opts pipeline.Options
			opts.Modules[stage] = m
			p := pipeline.New(opts)
			bad := map[int]string{3: "trap", 17: "spin", 25: "panic", 31: "badindex", 38: "exit"}
			if stage == abi.StageTrafficPolicy {
				bad[31] = "error" // badindex is not wired for this stage
			}
			for round, wantFallback := range []pipeline.Source{pipeline.SourceBuiltin, pipeline.SourceLastGood} {
				if round == 1 {
					// Give the bad ports a good run first, so they have a
					// last good decision, then misbehave again.
					for i, r := range p.Run(context.Background(), node, mk(nil)) {
						if r.Source != pipeline.SourceModules {
							t.Fatalf("port %d: %s: %v", i, r.Source, r.Err)
						}
					}
				}
				res := p.Run(context.Background(), node, mk(bad))
				for i, r := range res {
					_, isBad := bad[i]
					switch {
					case isBad && r.Source != wantFallback:
						t.Errorf("round %d port %d (%s): source %s, want %s", round, i, bad[i], r.Source, wantFallback)
					case isBad && r.Err == nil:
						t.Errorf("round %d port %d: no error recorded", round, i)
					case !isBad && r.Source != pipeline.SourceModules:
						t.Errorf("round %d port %d: good port affected: %s: %v", round, i, r.Source, r.Err)
					}
					if len(r.Cluster) != 1 {
						t.Errorf("round %d port %d: cluster %v: every port must keep its endpoint", round, i, r.Cluster)
					}
				}
			}
		})
	}
}

// TestContainmentHostPanic: a panic on the call path, on whichever of
// the isolation's goroutines makes the call, fails only the ports of that
// call, which are then told apart as for any failed call; the process
// lives on.
func TestContainmentHostPanic(t *testing.T) {
	for _, instances := range []int{1, 4} {
		t.Run(fmt.Sprint(instances, " instances"), func(t *testing.T) {
			var opts pipeline.Options
			opts.Modules[abi.StageTopology] = &fake{instances: instances}
			p := pipeline.New(opts)
			bad := map[int]string{5: "host-panic", 30: "host-panic"}
			res := p.Run(context.Background(), abi.Node{Name: "node-a"}, behaving(40, 1, bad))
			for i, r := range res {
				switch _, isBad := bad[i]; {
				case isBad && (r.Source != pipeline.SourceBuiltin || !strings.Contains(fmt.Sprint(r.Err), "panic")):
					t.Errorf("port %d: source %s, error %v; want %s and the panic named", i, r.Source, r.Err, pipeline.SourceBuiltin)
				case !isBad && r.Source != pipeline.SourceModules:
					t.Errorf("port %d: good port affected: %s: %v", i, r.Source, r.Err)
				}
			}
		})
	}
}

// TestSetModules swaps a stage's module between runs: the new module
// decides from then on, and a port it fails for keeps the decision the
// old one made (last good survives the swap) unless the swap makes the
// stage's failure policy Builtin.
func TestSetModules(t *testing.T) {
	bad := misbehaving(t)
	node := abi.Node{Name: "node-a"}
	in := behaving(4, 1, map[int]string{2: "trap"})
	sources := func(res []pipeline.Result) []pipeline.Source {
		var out []pipeline.Source
		for _, r := range res {
			out = append(out, r.Source)
		}
		return out
	}

	p := pipeline.New(pipeline.Options{}) // the native reference for every stage
	if got := sources(p.Run(context.Background(), node, in)); !reflect.DeepEqual(got, []pipeline.Source{0, 0, 0, 0}) {
		t.Fatalf("before the swap: sources %v, want every port from the modules", got)
	}
	var mods [len(abi.Stages) + 1]pipeline.Module
	mods[abi.StageEndpointSelection] = bad
	var policies [len(abi.Stages) + 1]pipeline.FailurePolicy
	p.SetModules(mods, policies)
	res := p.Run(context.Background(), node, in)
	want := []pipeline.Source{pipeline.SourceModules, pipeline.SourceModules, pipeline.SourceLastGood, pipeline.SourceModules}
	if got := sources(res); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the swap: sources %v, want %v (the trapping port keeps the old decision)", got, want)
	}
	if len(res[2].Cluster) != 1 {
		t.Errorf("the trapping port's last good decision lost its endpoint: %+v", res[2].Decision)
	}
	policies[abi.StageEndpointSelection] = pipeline.Builtin
	p.SetModules(mods, policies)
	want[2] = pipeline.SourceBuiltin
	if got := sources(p.Run(context.Background(), node, in)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the swap to Builtin: sources %v, want %v", got, want)
	}
	p.SetModules([len(abi.Stages) + 1]pipeline.Module{}, [len(abi.Stages) + 1]pipeline.FailurePolicy{})
	if got := sources(p.Run(context.Background(), node, in)); !reflect.DeepEqual(got, []pipeline.Source{0, 0, 0, 0}) {
		t.Fatalf("after swapping back: sources %v, want every port from the modules", got)
	}
}

// TestFailurePolicy fails a stage's module for some ports, with and
// without a last good decision, under each failure policy: KeepLastGood
// keeps the last good decision if there is one, Builtin always takes the
// reference semantics for the evaluation; the ports that do not fail are
// not affected either way.
func TestFailurePolicy(t *testing.T) {
	m := misbehaving(t)
	node := abi.Node{Name: "node-a"}
	bad := map[int]string{1: "trap", 2: "error"}
	tests := []struct {
		policy   pipeline.FailurePolicy
		lastGood bool
		want     pipeline.Source
	}{
		{pipeline.KeepLastGood, false, pipeline.SourceBuiltin},
		{pipeline.KeepLastGood, true, pipeline.SourceLastGood},
		{pipeline.Builtin, false, pipeline.SourceBuiltin},
		{pipeline.Builtin, true, pipeline.SourceBuiltin},
	}
	for _, stage := range abi.Stages {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%s/lastGood=%t", stage, tt.policy, tt.lastGood), func(t *testing.T) {
				rec := &recorder{calls: map[string]int{}, failed: map[string]int{}}
				var opts pipeline.Options
				opts.Modules[stage], opts.Policies[stage] = m, tt.policy
				opts.Observer = rec
				p := pipeline.New(opts)
				if tt.lastGood {
					for i, r := range p.Run(context.Background(), node, behaving(4, 1, nil)) {
						if r.Source != pipeline.SourceModules {
							t.Fatalf("good run: port %d: %s: %v", i, r.Source, r.Err)
						}
					}
				}
				// The ports keep their endpoints: a last good decision
				// keeps only those still there (TestLastGoodFollowsEndpoints).
				in := behaving(4, 1, bad)
				for i, r := range p.Run(context.Background(), node, in) {
					if _, isBad := bad[i]; !isBad {
						if r.Source != pipeline.SourceModules {
							t.Errorf("port %d: good port affected: %s: %v", i, r.Source, r.Err)
						}
						continue
					}
					if r.Source != tt.want || r.Err == nil {
						t.Errorf("port %d: source %s (err %v), want %s with the error", i, r.Source, r.Err, tt.want)
					}
					if tt.want == pipeline.SourceBuiltin {
						if want := reference.Categorize(&node, &in[i].ServicePort); !reflect.DeepEqual(r.Decision, want) {
							t.Errorf("port %d: decision %+v, want the reference's %+v", i, r.Decision, want)
						}
					}
					if !reflect.DeepEqual(r.Endpoints, in[i].Endpoints) || len(r.Cluster) != 1 {
						t.Errorf("port %d: endpoints %v, cluster %v, want the port's one endpoint", i, r.Endpoints, r.Cluster)
					}
				}
				if got := rec.fallbacks[stage][tt.want]; got != len(bad) {
					t.Errorf("Fallbacks[%s][%s] = %d, want %d", stage, tt.want, got, len(bad))
				}
				if got := rec.failed["misbehave "+stage.String()+" "+tt.want.String()+" trap"]; got != 1 {
					t.Errorf("PortFailed %v, want the trapping port once with source %s", rec.failed, tt.want)
				}
			})
		}
	}
}

// TestLastGoodFollowsEndpoints: a port whose module fails after its
// endpoints changed keeps, of its last good decision, only the endpoints
// still in the port; when none is left the builtin semantics decide over
// the current endpoints. Nothing is ever sent to an address that left.
func TestLastGoodFollowsEndpoints(t *testing.T) {
	node := abi.Node{Name: "node-a"}
	port := func(behaviour string, addrs ...string) []pipeline.Port {
		sp := abi.ServicePort{Namespace: "ns", Name: "svc", Protocol: abi.ProtocolTCP, Port: 80}
		if behaviour != "" {
			sp.Annotations = []abi.Label{{Key: "wasp.test/behaviour", Value: behaviour}}
		}
		for _, a := range addrs {
			sp.Endpoints = append(sp.Endpoints, abi.Endpoint{Addr: netip.MustParseAddr(a), Port: 8080, Ready: true, Serving: true})
		}
		return []pipeline.Port{{Key: "ns/svc:http", ServicePort: sp}}
	}
	// cluster resolves a result's Cluster set into addresses.
	cluster := func(r pipeline.Result) []string {
		var out []string
		for _, i := range r.Cluster {
			out = append(out, r.Endpoints[i].Addr.String())
		}
		return out
	}
	tests := []struct {
		name   string
		before []string
		after  []string
		want   pipeline.Source
		addrs  []string
	}{
		{"replaced", []string{"10.244.1.99"}, []string{"10.244.7.77"}, pipeline.SourceBuiltin, []string{"10.244.7.77"}},
		{"one of two replaced", []string{"10.244.1.10", "10.244.1.99"}, []string{"10.244.1.10", "10.244.7.77"}, pipeline.SourceLastGood, []string{"10.244.1.10"}},
		{"one added before", []string{"10.244.1.99"}, []string{"10.244.1.10", "10.244.1.99"}, pipeline.SourceLastGood, []string{"10.244.1.99"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts pipeline.Options
			opts.Modules[abi.StageEndpointSelection] = &fake{timeout: time.Millisecond}
			p := pipeline.New(opts)
			if r := p.Run(context.Background(), node, port("", tt.before...))[0]; r.Source != pipeline.SourceModules {
				t.Fatalf("good run: %s: %v", r.Source, r.Err)
			}
			r := p.Run(context.Background(), node, port("trap", tt.after...))[0]
			if r.Source != tt.want || r.Err == nil {
				t.Errorf("source %s (err %v), want %s", r.Source, r.Err, tt.want)
			}
			if got := cluster(r); !reflect.DeepEqual(got, tt.addrs) {
				t.Errorf("cluster %v, want %v", got, tt.addrs)
			}
		})
	}
}
