package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
	"github.com/wasp-proxy/wasp/modules"
)

// TestModuleReloader replaces the file of an endpoint-selection module
// under a reloader: a broken file leaves the running chain alone, a good
// one is swapped in, and the chain it replaced is closed once the swap is
// applied.
func TestModuleReloader(t *testing.T) {
	ctx := context.Background()
	double, err := modbuild.Build(ctx, "../../host/proxy/testdata/modules/double")
	if err != nil {
		t.Fatal(err)
	}
	selection, err := modules.Wasm("selection")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)

	path := filepath.Join(t.TempDir(), "selection.wasm")
	// write replaces the file as a ConfigMap update does: a new file
	// renamed over the old one.
	write := func(b []byte) {
		t.Helper()
		tmp := path + ".new"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(selection)
	specs := []chain.Spec{{Stage: abi.StageEndpointSelection, Source: path}}
	first, err := chain.Load(ctx, rt, specs)
	if err != nil {
		t.Fatal(err)
	}
	r := newModuleReloader(rt, specs, first)
	defer r.close()
	var swapped [][len(abi.Stages) + 1]pipeline.Module
	r.swap = func(mods [len(abi.Stages) + 1]pipeline.Module, done func(bool)) {
		swapped = append(swapped, mods)
		done(true)
	}

	var counted []string
	r.reloaded = func(trigger, result string) { counted = append(counted, trigger+"/"+result) }
	r.check(ctx) // nothing changed
	write([]byte("\x00asm garbage"))
	r.check(ctx)
	if len(swapped) != 0 || r.current != first {
		t.Fatalf("unchanged or broken files swapped %d times; want the first chain to stay", len(swapped))
	}
	r.check(ctx) // the same broken file is not tried again
	write(double)
	r.check(ctx)
	if len(swapped) != 1 {
		t.Fatalf("%d swaps after a good module replaced the file; want 1", len(swapped))
	}
	if want := []string{"files/failed", "files/swapped"}; !slices.Equal(counted, want) {
		t.Errorf("loads counted %v, want %v", counted, want)
	}
	got := swapped[0][abi.StageEndpointSelection].(*runtime.Module)
	if got.Digest != runtime.Digest(double) || r.current.Modules[abi.StageEndpointSelection] != got {
		t.Errorf("swapped in %s; want the new file's module %s as the current chain", got.Digest, runtime.Digest(double))
	}
	// The replaced chain was closed: its module refuses calls.
	if _, err := first.Modules[abi.StageEndpointSelection].Call(ctx, abi.StageEndpointSelection, nil, nil); err == nil || !strings.Contains(err.Error(), "module closed") {
		t.Errorf("a call into the replaced chain's module: %v; want it closed", err)
	}
}
