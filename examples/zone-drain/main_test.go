package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/moduletest"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
)

// TestScenario builds the module to Wasm and runs testdata/scenario.yaml
// through it, as `wasp module test` does in a module's CI.
func TestScenario(t *testing.T) {
	ctx := context.Background()
	wasm, err := modbuild.Build(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "zone-drain.wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	s, err := moduletest.Load("testdata/scenario.yaml")
	if err != nil {
		t.Fatal(err)
	}
	results, err := moduletest.Run(ctx, rt, s, s.Specs([]chain.Spec{{Stage: abi.StageEndpointSelection, Source: path}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if !r.Passed() {
			t.Errorf("%s: %v %v", r.Case, r.Err, r.Mismatches)
		}
	}
	// Without the module the scenario must fail: it tests the module, not
	// upstream's semantics.
	results, err = moduletest.Run(ctx, rt, s, s.Specs(nil))
	if err != nil {
		t.Fatal(err)
	}
	if results[0].Passed() {
		t.Error("the builtin chain passes the drain case: the scenario does not test the module")
	}
}
