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
