package abi_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
)

// TestOutputRejected lists every rule DecodeOutput enforces on a record.
// Each case writes one bad record for port 0 of the golden batch and checks
// that only that port fails, with a reason naming the problem.
func TestOutputRejected(t *testing.T) {
	tests := []struct {
		name  string
		stage abi.Stage
		write func(w *abi.OutputWriter)
		want  string
	}{
		{"topology index out of range", abi.StageTopology,
			func(w *abi.OutputWriter) { w.Topology(abi.TopologyNone, abi.Indices{0, 2}) }, "endpoint 2 out of range"},
		{"topology duplicate index", abi.StageTopology,
			func(w *abi.OutputWriter) { w.Topology(abi.TopologyNone, abi.Indices{1, 1}) }, "not strictly ascending"},
		{"topology unsorted", abi.StageTopology,
			func(w *abi.OutputWriter) { w.Topology(abi.TopologyNone, abi.Indices{1, 0}) }, "not strictly ascending"},
		{"topology nil eligible", abi.StageTopology,
			func(w *abi.OutputWriter) { w.Topology(abi.TopologyNone, nil) }, "eligible set is nil"},
		{"topology unknown mode", abi.StageTopology,
			func(w *abi.OutputWriter) { w.Topology(9, abi.Indices{}) }, "mode 9 unknown"},
		{"policy cluster out of range", abi.StageTrafficPolicy,
			func(w *abi.OutputWriter) { w.TrafficPolicy(true, abi.Indices{5}, nil, abi.Indices{}) }, "cluster set"},
		{"policy local duplicate", abi.StageTrafficPolicy,
			func(w *abi.OutputWriter) { w.TrafficPolicy(true, nil, abi.Indices{0, 0}, nil) }, "local set"},
		{"policy all out of range", abi.StageTrafficPolicy,
			func(w *abi.OutputWriter) { w.TrafficPolicy(true, nil, nil, abi.Indices{3}) }, "all set"},
		{"selection weight zero", abi.StageEndpointSelection,
			func(w *abi.OutputWriter) { w.Selection([]abi.Weight{{Index: 0, Weight: 0}}) }, "weight 0 out of range"},
		{"selection weight too large", abi.StageEndpointSelection,
			func(w *abi.OutputWriter) { w.Selection([]abi.Weight{{Index: 0, Weight: abi.MaxWeight + 1}}) }, "out of range"},
		{"selection endpoint out of range", abi.StageEndpointSelection,
			func(w *abi.OutputWriter) { w.Selection([]abi.Weight{{Index: 0, Weight: 1}, {Index: 9, Weight: 1}}) }, "endpoint 9 out of range"},
		{"selection endpoint not in a set", abi.StageEndpointSelection,
			func(w *abi.OutputWriter) { w.Selection([]abi.Weight{{Index: 0, Weight: 1}, {Index: 1, Weight: 1}}) }, "neither the cluster nor the local set"},
		{"selection duplicate", abi.StageEndpointSelection,
			func(w *abi.OutputWriter) { w.Selection([]abi.Weight{{Index: 0, Weight: 1}, {Index: 0, Weight: 2}}) }, "not strictly ascending"},
		{"selection empties the cluster set", abi.StageEndpointSelection,
			func(w *abi.OutputWriter) { w.Selection(nil) }, "no endpoint of the cluster set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := goldenBatch(tc.stage)
			var w abi.OutputWriter
			w.Reset(tc.stage)
			tc.write(&w)
			// Port 1 gets a valid record.
			switch tc.stage {
			case abi.StageTopology:
				w.Topology(abi.TopologyNone, abi.Indices{0})
			case abi.StageTrafficPolicy:
				w.TrafficPolicy(false, nil, abi.Indices{}, abi.Indices{})
			case abi.StageEndpointSelection:
				w.Selection(nil)
			}
			res, err := abi.DecodeOutput(w.Bytes(), b, nil)
			if err != nil {
				t.Fatalf("a bad record must fail its port, not the batch: %v", err)
			}
			if !res[0].Invalid || !strings.Contains(res[0].Err, tc.want) {
				t.Errorf("port 0: Invalid=%v Err=%q, want an invalid result containing %q", res[0].Invalid, res[0].Err, tc.want)
			}
			if res[1].Err != "" {
				t.Errorf("port 1 must be unaffected, got %q", res[1].Err)
			}
		})
	}
}

// TestOutputMalformed covers structural problems, which make the whole
// output unusable.
func TestOutputMalformed(t *testing.T) {
	b := goldenBatch(abi.StageTopology)
	good := goldenOutput(abi.StageTopology)
	mutate := func(f func(o []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		out  []byte
		want string
	}{
		{"empty", nil, "shorter than the header"},
		{"bad magic", mutate(func(o []byte) []byte { o[0] ^= 1; return o }), "magic"},
		{"bad version", mutate(func(o []byte) []byte { o[4] = 9; return o }), "version"},
		{"wrong stage", mutate(func(o []byte) []byte { o[6] = byte(abi.StageTrafficPolicy); return o }), "stage"},
		{"record count", mutate(func(o []byte) []byte { o[8] = 1; return o }), "1 records for 2 ports"},
		{"length mismatch", mutate(func(o []byte) []byte { return append(o, 0, 0, 0, 0) }), "header says"},
		{"truncated", mutate(func(o []byte) []byte { o = o[:len(o)-4]; o[12] = byte(len(o)); return o }), "overruns"},
		{"bad status", mutate(func(o []byte) []byte { o[16] = 7; return o }), "unknown status 7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := abi.DecodeOutput(tc.out, b, nil)
			if !errors.Is(err, abi.ErrMalformedOutput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrMalformedOutput containing %q", err, tc.want)
			}
		})
	}
}

func FuzzDecodeBatch(f *testing.F) {
	var enc abi.Encoder
	for _, s := range abi.Stages {
		in, _ := enc.Encode(nil, goldenBatch(s))
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		b, err := abi.DecodeBatch(in)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to a batch that decodes equally.
		again, err := enc.Encode(nil, b)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := abi.DecodeBatch(again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
	})
}

func FuzzDecodeOutput(f *testing.F) {
	for _, s := range abi.Stages {
		f.Add(uint8(s), goldenOutput(s))
	}
	f.Fuzz(func(t *testing.T, stage uint8, out []byte) {
		s := abi.Stages[int(stage)%len(abi.Stages)]
		b := goldenBatch(s)
		res, err := abi.DecodeOutput(out, b, nil)
		if err != nil {
			return
		}
		for i, r := range res {
			if r.Err != "" {
				continue
			}
			n := uint32(len(b.Ports[i].Endpoints))
			for _, set := range []abi.Indices{r.Eligible, r.Cluster, r.Local, r.All} {
				for _, v := range set {
					if v >= n {
						t.Fatalf("port %d: accepted index %d of %d endpoints", i, v, n)
					}
				}
			}
			for _, w := range r.Weights {
				if w.Index >= n || w.Weight == 0 || w.Weight > abi.MaxWeight {
					t.Fatalf("port %d: accepted weight %+v", i, w)
				}
			}
		}
	})
}

// BenchmarkEncode measures the host side of a full recompute: encoding 10k
// service ports of 10 endpoints.
func BenchmarkEncode(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	batch := &abi.Batch{Stage: abi.StageTopology, Node: goldenBatch(abi.StageTopology).Node}
	proto := goldenBatch(abi.StageTopology).Ports[0]
	for range 10000 {
		p := proto
		p.Endpoints = nil
		for range 10 {
			ep := proto.Endpoints[r.IntN(2)]
			p.Endpoints = append(p.Endpoints, ep)
		}
		batch.Ports = append(batch.Ports, p)
	}
	var enc abi.Encoder
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = enc.Encode(buf[:0], batch)
	}
	b.SetBytes(int64(len(buf)))
}
