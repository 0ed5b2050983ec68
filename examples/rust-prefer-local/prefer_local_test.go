//go:build !wasip1

// Package preferlocal_test builds the Rust module of this directory with
// rustc, loads it as wasp explain --module does, and checks its decisions
// on every node of cluster.yaml.
package preferlocal_test

import (
	"bytes"
	"context"
	"errors"
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

// build builds the module of this directory with rustc.
func build(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	tc, err := rustbuild.Find(ctx)
	if err != nil {
		rustbuild.SkipOrFail(t, err)
	}
	wasm, err := tc.Build(ctx, rustbuild.Paths{SDK: filepath.Join("..", "..", "sdk", "rust"), Module: "."})
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// cluster returns the objects of cluster.yaml.
func cluster(t *testing.T) *objects.Objects {
	t.Helper()
	yaml, err := os.ReadFile("cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := objects.Decode(bytes.NewReader(yaml), "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestConfig: the configuration's default applies to the Services without
// the annotation, and a configuration the module cannot use is rejected.
func TestConfig(t *testing.T) {
	ctx := context.Background()
	wasm := build(t)
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	objs := cluster(t)
	for _, tt := range []struct {
		config string
		web    []string // demo/web's weighted endpoints on node-a
		want   string   // the rejection
	}{
		{config: ``, web: []string{"10.244.1.10:8080"}},
		{config: `{"default": "node"}`, web: []string{"10.244.1.10:8080"}},
		{config: `{"default": "zone"}`, web: []string{"10.244.1.10:8080", "10.244.2.10:8080"}},
		{config: ` { "default" : "off" } `, web: []string{"10.244.1.10:8080", "10.244.2.10:8080", "10.244.3.10:8080"}},
		{config: `{"default": "nearby"}`, want: `rejected its configuration: default: "nearby" is not one of node, zone, off`},
		{config: `{"prefer": "zone"}`, want: `rejected its configuration: config: unknown field "prefer"`},
		{config: `{"default": 1}`, want: `rejected its configuration: default: want a string`},
		{config: `{"default": "zone",}`, want: `rejected its configuration: config: want a field name in quotes`},
	} {
		t.Run(tt.config, func(t *testing.T) {
			m, err := rt.Load(ctx, "rust-prefer-local", wasm, runtime.Limits{Instances: 1}, runtime.WithConfig([]byte(tt.config)))
			if tt.want != "" {
				if !errors.Is(err, runtime.ErrConfigRejected) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %v, want ErrConfigRejected containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			var mods [len(abi.Stages) + 1]pipeline.Module
			mods[abi.StageEndpointSelection] = m
			docs, err := explain.Explain(ctx, objs, "node-a", pipeline.New(pipeline.Options{Modules: mods}))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				if d.Service != "demo/web" {
					continue
				}
				var got []string
				for ep := range d.Weights {
					got = append(got, ep)
				}
				slices.Sort(got)
				if !slices.Equal(got, tt.web) {
					t.Errorf("demo/web: weighted %v, want %v", got, tt.web)
				}
			}
		})
	}
}

func TestPreferLocal(t *testing.T) {
	ctx := context.Background()
	wasm := build(t)

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

	objs := cluster(t)
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
