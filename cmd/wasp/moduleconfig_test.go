package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
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

// TestGuardrailFlags: --guardrails relaxes the named guardrails of one
// --module, which must be a traffic-policy module.
func TestGuardrailFlags(t *testing.T) {
	pol, sel := "traffic-policy=a.wasm", "endpoint-selection=b.wasm"
	tests := []struct {
		name           string
		modules, flags []string
		want           pipeline.Guardrails
		err            string
	}{
		{name: "the only module", modules: []string{pol}, flags: []string{"allowNotServing"}, want: pipeline.Guardrails{AllowNotServing: true}},
		{name: "by stage, both", modules: []string{sel, pol}, flags: []string{"traffic-policy=allowRemoteInLocal,allowNotServing"},
			want: pipeline.Guardrails{AllowNotServing: true, AllowRemoteInLocal: true}},
		{name: "repeated", modules: []string{pol}, flags: []string{"allowNotServing", "allowRemoteInLocal"},
			want: pipeline.Guardrails{AllowNotServing: true, AllowRemoteInLocal: true}},
		{name: "none", modules: []string{pol}},
		{name: "unknown guardrail", modules: []string{pol}, flags: []string{"allowEverything"}, err: `unknown guardrail "allowEverything"`},
		{name: "another stage", modules: []string{sel}, flags: []string{"allowNotServing"}, err: "only a traffic-policy module"},
		{name: "no module of the stage", modules: []string{sel}, flags: []string{"traffic-policy=allowNotServing"}, err: "no --module for stage traffic-policy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			specs, err := moduleFlagSpecs(tc.modules, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = applyGuardrailFlags(specs, tc.flags)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range specs {
				want := pipeline.Guardrails{}
				if s.Stage == abi.StageTrafficPolicy {
					want = tc.want
				}
				if s.Guardrails != want {
					t.Errorf("stage %s: guardrails %+v, want %+v", s.Stage, s.Guardrails, want)
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
