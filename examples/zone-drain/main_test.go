//go:build !wasip1

// The test runs on the host: it loads the module in wasp's runtime.

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/moduletest"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
	"github.com/wasp-proxy/wasp/sdk/go/wasp/wasptest"
)

// TestConfigure checks the module's validation of its configuration,
// natively.
func TestConfigure(t *testing.T) {
	defer func() { _ = wasptest.Configure(nil) }()
	tests := []struct {
		config string
		want   string // in the rejection; "" accepted
	}{
		{"", ""},
		{`{}`, ""},
		{`{"annotation": "example.com/maintenance", "zones": ["zone-b", "zone-c"]}`, ""},
		{`{"annotation": "maintenance"}`, ""},
		{`{"zones": ["zone-b", ""]}`, "zones[1]: empty zone name"},
		{`{"zones": ["zone-b", "zone-b"]}`, `zones[1]: "zone-b" is listed twice`},
		{`{"zones": "zone-b"}`, "cannot unmarshal string"},
		{`{"zone": ["zone-b"]}`, `unknown field "zone"`},
		{`{"annotation": ""}`, "the name must have 1 to 63 characters"},
		{`{"annotation": "Example.com/x"}`, "the prefix must be a lower-case DNS subdomain"},
		{`{"annotation": "example.com/-x"}`, `may not have '-' there`},
		{`{"annotation": "example.com/a b"}`, `may not have ' ' there`},
	}
	for _, tc := range tests {
		err := wasptest.Configure([]byte(tc.config))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.config, err, tc.want)
		}
	}
}

// TestScenario builds the module to Wasm and runs testdata/scenario.yaml
// through it, as `wasp module test` does in a module's CI.
func TestScenario(t *testing.T) {
	ctx := context.Background()
	path := modbuild.File(t, ".")
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
