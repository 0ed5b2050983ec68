package moduletest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
)

func run(t *testing.T, path string) ([]Result, string, error) {
	t.Helper()
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	results, err := Run(context.Background(), rt, s, s.Specs(nil))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	return results, out.String(), Report(&out, results)
}

// TestBuiltin: the builtin chain meets expectations written from
// upstream's semantics, null endpoint lists included.
func TestBuiltin(t *testing.T) {
	results, _, err := run(t, "testdata/builtin.yaml")
	if err != nil {
		t.Fatalf("%v: %+v", err, results)
	}
}

// TestModuleUnderTest runs a module from the scenario: a case that holds
// passes, a wrong one fails with every mismatch named.
func TestModuleUnderTest(t *testing.T) {
	wasm, err := modbuild.Build(context.Background(), "../proxy/testdata/modules/double")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"cluster.yaml", "double.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "double.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	results, _, err := run(t, filepath.Join(dir, "double.yaml"))
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("Report: %v, want ErrFailed", err)
	}
	if len(results) != 2 || !results[0].Passed() || results[1].Passed() {
		t.Fatalf("results %+v: want the first case passed, the second failed", results)
	}
	got := strings.Join(results[1].Mismatches, "\n")
	for _, want := range []string{
		`demo/web port "http" IPv4: weights map[10.244.1.10:8080:2 10.244.2.10:8080:2], want map[10.244.1.10:8080:1 10.244.2.10:8080:1]`,
		`demo/web port "http" IPv4: localEndpoints null, want []`,
		`demo/nope: no such service port in the output`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("mismatches:\n%s\nlack %q", got, want)
		}
	}
}

func TestReport(t *testing.T) {
	var out bytes.Buffer
	err := Report(&out, []Result{{Case: "a"}, {Case: "b", Mismatches: []string{"x: y"}}, {Case: "c", Err: errors.New("no file")}})
	want := "PASS a\nFAIL b\n    x: y\nFAIL c\n    no file\n1 passed, 2 failed\n"
	if !errors.Is(err, ErrFailed) || out.String() != want {
		t.Errorf("Report = %v,\n%q\nwant ErrFailed,\n%q", err, out.String(), want)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"unknown field", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\ncases: []\nextra: 1\n", "extra"},
		{"wrong kind", "apiVersion: v1\nkind: Pod\ncases: [{name: a, objects: c.yaml, node: n}]\n", "apiVersion/kind"},
		{"no cases", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\n", "cases: none"},
		{"case without node", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\ncases: [{name: a, objects: c.yaml}]\n", "cases[0].node: required"},
		{"bad stage", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\nmodules: [{stage: routing, source: m.wasm}]\ncases: [{name: a, objects: c.yaml, node: n}]\n", "modules[0].stage"},
		{"bad service", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\ncases: [{name: a, objects: c.yaml, node: n, expect: [{service: web}]}]\n", "expect[0].service"},
		{"module config not an object", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\nmodules: [{stage: topology, source: m.wasm, config: [1]}]\ncases: [{name: a, objects: c.yaml, node: n}]\n", "modules[0].config: [1], want an object"},
		{"case config of no stage", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\ncases: [{name: a, objects: c.yaml, node: n, config: {routing: {}}}]\n", `cases[0].config: "routing" is no stage`},
		{"case config not an object", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\ncases: [{name: a, objects: c.yaml, node: n, config: {topology: 1}}]\n", "cases[0].config.topology: 1, want an object"},
		{"rejected with objects", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\ncases: [{name: a, objects: c.yaml, config: {topology: {}}, rejected: no}]\n", "cases[0]: a case with rejected has no objects, node or expect"},
		{"rejected without config", "apiVersion: wasp.dev/v1alpha1\nkind: ModuleTest\ncases: [{name: a, rejected: no}]\n", "cases[0].config: required with rejected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "s.yaml")
			if err := os.WriteFile(p, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(p); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load: %v, want an error with %q", err, tt.want)
			}
		})
	}
}
