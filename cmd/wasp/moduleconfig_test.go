package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
)

func TestModuleFlagSpecs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yml := write("drain.yaml", "zones: [zone-b]\n")
	list := write("list.yaml", "- zone-b\n")
	sel, topo := "endpoint-selection=a.wasm", "topology=b.wasm"
	tests := []struct {
		name             string
		modules, configs []string
		stage            abi.Stage // whose config is checked
		want             string    // its JSON, or the error
	}{
		{"the only module", []string{sel}, []string{yml}, abi.StageEndpointSelection, `{"zones":["zone-b"]}`},
		{"by stage", []string{topo, sel}, []string{"endpoint-selection=" + yml}, abi.StageEndpointSelection, `{"zones":["zone-b"]}`},
		{"other stage untouched", []string{topo, sel}, []string{"endpoint-selection=" + yml}, abi.StageTopology, ``},
		{"no stage, two modules", []string{topo, sel}, []string{yml}, 0, "want STAGE=FILE with 2 --module entries"},
		{"no module of the stage", []string{sel}, []string{"topology=" + yml}, 0, "no --module for stage topology"},
		{"unknown stage", []string{sel}, []string{"routing=" + yml}, 0, `unknown stage "routing"`},
		{"not an object", []string{sel}, []string{list}, 0, "want an object"},
		{"no file", []string{sel}, []string{filepath.Join(dir, "absent.yaml")}, 0, "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			specs, err := moduleFlagSpecs(tc.modules, tc.configs)
			if tc.stage == 0 {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range specs {
				if s.Stage == tc.stage && string(s.Config) != tc.want {
					t.Errorf("stage %s: config %s, want %s", s.Stage, s.Config, tc.want)
				}
			}
		})
	}
}

// TestModuleTestConfig runs zone-drain's scenario with --config: a
// configuration it accepts passes, one it rejects fails the command with
// the module's message.
func TestModuleTestConfig(t *testing.T) {
	wasm, err := modbuild.Build(context.Background(), "../../examples/zone-drain")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	module := filepath.Join(dir, "zone-drain.wasm")
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	for p, b := range map[string][]byte{module: wasm, good: []byte("annotation: wasp.dev/drain-zones\n"), bad: []byte("zones: [zone-b, \"\"]\n")} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	scenario := "../../examples/zone-drain/testdata/scenario.yaml"
	out, err := execute(t, newFakeEnv().env(), nil, "module", "test", "--cache-dir", "", "--module", "endpoint-selection="+module, "--config", good, scenario)
	if err != nil || !strings.Contains(out, " 0 failed") {
		t.Fatalf("accepted configuration: %v\n%s", err, out)
	}
	out, err = execute(t, newFakeEnv().env(), nil, "module", "test", "--cache-dir", "", "--module", "endpoint-selection="+module, "--config", bad, scenario)
	if !errors.Is(err, runtime.ErrConfigRejected) || !strings.Contains(err.Error(), "rejected its configuration: zones[1]: empty zone name") {
		t.Fatalf("rejected configuration: %v, want the rejection\n%s", err, out)
	}
}
