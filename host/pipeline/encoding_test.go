package pipeline_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
	"github.com/wasp-proxy/wasp/modules/builds"
)

// canonical is the fake module, checking that every input it gets is the
// bytes abi.Encoder writes for the batch it decodes to: the stages after
// the first rewrite only the decisions of the encoding before, and must
// leave nothing of it behind.
type canonical struct {
	*fake
	mu  sync.Mutex
	bad []string
}

func (c *canonical) Call(ctx context.Context, stage abi.Stage, input, dst []byte) ([]byte, error) {
	if b, err := abi.DecodeBatch(input); err == nil {
		var enc abi.Encoder
		want, err := enc.Encode(nil, b)
		if err != nil || !bytes.Equal(input, want) {
			c.mu.Lock()
			c.bad = append(c.bad, stage.String())
			c.mu.Unlock()
		}
	}
	return c.fake.Call(ctx, stage, input, dst)
}

// TestStagesShareEncoding runs three stages over batches split in chunks,
// with and without ports that fail a stage (the next stage's chunks are
// then not the ports of the one before), and Runs of other ports of the
// same count in between: every stage must see the encoding of its own
// batch and decide as the reference does.
func TestStagesShareEncoding(t *testing.T) {
	c := &canonical{fake: &fake{instances: 3}}
	var opts pipeline.Options
	for _, st := range abi.Stages {
		opts.Modules[st] = c
	}
	opts.MinChunk = 8
	p := pipeline.New(opts)
	ctx := context.Background()
	for round, failing := range [][]int{nil, {5, 6, 40}, nil, {0, 59}, nil} {
		node, sps := referencetest.Batch(uint64(10+round), 60, 4)
		for _, i := range failing {
			sps[i].Annotations = append(slices.Clone(sps[i].Annotations), abi.Label{Key: "wasp.test/behaviour", Value: "error"})
			slices.SortFunc(sps[i].Annotations, func(a, b abi.Label) int { return strings.Compare(a.Key, b.Key) })
		}
		res := p.Run(ctx, node, ports(sps))
		var good []abi.ServicePort
		var goodRes []pipeline.Result
		for i := range sps {
			if slices.Contains(failing, i) {
				if res[i].Source == pipeline.SourceModules {
					t.Errorf("round %d port %d: source %s, want a fallback", round, i, res[i].Source)
				}
				continue
			}
			good, goodRes = append(good, sps[i]), append(goodRes, res[i])
		}
		checkAgainstReference(t, builds.Build("fake"), node, good, goodRes)
	}
	if len(c.take()) == 0 {
		t.Fatal("no module call made")
	}
	if len(c.bad) > 0 {
		t.Errorf("%d inputs were not their batch's encoding, stages %v", len(c.bad), c.bad)
	}
}

// TestMaxChunk: a batch larger than MaxChunk ports is split into more
// calls than the module has instances, none carrying more than MaxChunk
// ports, every port in exactly one call per stage; one no larger than
// MinChunk is one call.
func TestMaxChunk(t *testing.T) {
	for _, tt := range []struct {
		ports, instances, wantCalls int
	}{
		{ports: 60, instances: 3, wantCalls: 4},  // ceil(60/16), beyond the 3 instances
		{ports: 60, instances: 1, wantCalls: 4},  // one instance takes them in turn
		{ports: 40, instances: 3, wantCalls: 3},  // min(3, 40/8) instances, 14 ports each
		{ports: 16, instances: 3, wantCalls: 2},  // min(3, 16/8)
		{ports: 7, instances: 3, wantCalls: 1},   // below MinChunk
		{ports: 100, instances: 8, wantCalls: 8}, // the instances bound it first
	} {
		c := &canonical{fake: &fake{instances: tt.instances}}
		var opts pipeline.Options
		for _, st := range abi.Stages {
			opts.Modules[st] = c
		}
		opts.MinChunk, opts.MaxChunk = 8, 16
		node, sps := referencetest.Batch(3, tt.ports, 4)
		checkAgainstReference(t, builds.Build("fake"), node, sps, pipeline.New(opts).Run(context.Background(), node, ports(sps)))
		calls := c.take()
		if len(calls) != tt.wantCalls*len(abi.Stages) {
			t.Errorf("%d ports, %d instances: %d calls, want %d per stage", tt.ports, tt.instances, len(calls), tt.wantCalls)
		}
		seen := map[string]int{}
		for _, call := range calls {
			if len(call) > 16 {
				t.Errorf("%d ports, %d instances: a call of %d ports, more than MaxChunk", tt.ports, tt.instances, len(call))
			}
			for _, name := range call {
				seen[name]++
			}
		}
		for _, sp := range sps {
			if seen[sp.Name] != len(abi.Stages) {
				t.Errorf("%d ports: port %s in %d calls, want one per stage", tt.ports, sp.Name, seen[sp.Name])
			}
		}
		if len(c.bad) > 0 {
			t.Errorf("%d ports: %d inputs were not their batch's encoding", tt.ports, len(c.bad))
		}
	}
}
