// Package preferlocal_test builds the Rust module of this directory with
// rustc, loads it as wasp explain --module does, and checks its decisions
// on every node of cluster.yaml.
package preferlocal_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/explain"
	"github.com/wasp-proxy/wasp/host/objects"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/rustbuild"
)

// want is one service's expected result on one node: the endpoints given a
// weight (each weight 1), and where the decision came from.
type want struct {
	weighted []string
	source   string
	err      string // substring of the failure, for a fallback
}

// Address plan (cluster.yaml): Service number k has its pod on node N at
// 10.244.N.k:8080, N being 1 for node-a, 2 for node-b, 3 for node-c;
// node-a and node-b are in zone-a, node-c in zone-b.
var tests = map[string]map[string]want{
	"node-a": {
		"demo/web":       {weighted: []string{"10.244.1.10:8080"}, source: "modules"},
		"demo/api":       {weighted: []string{"10.244.1.11:8080", "10.244.2.11:8080"}, source: "modules"},
		"demo/db":        {weighted: []string{"10.244.2.12:8080"}, source: "modules"},
		"demo/cache":     {weighted: []string{"10.244.1.13:8080", "10.244.2.13:8080", "10.244.3.13:8080"}, source: "modules"},
		"demo/queue":     {weighted: []string{"10.244.2.14:8080", "10.244.3.14:8080"}, source: "builtin", err: `annotation wasp.dev/prefer-local: "nearby" is not one of node, zone, off`},
		"demo/web-local": {weighted: []string{"10.244.1.15:8080"}, source: "modules"},
	},
	"node-b": {
		"demo/web":   {weighted: []string{"10.244.2.10:8080"}, source: "modules"},
		"demo/api":   {weighted: []string{"10.244.1.11:8080", "10.244.2.11:8080"}, source: "modules"},
		"demo/db":    {weighted: []string{"10.244.2.12:8080"}, source: "modules"},
		"demo/cache": {weighted: []string{"10.244.1.13:8080", "10.244.2.13:8080", "10.244.3.13:8080"}, source: "modules"},
		"demo/queue": {weighted: []string{"10.244.2.14:8080", "10.244.3.14:8080"}, source: "builtin", err: `"nearby"`},
		// No local endpoint: the cluster set's closest is node-a's, in
		// the same zone.
		"demo/web-local": {weighted: []string{"10.244.1.15:8080"}, source: "modules"},
	},
	"node-c": {
		"demo/web": {weighted: []string{"10.244.3.10:8080"}, source: "modules"},
		// zone-b has node-c only, so "zone" and "node" agree here.
		"demo/api":   {weighted: []string{"10.244.3.11:8080"}, source: "modules"},
		"demo/db":    {weighted: []string{"10.244.3.12:8080"}, source: "modules"},
		"demo/cache": {weighted: []string{"10.244.1.13:8080", "10.244.2.13:8080", "10.244.3.13:8080"}, source: "modules"},
		"demo/queue": {weighted: []string{"10.244.2.14:8080", "10.244.3.14:8080"}, source: "builtin", err: `"nearby"`},
		// The local set's endpoint keeps its weight.
		"demo/web-local": {weighted: []string{"10.244.3.15:8080"}, source: "modules"},
	},
}

func TestPreferLocal(t *testing.T) {
	ctx := context.Background()
	tc, err := rustbuild.Find(ctx)
	if err != nil {
		rustbuild.SkipOrFail(t, err)
	}
	wasm, err := tc.Build(ctx, rustbuild.Paths{SDK: filepath.Join("..", "..", "sdk", "rust"), Module: "."})
	if err != nil {
		t.Fatal(err)
	}

	// What wasp module inspect shows, and what the host validates.
	meta, err := runtime.Inspect(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Name != "rust-prefer-local" || meta.Version != "0.1.0" || !slices.Equal(meta.Stages, []string{"endpoint-selection"}) ||
		!strings.Contains(meta.Description, "wasp.dev/prefer-local") {
		t.Errorf("metadata %+v", meta)
	}

	// Loaded as wasp explain --module endpoint-selection=FILE loads it.
	path := filepath.Join(t.TempDir(), "rust-prefer-local.wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	spec, err := chain.ParseSpec("endpoint-selection=" + path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := chain.Load(ctx, rt, []chain.Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if m := c.Modules[abi.StageEndpointSelection]; m.Metadata.Name != "rust-prefer-local" {
		t.Fatalf("endpoint-selection runs %q", m.Metadata.Name)
	}

	yaml, err := os.ReadFile("cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := objects.Decode(bytes.NewReader(yaml), "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{Modules: c.PipelineModules()})
	for node, services := range tests {
		t.Run(node, func(t *testing.T) {
			docs, err := explain.Explain(ctx, objs, node, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) != len(services) {
				t.Errorf("%d service ports, want %d", len(docs), len(services))
			}
			for _, d := range docs {
				w, ok := services[d.Service]
				if !ok {
					t.Errorf("unexpected service port %s", d.Service)
					continue
				}
				var got []string
				for ep, weight := range d.Weights {
					if weight != 1 {
						t.Errorf("%s: %s has weight %d, want 1", d.Service, ep, weight)
					}
					got = append(got, ep)
				}
				slices.Sort(got)
				if !reflect.DeepEqual(got, w.weighted) || d.Source != w.source {
					t.Errorf("%s: weighted %v from %s, want %v from %s", d.Service, got, d.Source, w.weighted, w.source)
				}
				if w.err == "" && d.Error != "" || !strings.Contains(d.Error, w.err) {
					t.Errorf("%s: error %q, want one containing %q", d.Service, d.Error, w.err)
				}
			}
		})
	}
}
