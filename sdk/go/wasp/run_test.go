package wasp_test

import (
	"net/netip"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

// Handlers that read every field, so that fuzzed input reaches every
// accessor.
func init() {
	touch := func(node wasp.Node, sp wasp.ServicePort) {
		_, _ = node.Name(), node.Zone()
		_, _, _ = sp.Namespace(), sp.Name(), sp.PortName()
		_, _ = sp.Annotation("a")
		d := sp.Decision()
		for _, s := range []wasp.Indices{d.Eligible(), d.Cluster(), d.Local(), d.All()} {
			for k := range s.Len() {
				_ = s.Contains(s.At(k))
			}
		}
		for i := range sp.Len() {
			ep := sp.Endpoint(i)
			_, _, _, _ = ep.Addr(), ep.NodeName(), ep.Zone(), ep.Port()
			_, _ = ep.ZoneHints().Contains(node.Zone()), ep.NodeHints().Contains(node.Name())
		}
	}
	wasp.HandleTopology(func(node wasp.Node, sp wasp.ServicePort, out *wasp.TopologyResult) error {
		touch(node, sp)
		for i := range sp.Len() {
			out.Add(i)
		}
		return nil
	})
	wasp.HandleTrafficPolicy(func(node wasp.Node, sp wasp.ServicePort, out *wasp.PolicyResult) error {
		touch(node, sp)
		out.Cluster.Use()
		for i := range sp.Len() {
			out.Cluster.Add(i)
		}
		return nil
	})
	wasp.HandleEndpointSelection(func(node wasp.Node, sp wasp.ServicePort, out *wasp.SelectionResult) error {
		touch(node, sp)
		c := sp.Decision().Cluster()
		for k := range c.Len() {
			out.Set(c.At(k), 1)
		}
		return nil
	})
}

func seedBatch(stage abi.Stage) *abi.Batch {
	b := &abi.Batch{Stage: stage, Node: abi.Node{Name: "n", Labels: []abi.Label{{Key: abi.LabelTopologyZone, Value: "z"}}}}
	b.Ports = []abi.ServicePort{{Namespace: "ns", Name: "s", Protocol: abi.ProtocolTCP, Annotations: []abi.Label{{Key: "a", Value: "b"}},
		Endpoints: []abi.Endpoint{{Addr: netip.MustParseAddr("10.0.0.1"), Port: 80, Ready: true, ZoneHints: []string{"z"}, NodeHints: []string{"n"}}}}}
	if stage != abi.StageTopology {
		b.Decisions = []abi.Decision{{Eligible: abi.Indices{0}, Cluster: abi.Indices{0}, All: abi.Indices{0}}}
	}
	return b
}

// FuzzRun feeds arbitrary bytes to the guest's entry point. It must never
// panic; for input the host would accept, its output must be well formed.
func FuzzRun(f *testing.F) {
	var enc abi.Encoder
	for _, s := range abi.Stages {
		in, err := enc.Encode(nil, seedBatch(s))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(s), in)
	}
	f.Fuzz(func(t *testing.T, stage uint8, in []byte) {
		s := abi.Stage(stage%3 + 1)
		out := wasp.Run(s, in)
		b, err := abi.DecodeBatch(in)
		if err != nil || b.Stage != s {
			return
		}
		if out == nil {
			t.Fatalf("a well-formed %s batch got no output", s)
		}
		if _, err := abi.DecodeOutput(out, b, nil); err != nil {
			t.Fatalf("output of a well-formed batch is malformed: %v", err)
		}
	})
}
