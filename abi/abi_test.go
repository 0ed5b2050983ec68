package abi_test

import (
	"bytes"
	"encoding/hex"
	"flag"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// randomBatch builds a batch exercising every field of the layout.
func randomBatch(r *rand.Rand, stage abi.Stage) *abi.Batch {
	names := []string{"", "a", "zone-a", "zone-b", "node-1", "node-2", "ünïcode", strings.Repeat("x", 70)}
	pick := func() string { return names[r.IntN(len(names))] }
	labels := func(n int) []abi.Label {
		var out []abi.Label
		for i := range n {
			out = append(out, abi.Label{Key: "k" + string(rune('a'+i)), Value: pick()})
		}
		return out
	}
	b := &abi.Batch{Stage: stage, Node: abi.Node{Name: pick(), Labels: labels(r.IntN(4))}}
	for range r.IntN(6) {
		v6 := r.IntN(3) == 0
		p := abi.ServicePort{
			Namespace: pick(), Name: pick(), PortName: pick(),
			Protocol: abi.Protocol(1 + r.IntN(3)), IPv6: v6,
			Port: uint16(r.IntN(65536)), NodePort: uint16(r.IntN(65536)),
			InternalPolicyLocal: r.IntN(2) == 0, ExternalPolicyLocal: r.IntN(2) == 0,
			ExternallyAccessible: r.IntN(2) == 0,
			Annotations:          labels(r.IntN(3)),
		}
		for range r.IntN(5) {
			var a netip.Addr
			if v6 {
				var x [16]byte
				for i := range x {
					x[i] = byte(r.IntN(256))
				}
				a = netip.AddrFrom16(x)
			} else {
				a = netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
			}
			ep := abi.Endpoint{
				Addr: a, Port: uint16(r.IntN(65536)),
				Ready: r.IntN(2) == 0, Serving: r.IntN(2) == 0, Terminating: r.IntN(2) == 0, Local: r.IntN(2) == 0,
				NodeName: pick(), Zone: pick(),
			}
			for range r.IntN(3) {
				ep.ZoneHints = append(ep.ZoneHints, pick())
			}
			for range r.IntN(2) {
				ep.NodeHints = append(ep.NodeHints, pick())
			}
			p.Endpoints = append(p.Endpoints, ep)
		}
		b.Ports = append(b.Ports, p)
	}
	if stage != abi.StageTopology {
		for _, p := range b.Ports {
			b.Decisions = append(b.Decisions, randomDecision(r, len(p.Endpoints)))
		}
	}
	return b
}

// normalize makes a batch comparable with its decoded form: decoding always
// yields one decision per port.
func normalize(b *abi.Batch) *abi.Batch {
	c := *b
	if len(c.Decisions) == 0 {
		c.Decisions = make([]abi.Decision, len(c.Ports))
	}
	if c.Ports == nil {
		c.Ports = []abi.ServicePort{}
	}
	return &c
}

func TestBatchRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var enc abi.Encoder
	var buf []byte
	for i := range 2000 {
		stage := abi.Stages[i%3]
		b := randomBatch(r, stage)
		var err error
		buf, err = enc.Encode(buf[:0], b)
		if err != nil {
			t.Fatalf("case %d: encode: %v", i, err)
		}
		if len(buf)%4 != 0 {
			t.Fatalf("case %d: batch length %d is not a multiple of 4", i, len(buf))
		}
		got, err := abi.DecodeBatch(buf)
		if err != nil {
			t.Fatalf("case %d: decode: %v", i, err)
		}
		if want := normalize(b); !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: round trip mismatch\n got: %+v\nwant: %+v", i, got, want)
		}
	}
}

// TestRewriteDecisions: rewriting the stage and decisions of an encoded
// batch gives the bytes of encoding the batch with them, whatever the
// decisions were before (more indices, fewer, none).
func TestRewriteDecisions(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var enc abi.Encoder
	var buf, want []byte
	for i := range 2000 {
		b := randomBatch(r, abi.StageTopology)
		var err error
		if buf, err = enc.Encode(buf[:0], b); err != nil {
			t.Fatalf("case %d: encode: %v", i, err)
		}
		// Each later stage's decisions replace the previous ones, as in a
		// chain; the ports and node stay.
		for _, stage := range []abi.Stage{abi.StageTrafficPolicy, abi.StageEndpointSelection, abi.StageTopology} {
			next := *b
			next.Stage = stage
			if stage != abi.StageTopology {
				next.Decisions = make([]abi.Decision, 0, len(b.Ports))
				for _, p := range b.Ports {
					next.Decisions = append(next.Decisions, randomDecision(r, len(p.Endpoints)))
				}
			} else {
				next.Decisions = nil
			}
			if buf, err = abi.RewriteDecisions(buf, stage, next.Decisions); err != nil {
				t.Fatalf("case %d %s: rewrite: %v", i, stage, err)
			}
			if want, err = enc.Encode(want[:0], &next); err != nil {
				t.Fatalf("case %d %s: encode: %v", i, stage, err)
			}
			if !bytes.Equal(buf, want) {
				t.Fatalf("case %d %s: rewritten batch differs from its encoding\ngot  %x\nwant %x", i, stage, buf, want)
			}
		}
	}
}

// randomDecision is a decision over n endpoints.
func randomDecision(r *rand.Rand, n int) abi.Decision {
	set := func() abi.Indices {
		if r.IntN(4) == 0 {
			return nil
		}
		s := abi.Indices{}
		for i := range n {
			if r.IntN(2) == 0 {
				s = append(s, uint32(i))
			}
		}
		return s
	}
	return abi.Decision{
		Mode: abi.TopologyMode(r.IntN(3)), Eligible: set(), Cluster: set(), Local: set(), All: set(),
		HasAnyEndpoints: r.IntN(2) == 0,
	}
}

// TestEncodeFlags: EncodeFlags writes Encode's bytes and, after the flags
// given, the flags of every endpoint in table order.
func TestEncodeFlags(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var enc abi.Encoder
	for i := range 500 {
		b := randomBatch(r, abi.StageTopology)
		want, err := enc.Encode(nil, b)
		if err != nil {
			t.Fatalf("case %d: encode: %v", i, err)
		}
		got, flags, err := enc.EncodeFlags(nil, []byte{0xAA}, b)
		if err != nil {
			t.Fatalf("case %d: encode with flags: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: EncodeFlags wrote other bytes than Encode", i)
		}
		wantFlags := []byte{0xAA}
		for _, p := range b.Ports {
			for _, ep := range p.Endpoints {
				var f byte
				for bit, on := range map[byte]bool{abi.EndpointFlagReady: ep.Ready, abi.EndpointFlagServing: ep.Serving,
					abi.EndpointFlagTerminating: ep.Terminating, abi.EndpointFlagLocal: ep.Local} {
					if on {
						f |= bit
					}
				}
				wantFlags = append(wantFlags, f)
			}
		}
		if !bytes.Equal(flags, wantFlags) {
			t.Fatalf("case %d: flags %x, want %x", i, flags, wantFlags)
		}
	}
}

func TestRewriteDecisionsRejects(t *testing.T) {
	var enc abi.Encoder
	r := rand.New(rand.NewPCG(5, 6))
	b := randomBatch(r, abi.StageTopology)
	for len(b.Ports) == 0 {
		b = randomBatch(r, abi.StageTopology)
	}
	buf, err := enc.Encode(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		buf       []byte
		decisions []abi.Decision
		want      string
	}{
		{"short", buf[:abi.HeaderSize-1], nil, "not an encoded batch"},
		{"truncated", buf[:len(buf)-4], nil, "not an encoded batch"},
		{"output, not input", []byte(strings.Repeat("\x00", abi.HeaderSize)), nil, "not an encoded batch"},
		{"decision count", buf, make([]abi.Decision, len(b.Ports)+1), "decisions for a batch of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]byte(nil), tc.buf...)
			_, err := abi.RewriteDecisions(in, abi.StageTrafficPolicy, tc.decisions)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if !bytes.Equal(in, tc.buf) {
				t.Errorf("the rejected buffer was changed")
			}
		})
	}
}

func TestOutputRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var w abi.OutputWriter
	for i := range 2000 {
		stage := abi.Stages[i%3]
		b := randomBatch(r, stage)
		want := make([]abi.Result, len(b.Ports))
		w.Reset(stage)
		for j, p := range b.Ports {
			res := &want[j]
			if len(b.Decisions) != 0 {
				res.Decision = b.Decisions[j]
			}
			if r.IntN(5) == 0 {
				res.Err = "declined: " + p.Name
				w.Error(res.Err)
				continue
			}
			all := abi.Indices{}
			for k := range p.Endpoints {
				all = append(all, uint32(k))
			}
			switch stage {
			case abi.StageTopology:
				res.Mode, res.Eligible = abi.TopologyPreferSameZone, all
				w.Topology(res.Mode, res.Eligible)
			case abi.StageTrafficPolicy:
				res.Cluster, res.Local, res.All, res.HasAnyEndpoints = all, nil, all, len(all) > 0
				w.TrafficPolicy(res.HasAnyEndpoints, res.Cluster, res.Local, res.All)
			case abi.StageEndpointSelection:
				var ws []abi.Weight
				for _, k := range res.Cluster {
					ws = append(ws, abi.Weight{Index: k, Weight: k + 1})
				}
				for _, k := range res.Local {
					if !containsIdx(res.Cluster, k) {
						ws = append(ws, abi.Weight{Index: k, Weight: 7})
					}
				}
				sortWeights(ws)
				res.Weights = ws
				w.Selection(ws)
			}
		}
		got, err := abi.DecodeOutput(w.Bytes(), b, nil)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		for j := range got {
			if got[j].Invalid {
				t.Fatalf("case %d port %d: valid output rejected: %s", i, j, got[j].Err)
			}
			if len(got[j].Weights) == 0 {
				got[j].Weights = want[j].Weights
			}
		}
		if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("case %d: mismatch\n got: %+v\nwant: %+v", i, got, want)
		}
	}
}

func containsIdx(s abi.Indices, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func sortWeights(w []abi.Weight) {
	for i := 1; i < len(w); i++ {
		for j := i; j > 0 && w[j].Index < w[j-1].Index; j-- {
			w[j], w[j-1] = w[j-1], w[j]
		}
	}
}

// goldenBatch is the batch behind testdata/*.hex: small, but covering IPv4
// and IPv6, hints, annotations, labels, nil and empty sets.
func goldenBatch(stage abi.Stage) *abi.Batch {
	b := &abi.Batch{
		Stage: stage,
		Node: abi.Node{Name: "node-a", Labels: []abi.Label{
			{Key: abi.LabelTopologyRegion, Value: "region-1"},
			{Key: abi.LabelTopologyZone, Value: "zone-a"},
		}},
		Ports: []abi.ServicePort{{
			Namespace: "default", Name: "web", PortName: "http", Protocol: abi.ProtocolTCP,
			Port: 80, NodePort: 30080, ExternalPolicyLocal: true, ExternallyAccessible: true,
			Annotations: []abi.Label{{Key: "example.com/drain-zone", Value: "zone-b"}},
			Endpoints: []abi.Endpoint{
				{Addr: netip.MustParseAddr("10.244.1.10"), Port: 8080, Ready: true, Serving: true, Local: true,
					NodeName: "node-a", Zone: "zone-a", ZoneHints: []string{"zone-a"}},
				{Addr: netip.MustParseAddr("10.244.2.10"), Port: 8080, Serving: true, Terminating: true,
					NodeName: "node-b", Zone: "zone-b", ZoneHints: []string{"zone-b"}, NodeHints: []string{"node-b"}},
			},
		}, {
			Namespace: "default", Name: "dns", PortName: "dns", Protocol: abi.ProtocolUDP, IPv6: true,
			Port: 53, InternalPolicyLocal: true,
			Endpoints: []abi.Endpoint{
				{Addr: netip.MustParseAddr("fd00::1"), Port: 53, Ready: true, Serving: true, NodeName: "node-b"},
			},
		}},
	}
	switch stage {
	case abi.StageTrafficPolicy:
		b.Decisions = []abi.Decision{
			{Mode: abi.TopologyPreferSameZone, Eligible: abi.Indices{0}},
			{Eligible: abi.Indices{0}},
		}
	case abi.StageEndpointSelection:
		b.Decisions = []abi.Decision{
			{Mode: abi.TopologyPreferSameZone, Eligible: abi.Indices{0}, Cluster: abi.Indices{0}, Local: abi.Indices{0}, All: abi.Indices{0}, HasAnyEndpoints: true},
			{Eligible: abi.Indices{0}, Local: abi.Indices{}, All: abi.Indices{}, HasAnyEndpoints: true},
		}
	}
	return b
}

func goldenOutput(stage abi.Stage) []byte {
	var w abi.OutputWriter
	w.Reset(stage)
	switch stage {
	case abi.StageTopology:
		w.Topology(abi.TopologyPreferSameZone, abi.Indices{0})
		w.Topology(abi.TopologyNone, abi.Indices{0})
	case abi.StageTrafficPolicy:
		w.TrafficPolicy(true, abi.Indices{0}, abi.Indices{0}, abi.Indices{0})
		w.TrafficPolicy(true, nil, abi.Indices{}, abi.Indices{})
	case abi.StageEndpointSelection:
		w.Selection([]abi.Weight{{Index: 0, Weight: 1}})
		w.Error("no local endpoint")
	}
	return w.Bytes()
}

// TestGolden pins the byte layout. The same files are read by the Rust SDK's
// tests, so a change here is an ABI change: regenerate with -update only
// when the specification changes, and say so in docs/abi.md.
func TestGolden(t *testing.T) {
	for _, stage := range abi.Stages {
		t.Run(stage.String(), func(t *testing.T) {
			var enc abi.Encoder
			in, err := enc.Encode(nil, goldenBatch(stage))
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", stage.String()+".input.hex"), in)
			out := goldenOutput(stage)
			checkGolden(t, filepath.Join("testdata", stage.String()+".output.hex"), out)
			if _, err := abi.DecodeOutput(out, goldenBatch(stage), nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	text := hexDump(got)
	if *update {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./abi -update to create it)", err)
	}
	if !bytes.Equal(want, []byte(text)) {
		t.Errorf("%s differs from the encoding:\n got:\n%s\nwant:\n%s", path, text, want)
	}
}

// hexDump writes 16 bytes per line as plain hex, easy to read from any
// language.
func hexDump(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b); i += 16 {
		sb.WriteString(hex.EncodeToString(b[i:min(i+16, len(b))]))
		sb.WriteByte('\n')
	}
	return sb.String()
}
