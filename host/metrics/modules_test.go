package metrics

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/ocitest"
)

// TestModuleSourceSeries: the fetch, cache and load series exist at zero
// from the start, one per label value of their closed sets.
func TestModuleSourceSeries(t *testing.T) {
	m := New()
	for name, n := range map[string]int{
		"wasp_module_fetches_total":        len(oci.PullResults),
		"wasp_module_cache_requests_total": 4, // blob, compiled × hit, miss
		"wasp_module_loads_total":          len(abi.Stages) * len(chain.LoadResults),
	} {
		if got, err := testutil.GatherAndCount(m.Registry(), name); err != nil || got != n {
			t.Errorf("%s: %d series at start (%v), want %d", name, got, err, n)
		}
	}
}

// TestModulesHook loads chains through the hooks as wasp run does: an
// oci:// module pulled, then loaded again from both caches, then a module
// file that is missing.
func TestModulesHook(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of the machine's
	m := New()
	reg := ocitest.New(t)
	a := ocitest.PushModule(t, reg)
	rt, err := runtime.New(runtime.Config{CacheDir: t.TempDir(), Compiled: m.ModuleCompiled})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	l := chain.Loader{Runtime: rt, Observer: m.Modules()}
	load := func(source string) {
		t.Helper()
		ch, err := l.Load(context.Background(), []chain.Spec{{Stage: abi.StageEndpointSelection, Source: source}})
		if err == nil {
			ch.Close()
		}
	}

	load(a.Reference)
	load(a.Reference)
	load(filepath.Join(t.TempDir(), "missing.wasm"))

	es := "stage=endpoint-selection"
	checkValues(t, m.Registry(), []want{
		{"wasp_module_fetches_total", []string{"result=pulled"}, 1},
		{"wasp_module_fetches_total", []string{"result=cached"}, 1},
		{"wasp_module_fetches_total", []string{"result=unavailable"}, 0},
		// The manifest, config and layer, each fetched, then cached.
		{"wasp_module_cache_requests_total", []string{"kind=blob", "result=miss"}, 3},
		{"wasp_module_cache_requests_total", []string{"kind=blob", "result=hit"}, 3},
		// Three modules compiled (the builtin topology and traffic-policy
		// ones, the pulled selection one), then found compiled: the
		// builtin ones a third time, the file's never compiled.
		{"wasp_module_cache_requests_total", []string{"kind=compiled", "result=miss"}, 3},
		{"wasp_module_cache_requests_total", []string{"kind=compiled", "result=hit"}, 5},
		{"wasp_module_loads_total", []string{"result=ok", es}, 2},
		{"wasp_module_loads_total", []string{"result=fetch", es}, 1},
		{"wasp_module_loads_total", []string{"result=ok", "stage=topology"}, 3},
		{"wasp_module_loads_total", []string{"result=ok", "stage=traffic-policy"}, 3},
	})
}
