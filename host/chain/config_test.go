package chain_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
)

// TestLoadConfig: a spec's Config reaches its module, and only its own.
func TestLoadConfig(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("building the test module needs the go command:", err)
	}
	path := modbuild.File(t, "../runtime/testdata/modules/configured")
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	tests := []struct {
		name  string
		specs []chain.Spec
		want  string // in the error; "" loads
	}{
		{"accepted", []chain.Spec{{Stage: abi.StageTopology, Source: path, Config: []byte(`{"eligible": 1}`)}}, ""},
		{"rejected", []chain.Spec{{Stage: abi.StageTopology, Source: path, Config: []byte(`{"reject": "eligible: must be at least 1"}`)}},
			`stage topology: module "` + path + `" rejected its configuration: eligible: must be at least 1`},
		{"builtin takes none", []chain.Spec{{Stage: abi.StageEndpointSelection, Source: "builtin:selection", Config: []byte(`{"weights": 2}`)}},
			`module "builtin:selection" rejected its configuration: this module takes no configuration`},
		{"builtin, empty object", []chain.Spec{{Stage: abi.StageEndpointSelection, Source: "builtin:selection", Config: []byte(`{}`)}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := chain.Load(context.Background(), rt, tc.specs)
			if tc.want != "" {
				if !errors.Is(err, runtime.ErrConfigRejected) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want ErrConfigRejected containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s := tc.specs[0]
			if got := c.Modules[s.Stage].Config; string(got) != string(s.Config) {
				t.Errorf("stage %s runs with configuration %q, want %q", s.Stage, got, s.Config)
			}
			for _, other := range abi.Stages {
				if other != s.Stage && c.Modules[other].Config != nil {
					t.Errorf("stage %s got configuration %q", other, c.Modules[other].Config)
				}
			}
		})
	}
}
