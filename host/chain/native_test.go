package chain_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/modules"
)

// TestNativeBuiltins: with Loader.NativeBuiltins a stage left to its
// builtin module, or given it by name without a configuration, runs
// natively, and reports the digest and metadata the module's load would;
// a stage given another module, or the builtin with a configuration (which
// the builtin refuses, as before), loads it as Wasm.
func TestNativeBuiltins(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	l := chain.Loader{Runtime: rt, NativeBuiltins: true}
	wasmChain, err := chain.Load(ctx, rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wasmChain.Close()

	tests := []struct {
		name   string
		specs  []chain.Spec
		native []abi.Stage
	}{
		{"defaults", nil, abi.Stages[:]},
		{"builtin named", []chain.Spec{{Stage: abi.StageTopology, Source: "builtin:topology", Config: []byte(" {} ")}}, abi.Stages[:]},
		{"another module", []chain.Spec{{Stage: abi.StageTopology, Source: "builtin:selection"}}, nil},
		{"a module for one stage", []chain.Spec{{Stage: abi.StageEndpointSelection, Source: "file://" + writeModule(t, "selection")}}, []abi.Stage{abi.StageTopology, abi.StageTrafficPolicy}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := l.Load(ctx, tc.specs)
			if tc.native == nil {
				// builtin:selection does not implement topology.
				if !errors.Is(err, runtime.ErrInvalidModule) {
					t.Fatalf("got %v, want ErrInvalidModule", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, s := range abi.Stages {
				native := false
				for _, n := range tc.native {
					native = native || n == s
				}
				if c.Native(s) != native || (c.Modules[s] == nil) != native {
					t.Errorf("stage %s: Native %v, module %v; want native %v", s, c.Native(s), c.Modules[s], native)
				}
				if got, want := c.Digest(s), wasmChain.Digest(s); got != want {
					t.Errorf("stage %s: digest %s, want the Wasm module's %s", s, got, want)
				}
				if got, want := c.Metadata(s), wasmChain.Metadata(s); !reflect.DeepEqual(got, want) {
					t.Errorf("stage %s: metadata %+v, want the Wasm module's %+v", s, got, want)
				}
				if native && (c.Name(s) != modules.Default(s).Source() || c.Config(s) != nil) {
					t.Errorf("stage %s: name %q, config %q", s, c.Name(s), c.Config(s))
				}
			}
			if mods := c.PipelineModules(); (mods[abi.StageTopology] == nil) != c.Native(abi.StageTopology) {
				t.Errorf("PipelineModules: topology %v", mods[abi.StageTopology])
			}
		})
	}
	// The builtin modules take no configuration: one given to them is
	// refused, natively or not.
	_, err = l.Load(ctx, []chain.Spec{{Stage: abi.StageTopology, Source: "builtin:topology", Config: []byte(`{"a":1}`)}})
	if !errors.Is(err, runtime.ErrConfigRejected) {
		t.Errorf("builtin with a configuration: got %v, want ErrConfigRejected", err)
	}
}

// writeModule writes the embedded builtin module name to a file of its
// own, and returns its path.
func writeModule(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".wasm")
	if err := writeBuiltin(path, name); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeBuiltin writes the embedded builtin module name to path.
func writeBuiltin(path, name string) error {
	wasm, err := modules.Wasm(name)
	if err != nil {
		return err
	}
	return os.WriteFile(path, wasm, 0o644)
}
