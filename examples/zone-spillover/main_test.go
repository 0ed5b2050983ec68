package main

import (
	"context"
	"math"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
	"github.com/wasp-proxy/wasp/sdk/go/wasp"
	"github.com/wasp-proxy/wasp/sdk/go/wasp/wasptest"
)

// Address plan: endpoint j of port i is 10.i.(j/256).(j%256):8080, so
// endpoints are in index order but not in upstream's "ip:port" string order,
// which nothing here depends on. The node under
// test is node-a in zone-a; an endpoint is local (on node-a) only where a
// test says so.
const nodeZone = "zone-a"

var (
	zonedNode   = abi.Node{Name: "node-a", Labels: []abi.Label{{Key: abi.LabelTopologyZone, Value: nodeZone}}}
	unzonedNode = abi.Node{Name: "node-a"}
)

// testCase is one service port and what the module must answer for it.
type testCase struct {
	name    string
	node    abi.Node
	percent string // annotation value; "" for no annotation
	zones   []string
	local   []int // endpoints on this node
	// The previous stages' sets; nil means not used.
	cluster, localSet  abi.Indices
	itpLocal, etpLocal bool

	want    map[uint32]uint32 // index -> weight; nil: check only the share
	share   float64           // expected other-zone share in percent; < 0: don't check
	wantErr string            // substring of the port's error
}

// zones returns n zone names: the first nl in the node's zone, the rest
// spread over zone-b and zone-c.
func zones(nl, nr int) []string {
	z := make([]string, 0, nl+nr)
	for range nl {
		z = append(z, nodeZone)
	}
	for j := range nr {
		z = append(z, "zone-"+string(rune('b'+j%2)))
	}
	return z
}

func all(n int) abi.Indices {
	s := make(abi.Indices, n)
	for i := range s {
		s[i] = uint32(i)
	}
	return s
}

var tests = []testCase{
	{
		// 2 same-zone, 4 other-zone: wl:wr = 90·4 : 10·2 = 18:1, and
		// 4·1 / (2·18 + 4·1) = 10 %.
		name: "default 10 percent", node: zonedNode,
		zones: []string{"zone-a", "zone-a", "zone-b", "zone-b", "zone-c", "zone-c"}, cluster: all(6),
		want: map[uint32]uint32{0: 18, 1: 18, 2: 1, 3: 1, 4: 1, 5: 1}, share: 10,
	},
	{
		name: "0 percent leaves other zones out", node: zonedNode, percent: "0",
		zones: []string{"zone-a", "zone-b", "zone-c"}, cluster: all(3),
		want: map[uint32]uint32{0: 1}, share: 0,
	},
	{
		name: "0 percent without same-zone endpoints keeps them all", node: zonedNode, percent: "0",
		zones: []string{"zone-b", "zone-c"}, cluster: all(2),
		want: map[uint32]uint32{0: 1, 1: 1}, share: -1,
	},
	{
		name: "100 percent leaves the node's zone out", node: zonedNode, percent: "100",
		zones: []string{"zone-a", "zone-b", "zone-c"}, cluster: all(3),
		want: map[uint32]uint32{1: 1, 2: 1}, share: 100,
	},
	{
		// wl:wr = 50·3 : 50·1 = 3:1; 3·1 / (1·3 + 3·1) = 50 %.
		name: "50 percent", node: zonedNode, percent: "50",
		zones: []string{"zone-a", "zone-b", "zone-c", "zone-c"}, cluster: all(4),
		want: map[uint32]uint32{0: 3, 1: 1, 2: 1, 3: 1}, share: 50,
	},
	{
		name: "single zone gets equal weights", node: zonedNode, percent: "30",
		zones: []string{"zone-a", "zone-a", "zone-a"}, cluster: all(3),
		want: map[uint32]uint32{0: 1, 1: 1, 2: 1}, share: -1,
	},
	{
		name: "node without zone gets equal weights", node: unzonedNode,
		zones: []string{"zone-a", "zone-b", "zone-c"}, cluster: all(3),
		want: map[uint32]uint32{0: 1, 1: 1, 2: 1}, share: -1,
	},
	{
		name: "endpoints without zone count as other zones", node: zonedNode, percent: "20",
		zones: []string{"zone-a", "", ""}, cluster: all(3),
		// wl:wr = 80·2 : 20·1 = 8:1; 2 / (8 + 2) = 20 %.
		want: map[uint32]uint32{0: 8, 1: 1, 2: 1}, share: 20,
	},
	{
		name: "local set only (internalTrafficPolicy Local)", node: zonedNode, itpLocal: true,
		zones: []string{"zone-a", "zone-a", "zone-b"}, local: []int{0, 1}, localSet: abi.Indices{0, 1},
		want: map[uint32]uint32{0: 1, 1: 1}, share: -1,
	},
	{
		name: "cluster and local sets (externalTrafficPolicy Local)", node: zonedNode, etpLocal: true,
		zones: []string{"zone-a", "zone-b", "zone-c"}, local: []int{0},
		cluster: all(3), localSet: abi.Indices{0},
		want: map[uint32]uint32{0: 18, 1: 1, 2: 1}, share: 10,
	},
	{
		// The local set must keep its endpoint, so the node's zone gets
		// weight 1 against 65535: 2·65535 / (1 + 2·65535) ≈ 99.999 %.
		name: "100 percent with externalTrafficPolicy Local keeps the local set", node: zonedNode, percent: "100",
		etpLocal: true, zones: []string{"zone-a", "zone-b", "zone-c"}, local: []int{0},
		cluster: all(3), localSet: abi.Indices{0},
		want: map[uint32]uint32{0: 1, 1: abi.MaxWeight, 2: abi.MaxWeight}, share: 100,
	},
	{
		// An endpoint on this node whose zone disagrees with the node's.
		name: "0 percent keeps a local set of other-zone endpoints", node: zonedNode, percent: "0",
		etpLocal: true, zones: []string{"zone-a", "zone-b"}, local: []int{1},
		cluster: all(2), localSet: abi.Indices{1},
		want: map[uint32]uint32{0: abi.MaxWeight, 1: 1}, share: 0,
	},
	{
		name: "empty cluster set", node: zonedNode,
		zones: []string{"zone-a"}, cluster: abi.Indices{},
		want: map[uint32]uint32{}, share: -1,
	},
	{
		name: "invalid annotation", node: zonedNode, percent: "ten",
		zones: []string{"zone-a", "zone-b"}, cluster: all(2),
		wantErr: `annotation wasp.dev/zone-spillover-percent: "ten" is not an integer in [0,100]`,
	},
	{
		name: "annotation above 100", node: zonedNode, percent: "101",
		zones: []string{"zone-a", "zone-b"}, cluster: all(2), wantErr: `"101" is not an integer`,
	},
	{
		name: "negative annotation", node: zonedNode, percent: "-1",
		zones: []string{"zone-a", "zone-b"}, cluster: all(2), wantErr: `"-1" is not an integer`,
	},
	{
		name: "annotation with a space", node: zonedNode, percent: " 10",
		zones: []string{"zone-a", "zone-b"}, cluster: all(2), wantErr: `" 10" is not an integer`,
	},
	{
		name: "many endpoints", node: zonedNode, percent: "7",
		zones: zones(300, 700), cluster: all(1000), share: 7,
	},
	{
		// 2003·37 and 1999·63 have no common divisor and exceed 65535:
		// the weights are scaled, not exact.
		name: "many endpoints, scaled weights", node: zonedNode, percent: "37",
		zones: zones(2003, 1999), cluster: all(4002), share: 37,
	},
	{
		// The best integer weights can do is 65535:1, about 7 %.
		name: "many endpoints, 1 percent not representable", node: zonedNode, percent: "1",
		zones: zones(1, 5000), cluster: all(5001), share: -1,
		want: func() map[uint32]uint32 {
			m := map[uint32]uint32{0: abi.MaxWeight}
			for i := 1; i <= 5000; i++ {
				m[uint32(i)] = 1
			}
			return m
		}(),
	},
}

// port builds the service port of tc as the host would send it.
func (tc *testCase) port(i int) abi.ServicePort {
	p := abi.ServicePort{
		Namespace: "demo", Name: "svc-" + strconv.Itoa(i), PortName: "http", Protocol: abi.ProtocolTCP, Port: 80,
		InternalPolicyLocal: tc.itpLocal, ExternalPolicyLocal: tc.etpLocal, ExternallyAccessible: tc.etpLocal,
	}
	if tc.etpLocal {
		p.NodePort = 30080
	}
	if tc.percent != "" {
		p.Annotations = []abi.Label{{Key: Annotation, Value: tc.percent}}
	}
	for j, z := range tc.zones {
		ep := abi.Endpoint{
			Addr: netip.AddrFrom4([4]byte{10, byte(i), byte(j >> 8), byte(j)}), Port: 8080,
			Ready: true, Serving: true, NodeName: "node-x", Zone: z,
		}
		for _, l := range tc.local {
			if l == j {
				ep.Local, ep.NodeName = true, "node-a"
			}
		}
		p.Endpoints = append(p.Endpoints, ep)
	}
	return p
}

// decision is what the topology and traffic-policy stages decided for tc.
func (tc *testCase) decision() abi.Decision {
	return abi.Decision{
		Eligible: all(len(tc.zones)), Cluster: tc.cluster, Local: tc.localSet,
		HasAnyEndpoints: len(tc.cluster)+len(tc.localSet) > 0,
	}
}

// check compares one port's result with tc.
func (tc *testCase) check(t *testing.T, ports []abi.ServicePort, i int, res abi.Result) {
	t.Helper()
	if tc.wantErr != "" {
		if !strings.Contains(res.Err, tc.wantErr) || res.Invalid {
			t.Errorf("got error %q (invalid=%v), want one containing %q", res.Err, res.Invalid, tc.wantErr)
		}
		return
	}
	if res.Err != "" {
		t.Fatalf("port failed: %s (invalid=%v)", res.Err, res.Invalid)
	}
	if tc.want != nil {
		got := make(map[uint32]uint32, len(res.Weights))
		for _, w := range res.Weights {
			got[w.Index] = w.Weight
		}
		if !reflect.DeepEqual(got, tc.want) {
			if len(got) > 20 {
				t.Errorf("weights differ (%d chosen, want %d)", len(got), len(tc.want))
			} else {
				t.Errorf("weights %v, want %v", got, tc.want)
			}
		}
	}
	if tc.share >= 0 {
		basis := tc.cluster
		if len(basis) == 0 {
			basis = tc.localSet
		}
		if got := share(ports[i], res.Weights, basis); math.Abs(got-tc.share) > 1 {
			t.Errorf("other-zone share %.3f %%, want %v %% ± 1", got, tc.share)
		}
	}
}

// share returns the percentage of the weight of set's chosen endpoints that
// lies outside the node's zone: the expected share of new connections sent
// to other zones.
func share(p abi.ServicePort, weights []abi.Weight, set abi.Indices) float64 {
	var remote, total float64
	for _, w := range weights {
		if !contains(set, w.Index) {
			continue
		}
		total += float64(w.Weight)
		if p.Endpoints[w.Index].Zone != nodeZone {
			remote += float64(w.Weight)
		}
	}
	return 100 * remote / total
}

func contains(s abi.Indices, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestSelection(t *testing.T) {
	for i := range tests {
		tc := &tests[i]
		t.Run(tc.name, func(t *testing.T) {
			ports := []abi.ServicePort{tc.port(0)}
			res, err := wasptest.Run(abi.StageEndpointSelection, tc.node, ports, []abi.Decision{tc.decision()})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, ports, 0, res[0])
		})
	}
}

// TestWeights checks the arithmetic alone over random counts: the share is
// within one percentage point of the request, or the weights are at the
// limit of what [1, MaxWeight] can express.
func TestWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		p, nl, nr := rng.IntN(99)+1, rng.IntN(3000)+1, rng.IntN(3000)+1
		wl, wr := weights(p, nl, nr)
		if wl < 1 || wl > abi.MaxWeight || wr < 1 || wr > abi.MaxWeight {
			t.Fatalf("weights(%d, %d, %d) = %d, %d: out of [1,%d]", p, nl, nr, wl, wr, abi.MaxWeight)
		}
		got := 100 * float64(nr) * float64(wr) / (float64(nl)*float64(wl) + float64(nr)*float64(wr))
		atLimit := (wl == abi.MaxWeight && wr == 1 && got > float64(p)) ||
			(wr == abi.MaxWeight && wl == 1 && got < float64(p))
		if math.Abs(got-float64(p)) > 1 && !atLimit {
			t.Errorf("weights(%d, %d, %d) = %d, %d: share %.3f %%", p, nl, nr, wl, wr, got)
		}
	}
}

// batch returns the test cases for node, those keep selects, as the ports
// of a single batch, as the host sends them: an invalid port must not affect
// its neighbours.
func batch(node abi.Node, keep func(*testCase) bool) *abi.Batch {
	b := &abi.Batch{Stage: abi.StageEndpointSelection, Node: node}
	for i := range tests {
		tc := &tests[i]
		if tc.node.Name != node.Name || len(tc.node.Labels) != len(node.Labels) || !keep(tc) {
			continue
		}
		b.Ports = append(b.Ports, tc.port(i))
		b.Decisions = append(b.Decisions, tc.decision())
	}
	return b
}

func everyCase(*testCase) bool { return true }

// batches returns one batch per node of the test cases.
func batches() []*abi.Batch {
	return []*abi.Batch{batch(zonedNode, everyCase), batch(unzonedNode, everyCase)}
}

func TestBatch(t *testing.T) {
	for _, b := range batches() {
		res, err := wasptest.Run(b.Stage, b.Node, b.Ports, b.Decisions)
		if err != nil {
			t.Fatal(err)
		}
		checkBatch(t, b, res)
	}
}

func checkBatch(t *testing.T, b *abi.Batch, res []abi.Result) {
	t.Helper()
	for i, p := range b.Ports {
		k, _ := strconv.Atoi(strings.TrimPrefix(p.Name, "svc-"))
		tc := &tests[k]
		t.Run(tc.name, func(t *testing.T) { tc.check(t, b.Ports, i, res[i]) })
	}
}

// TestNoAllocs: after warm-up, the hot path (the SDK's entry point and the
// handler, for every valid port) allocates nothing.
func TestNoAllocs(t *testing.T) {
	valid := batch(zonedNode, func(tc *testCase) bool { return tc.wantErr == "" })
	var enc abi.Encoder
	in, err := enc.Encode(nil, valid)
	if err != nil {
		t.Fatal(err)
	}
	if wasp.Run(valid.Stage, in) == nil {
		t.Fatal("no output")
	}
	if n := testing.AllocsPerRun(50, func() { wasp.Run(valid.Stage, in) }); n != 0 {
		t.Errorf("%v allocations per batch of %d ports, want 0", n, len(valid.Ports))
	}
}

// TestInWasp builds the module into Wasm, loads it into wasp's runtime and
// checks that the same batch gets the same answers as natively.
func TestInWasp(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("building the module needs the go command:", err)
	}
	ctx := context.Background()
	wasm, err := modbuild.Build(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	m, err := rt.Load(ctx, "zone-spillover", wasm, runtime.Limits{Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	if m.Metadata.Name != "zone-spillover" || !m.Metadata.Implements(abi.StageEndpointSelection) {
		t.Fatalf("metadata %+v", m.Metadata)
	}

	for _, b := range batches() {
		var enc abi.Encoder
		in, err := enc.Encode(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Call(ctx, b.Stage, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := abi.DecodeOutput(out, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := wasptest.Run(b.Stage, b.Node, b.Ports, b.Decisions)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("node %s: results in Wasm differ from the native ones", b.Node.Name)
		}
		checkBatch(t, b, got)
	}
}
