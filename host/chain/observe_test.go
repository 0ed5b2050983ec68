package chain_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/ocitest"
)

// loads is a chain.Observer that keeps what it is told: "STAGE RESULT"
// loads, pulls by result, and blob cache look-ups by hit.
type loads struct {
	loads map[string]int
	pulls map[oci.PullResult]int
	blobs map[bool]int
}

func (l *loads) Loaded(stage abi.Stage, r chain.LoadResult) { l.loads[stage.String()+" "+string(r)]++ }
func (l *loads) Pulled(r oci.PullResult)                    { l.pulls[r]++ }
func (l *loads) BlobCache(hit bool)                         { l.blobs[hit]++ }

// TestLoaderObserver loads chains that succeed and fail in the ways a
// node sees, and checks what the Loader's Observer is told.
func TestLoaderObserver(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of the machine's
	reg := ocitest.New(t)
	_, a, _ := pushSelection(t, reg)
	rt, err := runtime.New(runtime.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	garbage := filepath.Join(t.TempDir(), "garbage.wasm")
	if err := os.WriteFile(garbage, []byte("\x00asm garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	es := func(source string) []chain.Spec {
		return []chain.Spec{{Stage: abi.StageEndpointSelection, Source: source}}
	}
	allOK := map[string]int{"topology ok": 1, "traffic-policy ok": 1, "endpoint-selection ok": 1}
	selectionFails := func(r chain.LoadResult) map[string]int {
		return map[string]int{"topology ok": 1, "traffic-policy ok": 1, "endpoint-selection " + string(r): 1}
	}

	steps := []struct {
		name  string
		specs []chain.Spec
		loads map[string]int
		pulls map[oci.PullResult]int
		blobs map[bool]int
	}{
		{"builtin", nil, allOK, map[oci.PullResult]int{}, map[bool]int{}},
		{"pulled", es(a.Reference), allOK, map[oci.PullResult]int{oci.PullPulled: 1}, map[bool]int{false: 3}},
		{"cached", es(a.Reference), allOK, map[oci.PullResult]int{oci.PullCached: 1}, map[bool]int{true: 3}},
		{"tag", es("oci://" + reg.Host + "/wasp/selection:v1"), selectionFails(chain.LoadFetch), map[oci.PullResult]int{oci.PullInvalid: 1}, map[bool]int{}},
		{"missing file", es(filepath.Join(t.TempDir(), "missing.wasm")), selectionFails(chain.LoadFetch), map[oci.PullResult]int{}, map[bool]int{}},
		{"not a module", es(garbage), selectionFails(chain.LoadInvalidModule), map[oci.PullResult]int{}, map[bool]int{}},
		{"wrong stage", []chain.Spec{{Stage: abi.StageTopology, Source: "builtin:selection"}}, map[string]int{"topology invalid-module": 1}, map[oci.PullResult]int{}, map[bool]int{}},
	}
	for _, st := range steps {
		obs := &loads{loads: map[string]int{}, pulls: map[oci.PullResult]int{}, blobs: map[bool]int{}}
		c, err := chain.Loader{Runtime: rt, Observer: obs}.Load(context.Background(), st.specs)
		if err == nil {
			c.Close()
		}
		if !maps.Equal(obs.loads, st.loads) {
			t.Errorf("%s: loads %v (err %v), want %v", st.name, obs.loads, err, st.loads)
		}
		if !maps.Equal(obs.pulls, st.pulls) || !maps.Equal(obs.blobs, st.blobs) {
			t.Errorf("%s: pulls %v, blob cache %v; want %v, %v", st.name, obs.pulls, obs.blobs, st.pulls, st.blobs)
		}
	}
}

// TestLoadResultOf classifies the errors of a stage's load.
func TestLoadResultOf(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want chain.LoadResult
	}{
		{nil, chain.LoadOK},
		{fmt.Errorf("module %q: %w", "oci://r/m@sha256:0", oci.ErrBadSignature), chain.LoadSignature},
		{fmt.Errorf("module %q: %w", "m", runtime.ErrConfigRejected), chain.LoadConfigRejected},
		{fmt.Errorf("%w: %w", runtime.ErrInvalidModule, runtime.ErrCompile), chain.LoadCompile},
		{fmt.Errorf("%w: no metadata", runtime.ErrInvalidModule), chain.LoadInvalidModule},
		{context.Canceled, chain.LoadOther},
	} {
		if got := chain.LoadResultOf(tt.err); got != tt.want {
			t.Errorf("LoadResultOf(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
