package reload

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/catalog"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
	"github.com/wasp-proxy/wasp/modules"
)

// doubleAndRuntime returns the double test module (it doubles the
// weights) and a runtime of the test's.
func doubleAndRuntime(t *testing.T) ([]byte, *runtime.Runtime) {
	t.Helper()
	double, err := modbuild.Build(context.Background(), "../proxy/testdata/modules/double")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return double, rt
}

// replaceFile replaces the file at path as a ConfigMap update does: a new
// file renamed over the old one.
func replaceFile(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// builtinWasm returns the embedded builtin module name.
func builtinWasm(t *testing.T, name string) []byte {
	t.Helper()
	b, err := modules.Wasm(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestModuleReloader replaces the file of an endpoint-selection module
// under a reloader: a broken file leaves the running chain alone, a good
// one is swapped in, and the chain it replaced is closed once the swap is
// applied.
func TestModuleReloader(t *testing.T) {
	ctx := context.Background()
	double, rt := doubleAndRuntime(t)
	path := filepath.Join(t.TempDir(), "selection.wasm")
	write := func(b []byte) { t.Helper(); replaceFile(t, path, b) }
	write(builtinWasm(t, "selection"))
	specs := []chain.Spec{{Stage: abi.StageEndpointSelection, Source: path}}
	first, err := chain.Load(ctx, rt, specs)
	if err != nil {
		t.Fatal(err)
	}
	r := New(rt, specs, first)
	defer r.Close()
	var swapped [][len(abi.Stages) + 1]pipeline.Module
	r.Swap = func(mods [len(abi.Stages) + 1]pipeline.Module, _ [len(abi.Stages) + 1]pipeline.FailurePolicy, done func(bool)) {
		swapped = append(swapped, mods)
		done(true)
	}

	var counted []string
	r.Reloaded = func(trigger, result string) { counted = append(counted, trigger+"/"+result) }
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

// TestReloaderFailurePolicy: the failure policy the proxy applies to a
// stage at call time is that of the ServiceProxyModule chosen for it, and
// follows the choice: a new policy for the same module is swapped in too;
// when a Builtin object's module does not load, the stage goes back to the
// configuration's module with the configuration's policy.
func TestReloaderFailurePolicy(t *testing.T) {
	ctx := context.Background()
	double, rt := doubleAndRuntime(t)
	dir := t.TempDir()
	doublePath := filepath.Join(dir, "double.wasm")
	if err := os.WriteFile(doublePath, double, 0o644); err != nil {
		t.Fatal(err)
	}

	stage := abi.StageEndpointSelection
	module := func(source string, policy v1alpha1.FailurePolicy) v1alpha1.ModuleConfiguration {
		return v1alpha1.ModuleConfiguration{
			Stage: stage.String(), Source: source, FailurePolicy: policy,
			Limits: v1alpha1.ModuleLimits{Memory: resource.NewQuantity(64<<20, resource.BinarySI), Timeout: &metav1.Duration{Duration: time.Second}},
		}
	}
	// The configuration runs the builtin module under Builtin.
	config, err := ModuleSpec(module("builtin:selection", v1alpha1.Builtin))
	if err != nil {
		t.Fatal(err)
	}
	if config.FailurePolicy != pipeline.Builtin {
		t.Fatalf("moduleSpec: failure policy %s, want Builtin", config.FailurePolicy)
	}
	specs := []chain.Spec{config}
	first, err := chain.Load(ctx, rt, specs)
	if err != nil {
		t.Fatal(err)
	}
	if first.Policies[stage] != pipeline.Builtin {
		t.Fatalf("chain.Load: failure policy %s, want the spec's Builtin", first.Policies[stage])
	}
	r := New(rt, specs, first)
	r.FileDirs = []string{dir} // the objects name module files
	defer r.Close()
	type swap struct {
		digest string
		policy pipeline.FailurePolicy
	}
	var swapped []swap
	r.Swap = func(mods [len(abi.Stages) + 1]pipeline.Module, policies [len(abi.Stages) + 1]pipeline.FailurePolicy, done func(bool)) {
		swapped = append(swapped, swap{mods[stage].(*runtime.Module).Digest, policies[stage]})
		done(true)
	}
	builtinDigest := first.Modules[stage].Digest

	steps := []struct {
		name   string
		module v1alpha1.ModuleConfiguration
		want   *swap // nil: no swap
	}{
		{"same module, object's policy KeepLastGood", module("builtin:selection", v1alpha1.KeepLastGood), &swap{builtinDigest, pipeline.KeepLastGood}},
		{"same module and policy", module("builtin:selection", v1alpha1.KeepLastGood), nil},
		{"new module, Builtin", module(doublePath, v1alpha1.Builtin), &swap{runtime.Digest(double), pipeline.Builtin}},
		{"policy KeepLastGood", module(doublePath, v1alpha1.KeepLastGood), &swap{runtime.Digest(double), pipeline.KeepLastGood}},
		{"Builtin object that does not load: the configuration's module and policy", module(filepath.Join(dir, "missing.wasm"), v1alpha1.Builtin), &swap{builtinDigest, pipeline.Builtin}},
	}
	for _, st := range steps {
		swapped = nil
		r.SetCatalog(map[abi.Stage]catalog.Choice{stage: {Object: "canary", Module: st.module}})
		r.applyCatalog(ctx)
		switch {
		case st.want == nil && len(swapped) > 0:
			t.Errorf("%s: swapped %v, want no swap", st.name, swapped)
		case st.want != nil && (len(swapped) != 1 || swapped[0] != *st.want):
			t.Errorf("%s: swapped %v, want %v", st.name, swapped, *st.want)
		}
		if st.want != nil && r.current.Policies[stage] != st.want.policy {
			t.Errorf("%s: current chain's policy %s, want %s", st.name, r.current.Policies[stage], st.want.policy)
		}
	}
}

// TestReloaderGuardrails: a ServiceProxyModule that only relaxes its
// guardrails is a change, swapped in; the swapped module carries them to
// the pipeline.
func TestReloaderGuardrails(t *testing.T) {
	ctx := context.Background()
	_, rt := doubleAndRuntime(t)
	stage := abi.StageTrafficPolicy
	module := func(g *v1alpha1.ModuleGuardrails) v1alpha1.ModuleConfiguration {
		return v1alpha1.ModuleConfiguration{
			Stage: stage.String(), Source: "builtin:trafficpolicy", Guardrails: g,
			Limits: v1alpha1.ModuleLimits{Memory: resource.NewQuantity(64<<20, resource.BinarySI), Timeout: &metav1.Duration{Duration: time.Second}},
		}
	}
	config, err := ModuleSpec(module(nil))
	if err != nil {
		t.Fatal(err)
	}
	first, err := chain.Load(ctx, rt, []chain.Spec{config})
	if err != nil {
		t.Fatal(err)
	}
	r := New(rt, []chain.Spec{config}, first)
	defer r.Close()
	var swapped []pipeline.Guardrails
	r.Swap = func(mods [len(abi.Stages) + 1]pipeline.Module, _ [len(abi.Stages) + 1]pipeline.FailurePolicy, done func(bool)) {
		var g pipeline.Guardrails
		if rm, ok := mods[stage].(pipeline.Relaxed); ok {
			g = rm.Guardrails()
		}
		swapped = append(swapped, g)
		done(true)
	}
	relaxed := pipeline.Guardrails{AllowRemoteInLocal: true}
	steps := []struct {
		name string
		g    *v1alpha1.ModuleGuardrails
		want []pipeline.Guardrails
	}{
		{"guardrails relaxed", &v1alpha1.ModuleGuardrails{AllowRemoteInLocal: true}, []pipeline.Guardrails{relaxed}},
		{"the same", &v1alpha1.ModuleGuardrails{AllowRemoteInLocal: true}, nil},
		{"enforced again", &v1alpha1.ModuleGuardrails{}, []pipeline.Guardrails{{}}},
	}
	for _, st := range steps {
		swapped = nil
		r.SetCatalog(map[abi.Stage]catalog.Choice{stage: {Object: "local-first", Module: module(st.g)}})
		r.applyCatalog(ctx)
		if !slices.Equal(swapped, st.want) {
			t.Errorf("%s: swapped %v, want %v", st.name, swapped, st.want)
		}
	}
}
