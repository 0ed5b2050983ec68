package chain_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/reference"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// TestWorkers: with Loader.Workers a module that does not run natively
// runs in a worker process and tells what an in-process load would; a
// module that does not implement its stage or rejects its configuration
// is refused as in-process; the pipeline runs the chain.
func TestWorkers(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	cfg := runtime.Config{CacheDir: t.TempDir()}
	l := chain.Loader{Runtime: rt, NativeBuiltins: true, Workers: &cfg}
	spec := chain.Spec{Stage: abi.StageEndpointSelection, Source: "file://" + writeModule(t, "selection"), Limits: runtime.Limits{Instances: 1}}
	wasmChain, err := chain.Load(ctx, rt, []chain.Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	defer wasmChain.Close()
	c, err := l.Load(ctx, []chain.Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, s := range abi.Stages {
		inWorker := s == abi.StageEndpointSelection
		if c.InWorker(s) != inWorker || c.Native(s) == inWorker || c.Modules[s] != nil {
			t.Errorf("stage %s: in a worker %v, native %v, in process %v; want in a worker %v", s, c.InWorker(s), c.Native(s), c.Modules[s], inWorker)
		}
		if c.Digest(s) != wasmChain.Digest(s) || !reflect.DeepEqual(c.Metadata(s), wasmChain.Metadata(s)) || c.Name(s) != wasmChain.Name(s) {
			t.Errorf("stage %s: %s %s %+v, want %s %s %+v", s, c.Name(s), c.Digest(s), c.Metadata(s), wasmChain.Name(s), wasmChain.Digest(s), wasmChain.Metadata(s))
		}
	}

	node, sps := referencetest.Batch(5, 200, 8)
	ps := make([]pipeline.Port, len(sps))
	for i, sp := range sps {
		ps[i] = pipeline.Port{Key: sp.Name + sp.PortName, ServicePort: sp}
	}
	p := pipeline.New(pipeline.Options{Modules: c.PipelineModules(), Policies: c.Policies})
	for i, r := range p.Run(ctx, node, ps) {
		if want := reference.Categorize(&node, &sps[i]); r.Source != pipeline.SourceModules || !reflect.DeepEqual(r.Decision, want) {
			t.Fatalf("port %d: %s %v: %+v, want %+v", i, r.Source, r.Err, r.Decision, want)
		}
	}

	for _, tc := range []struct {
		name  string
		spec  chain.Spec
		class error
	}{
		{"wrong stage", chain.Spec{Stage: abi.StageTopology, Source: spec.Source}, runtime.ErrInvalidModule},
		{"configuration", chain.Spec{Stage: abi.StageEndpointSelection, Source: spec.Source, Config: []byte(`{"a": 1}`)}, runtime.ErrConfigRejected},
	} {
		if _, err := l.Load(ctx, []chain.Spec{tc.spec}); !errors.Is(err, tc.class) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.class)
		}
	}
}
