package reload

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
)

// TestReloadConfig changes only the spec.config of a ServiceProxyModule:
// a new configuration the module accepts is swapped in although the code
// is the same; one it rejects keeps the running module (KeepLastGood), or
// sends the stage back to the configuration's module (Builtin), with the
// rejection in the error and the object's status.
func TestReloadConfig(t *testing.T) {
	ctx := context.Background()
	path := modbuild.File(t, "../runtime/testdata/modules/configured")
	wasm, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	first, err := chain.Load(ctx, rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := New(rt, nil, first)
	r.FileDirs = []string{filepath.Dir(path)} // the objects name a module file
	defer r.Close()
	swaps := 0
	r.Swap = func(_ [len(abi.Stages) + 1]pipeline.Module, _ [len(abi.Stages) + 1]pipeline.FailurePolicy, done func(bool)) {
		swaps++
		done(true)
	}
	var failed []error
	r.LoadFailed = func(err error) { failed = append(failed, err) }
	status := map[string]*catalog.NodeStatus{}
	r.Status = func(_ context.Context, object string, st *catalog.NodeStatus) error {
		status[object] = st
		return nil
	}
	choose := func(config string, policy v1alpha1.FailurePolicy) {
		r.catalog = map[abi.Stage]catalog.Choice{abi.StageTopology: {Object: "configured", Module: v1alpha1.ModuleConfiguration{
			Stage: "topology", Source: path, Config: []byte(config), FailurePolicy: policy,
			Limits: v1alpha1.ModuleLimits{Memory: resource.NewQuantity(64<<20, resource.BinarySI), Timeout: &metav1.Duration{Duration: 2 * time.Second}},
		}}}
		r.applyCatalog(ctx)
	}
	running := func() *runtime.Module { return r.current.Modules[abi.StageTopology] }

	choose(`{"eligible": 1}`, v1alpha1.KeepLastGood)
	choose(`{"eligible": 1}`, v1alpha1.KeepLastGood) // unchanged: no swap
	if swaps != 1 || string(running().Config) != `{"eligible": 1}` {
		t.Fatalf("%d swaps, running configuration %q; want 1 swap to the configured module", swaps, running().Config)
	}
	choose(`{"eligible": 2}`, v1alpha1.KeepLastGood)
	if swaps != 2 || running().Digest != runtime.Digest(wasm) || string(running().Config) != `{"eligible": 2}` {
		t.Fatalf("%d swaps, running configuration %q; want a swap to the new configuration of the same code", swaps, running().Config)
	}

	want := `module "` + path + `" rejected its configuration: eligible: must be at least 1`
	choose(`{"reject": "eligible: must be at least 1"}`, v1alpha1.KeepLastGood)
	if swaps != 2 || string(running().Config) != `{"eligible": 2}` {
		t.Fatalf("a rejected configuration swapped (%d swaps, running %q); want the last good one to stay", swaps, running().Config)
	}
	if len(failed) != 1 || !errors.Is(failed[0], runtime.ErrConfigRejected) || !strings.Contains(failed[0].Error(), want) {
		t.Fatalf("failed loads %v; want one ErrConfigRejected containing %q", failed, want)
	}
	if st := status["configured"]; st == nil || st.Phase != catalog.PhaseFailed || !strings.Contains(st.Message, want) {
		t.Fatalf("status %+v; want phase %s with the rejection", st, catalog.PhaseFailed)
	}
	if r.retry == 0 {
		t.Errorf("no retry scheduled after the rejection")
	}

	choose(`{"reject": "eligible: must be at least 1"}`, v1alpha1.Builtin)
	if swaps != 3 || running().Metadata.Name != "topology" {
		t.Fatalf("%d swaps, stage runs %s; want the builtin topology module after a rejection under Builtin", swaps, running().Metadata.Name)
	}
	if st := status["configured"]; st == nil || st.Phase != catalog.PhaseBuiltin || !strings.Contains(st.Message, want) {
		t.Fatalf("status %+v; want phase %s with the rejection", st, catalog.PhaseBuiltin)
	}
}
