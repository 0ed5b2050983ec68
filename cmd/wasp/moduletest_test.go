package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/host/moduletest"
	"github.com/wasp-proxy/wasp/internal/modbuild"
)

// TestModuleTestCommand runs a scenario through the command: a passing
// file exits 0 with the summary line, a module that breaks it exits
// non-zero naming the mismatch.
func TestModuleTestCommand(t *testing.T) {
	out, err := execute(t, newFakeEnv().env(), nil, "module", "test", "--cache-dir", "", "../../host/moduletest/testdata/builtin.yaml")
	if err != nil || !strings.Contains(out, "1 passed, 0 failed") {
		t.Fatalf("builtin scenario: %v\n%s", err, out)
	}
	wasm, err := modbuild.Build(context.Background(), "../../host/proxy/testdata/modules/double")
	if err != nil {
		t.Fatal(err)
	}
	double := filepath.Join(t.TempDir(), "double.wasm")
	if err := os.WriteFile(double, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = execute(t, newFakeEnv().env(), nil, "module", "test", "--cache-dir", "",
		"--module", "endpoint-selection="+double, "../../host/moduletest/testdata/builtin.yaml")
	if !errors.Is(err, moduletest.ErrFailed) || !strings.Contains(out, "weights map[10.244.1.10:8080:2 10.244.2.10:8080:2]") || !strings.Contains(out, "0 passed, 1 failed") {
		t.Fatalf("a module that breaks the scenario: %v, want ErrFailed naming the weights\n%s", err, out)
	}
	out, err = execute(t, newFakeEnv().env(), nil, "module", "test", "--cache-dir", "", "nope.yaml")
	if err == nil || errors.Is(err, moduletest.ErrFailed) {
		t.Fatalf("a missing scenario: %v, want a load error\n%s", err, out)
	}
}

// TestModuleBenchCommand times a module against the builtin chain over a
// small batch and reports both and their ratio; bad sizes are refused.
func TestModuleBenchCommand(t *testing.T) {
	out, err := execute(t, newFakeEnv().env(), nil, "module", "bench", "--cache-dir", "",
		"--module", "endpoint-selection=builtin:selection", "--ports", "50", "--runs", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"50 service ports x 10 endpoints, median of 2 full recomputes", "modules ", "builtin ", "ratio modules/builtin: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := execute(t, newFakeEnv().env(), nil, "module", "bench", "--ports", "0"); err == nil {
		t.Error("--ports 0: no error")
	}
}
