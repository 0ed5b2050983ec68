package reload

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/pipeline"
)

// TestReloaderNativeBuiltins: with NativeBuiltins, the stages left to
// their builtin module stay native across a swap of another stage's
// module, and a chain of the same modules is recognised as unchanged.
func TestReloaderNativeBuiltins(t *testing.T) {
	ctx := context.Background()
	double, rt := doubleAndRuntime(t)
	path := filepath.Join(t.TempDir(), "selection.wasm")
	replaceFile(t, path, builtinWasm(t, "selection"))
	specs := []chain.Spec{{Stage: abi.StageEndpointSelection, Source: path}}
	first, err := chain.Loader{Runtime: rt, NativeBuiltins: true}.Load(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	r := New(rt, specs, first)
	r.NativeBuiltins = true
	defer r.Close()
	var swapped [][len(abi.Stages) + 1]pipeline.Module
	r.Swap = func(mods [len(abi.Stages) + 1]pipeline.Module, _ [len(abi.Stages) + 1]pipeline.FailurePolicy, done func(bool)) {
		swapped = append(swapped, mods)
		done(true)
	}

	// Loading the same modules again is no change.
	if _, ok, err := r.apply(ctx, specs, "test"); err != nil || ok {
		t.Fatalf("the same chain again: swapped %v, %v; want unchanged", ok, err)
	}
	replaceFile(t, path, double)
	r.check(ctx)
	if len(swapped) != 1 {
		t.Fatalf("%d swaps after the module file changed, want 1", len(swapped))
	}
	for _, s := range abi.Stages {
		native := s != abi.StageEndpointSelection
		if (swapped[0][s] == nil) != native || r.current.Native(s) != native {
			t.Errorf("stage %s: swapped in %v (native %v), want native %v", s, swapped[0][s], r.current.Native(s), native)
		}
	}
	if got, want := r.current.Digest(abi.StageTopology), first.Digest(abi.StageTopology); got != want || got == "" {
		t.Errorf("topology digest %q after the swap, want %q", got, want)
	}
}
