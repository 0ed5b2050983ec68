package reference_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/reference"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
)

// seededCases is how many random cases TestCategorizeMatchesUpstream runs.
const seededCases = 25000

// FuzzCategorize checks the stage-split Categorize against the straight-line
// upstream transcription on service ports built from the fuzz input.
func FuzzCategorize(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 4, 0x01, 0x00, 0x11, 0x01, 0x21, 0x02, 0x11, 0x00})
	f.Add([]byte{2, 7, 3, 0x49, 0x00, 0x11, 0x01, 0x06, 0x00, 0x0e, 0x00})
	f.Add([]byte{0, 1, 2, 0x51, 0xc3, 0x51, 0xd1})
	f.Add([]byte{2, 6, 3, 0x0e, 0x00, 0x06, 0x00, 0x4b, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstUpstream(t, data)
	})
}

// TestCategorizeMatchesUpstream is FuzzCategorize over a fixed set of
// pseudo-random inputs, so every `go test` run covers it.
func TestCategorizeMatchesUpstream(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3+2*maxFuzzEndpoints)
	for n := range seededCases {
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		checkAgainstUpstream(t, data)
		if t.Failed() {
			t.Fatalf("case %d of %d differs from upstream", n, seededCases)
		}
	}
}

// TestCategorizeMatchesUpstreamOnBatch runs the differential check over the
// realistic mix of referencetest.Batch.
func TestCategorizeMatchesUpstreamOnBatch(t *testing.T) {
	node, ports := referencetest.Batch(7, 2000, 10)
	for i := range ports {
		compareWithUpstream(t, &node, &ports[i])
		if t.Failed() {
			t.Fatalf("service port %d (%s/%s)", i, ports[i].Namespace, ports[i].Name)
		}
	}
}

// maxFuzzEndpoints bounds the endpoints of a fuzzed service port.
const maxFuzzEndpoints = 8

// Values the fuzzer picks from. "" is included on purpose: upstream matches
// hints by set membership, so an empty hint meets an empty zone or name.
var (
	fuzzZones = [...]string{"zone-a", "zone-b", "zone-c", ""}
	fuzzNodes = [...]string{"node-0", "node-1", "node-2", ""}
)

// fuzzInput hands out the fuzz bytes one at a time, then zeroes.
type fuzzInput []byte

func (in *fuzzInput) next() byte {
	if len(*in) == 0 {
		return 0
	}
	b := (*in)[0]
	*in = (*in)[1:]
	return b
}

// buildCase turns fuzz bytes into a node and a service port:
//
//	byte 0: node zone label (absent, "", zone-a, zone-b) and node name
//	byte 1: policy bits iTP Local, eTP Local, externally accessible, NodePort
//	byte 2: endpoint count
//	then two bytes per endpoint: conditions, locality and hint shapes; hint values
func buildCase(data []byte) (abi.Node, abi.ServicePort) {
	in := fuzzInput(data)

	var node abi.Node
	b := in.next()
	node.Name = "node-0"
	if (b>>2)%8 == 0 {
		node.Name = ""
	}
	switch b % 4 {
	case 1:
		node.Labels = []abi.Label{{Key: abi.LabelTopologyZone, Value: ""}}
	case 2:
		node.Labels = []abi.Label{{Key: abi.LabelTopologyZone, Value: "zone-a"}}
	case 3:
		node.Labels = []abi.Label{{Key: abi.LabelTopologyZone, Value: "zone-b"}}
	}

	sp := abi.ServicePort{Namespace: "ns", Name: "svc", Protocol: abi.ProtocolTCP, Port: 80}
	b = in.next()
	sp.InternalPolicyLocal = b&1 != 0
	sp.ExternalPolicyLocal = b&2 != 0
	sp.ExternallyAccessible = b&4 != 0
	if sp.ExternallyAccessible && b&8 != 0 {
		sp.NodePort = 30080
	}

	n := int(in.next()) % (maxFuzzEndpoints + 1)
	for i := range n {
		shape, values := in.next(), in.next()
		ep := abi.Endpoint{
			Addr:        netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}),
			Port:        8080,
			Ready:       shape&1 != 0,
			Serving:     shape&2 != 0,
			Terminating: shape&4 != 0,
			Local:       shape&8 != 0,
		}
		ep.NodeName = "node-1"
		if ep.Local {
			ep.NodeName = "node-0"
		}
		ep.ZoneHints = fuzzHints(shape>>4, values, fuzzZones)
		ep.NodeHints = fuzzHints(shape>>6, values>>4, fuzzNodes)
		sp.Endpoints = append(sp.Endpoints, ep)
	}
	return node, sp
}

// fuzzHints returns a hint list shaped by the low two bits of shape (nil,
// one hint, two hints, empty non-nil) with names picked by the low four bits
// of values.
func fuzzHints(shape, values byte, names [4]string) []string {
	switch shape & 3 {
	case 1:
		return []string{names[values&3]}
	case 2:
		return []string{names[values&3], names[(values>>2)&3]}
	case 3:
		return []string{}
	}
	return nil
}

// checkAgainstUpstream builds a case from data and compares.
func checkAgainstUpstream(t *testing.T, data []byte) {
	t.Helper()
	node, sp := buildCase(data)
	compareWithUpstream(t, &node, &sp)
	if t.Failed() {
		t.Logf("input %x: node %+v service port %+v", data, node, sp)
	}
}

// compareWithUpstream checks Categorize against upstreamCategorize on one
// service port: the same endpoints in every set, nil exactly where upstream
// has nil, the same hasAnyEndpoints, and weight 1 on every reachable endpoint.
func compareWithUpstream(t *testing.T, node *abi.Node, sp *abi.ServicePort) {
	t.Helper()
	got := reference.Categorize(node, sp)
	cluster, local, all, hasAny := upstreamCategorize(sp.Endpoints, sp, node.Name, labelMap(node))

	for _, set := range []struct {
		name string
		got  abi.Indices
		want []abi.Endpoint
	}{
		{"Cluster", got.Cluster, cluster},
		{"Local", got.Local, local},
		{"All", got.All, all},
	} {
		if g := endpointsAt(sp.Endpoints, set.got); !reflect.DeepEqual(g, set.want) {
			t.Errorf("%s = %s, want %s", set.name, endpointList(g), endpointList(set.want))
		}
	}
	if got.HasAnyEndpoints != hasAny {
		t.Errorf("HasAnyEndpoints = %v, want %v", got.HasAnyEndpoints, hasAny)
	}
	if got.Eligible == nil {
		t.Errorf("Eligible = nil, want non-nil")
	}
	if want := weightsFor(got.All); !reflect.DeepEqual(got.Weights, want) {
		t.Errorf("Weights = %v, want %v", got.Weights, want)
	}
}

// endpointsAt maps an index set to its endpoints, keeping nil apart from
// empty.
func endpointsAt(eps []abi.Endpoint, set abi.Indices) []abi.Endpoint {
	if set == nil {
		return nil
	}
	out := make([]abi.Endpoint, 0, len(set))
	for _, i := range set {
		out = append(out, eps[i])
	}
	return out
}

// endpointList formats endpoints as their "ip:port" strings, null for nil.
func endpointList(eps []abi.Endpoint) string {
	if eps == nil {
		return "null"
	}
	s := make([]string, len(eps))
	for i, ep := range eps {
		s[i] = endpointString(ep)
	}
	return fmt.Sprint(s)
}
