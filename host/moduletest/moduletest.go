// Package moduletest runs a module chain against scenario files of
// Kubernetes objects with expected results: the harness `wasp module
// test` gives module authors for their CI.
//
// A scenario is YAML (or JSON), decoded strictly:
//
//	apiVersion: wasp.dev/v1alpha1
//	kind: ModuleTest
//	modules:                     # optional: the chain under test (the
//	- stage: endpoint-selection  # command line's --module entries come
//	  source: ./module.wasm      # first); sources relative to the file
//	  config: {zones: [zone-b]}  # optional: the module's own configuration
//	cases:
//	- name: prefers the local node
//	  objects: cluster.yaml      # Nodes, Services, EndpointSlices; relative to the file
//	  node: node-a
//	  config:                    # optional: this case's configuration of
//	    endpoint-selection: {}   # a stage's module under test
//	  expect:
//	  - service: demo/web        # namespace/name
//	    port: http               # optional: every port of the Service
//	    ipFamily: IPv4           # optional: every family
//	    clusterEndpoints: ["10.244.1.10:8080"]   # each field optional:
//	    localEndpoints: null                     # only what is given
//	    hasAnyEndpoints: true                    # is compared
//	    weights: {"10.244.1.10:8080": 1}
//	    source: modules          # default: the modules must decide
//
// Fields are compared as `wasp explain` prints them (docs/explain.md):
// endpoints as ip:port sorted, null (unused, or no local endpoint) apart
// from [] (used, none).
//
// A case that checks a module's validation of its configuration gives the
// configuration and, instead of objects, a node and expectations, what the
// module's rejection must contain:
//
//   - name: an empty zone name is refused
//     config:
//     endpoint-selection: {zones: [zone-b, ""]}
//     rejected: "zones[1]: empty zone name"
package moduletest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/explain"
	"github.com/wasp-proxy/wasp/host/objects"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/printable"
)

// Kind and APIVersion of a scenario file.
const (
	APIVersion = "wasp.dev/v1alpha1"
	Kind       = "ModuleTest"
)

// Scenario is a scenario file.
type Scenario struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Modules    []Module `json:"modules,omitempty"`
	Cases      []Case   `json:"cases"`

	dir string // the file's directory: relative paths start there
}

// Module is a stage's module under test.
type Module struct {
	Stage  string `json:"stage"`
	Source string `json:"source"`
	// Config is the module's own configuration, a YAML or JSON object.
	Config json.RawMessage `json:"config,omitempty"`
}

// Case is one cluster, one node, and what is expected of its ports.
type Case struct {
	Name    string   `json:"name"`
	Objects string   `json:"objects"`
	Node    string   `json:"node"`
	Expect  []Expect `json:"expect"`
	// Config replaces, for this case, the configuration of the module
	// under test of each stage it names.
	Config map[string]json.RawMessage `json:"config,omitempty"`
	// Rejected, when set, is what the load of the case's chain must fail
	// with: a module rejects its configuration with a message that
	// contains it. Such a case has no objects, node or expectations.
	Rejected string `json:"rejected,omitempty"`
}

// Expect is what one Service's ports must give; absent fields are not
// compared. For the endpoint lists a given null (must be null) differs
// from an absent field.
type Expect struct {
	Service          string            `json:"service"`
	Port             *string           `json:"port,omitempty"`
	IPFamily         string            `json:"ipFamily,omitempty"`
	ClusterEndpoints Endpoints         `json:"clusterEndpoints"`
	LocalEndpoints   Endpoints         `json:"localEndpoints"`
	HasAnyEndpoints  *bool             `json:"hasAnyEndpoints,omitempty"`
	Weights          map[string]uint32 `json:"weights,omitempty"`
	Source           string            `json:"source,omitempty"`
}

// Endpoints is an expected endpoint list: Set says it was given, Null
// that it must be null (unused), as opposed to empty.
type Endpoints struct {
	Set, Null bool
	List      []string
}

// UnmarshalJSON reads null or a list of ip:port.
func (e *Endpoints) UnmarshalJSON(b []byte) error {
	e.Set = true
	if string(bytes.TrimSpace(b)) == "null" {
		e.Null = true
		return nil
	}
	e.List = []string{}
	return json.Unmarshal(b, &e.List)
}

// Load reads a scenario file, strictly: unknown or duplicate fields are
// errors, and so are a missing kind, case name, objects file or node, and
// an expectation without a service.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// A given null must reach Endpoints.UnmarshalJSON: sigs.k8s.io/yaml
	// turns YAML into JSON first, so a null stays a null.
	var s Scenario
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.dir = filepath.Dir(path)
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if s.APIVersion != APIVersion || s.Kind != Kind {
		bad("apiVersion/kind: %q/%q, want %s/%s", s.APIVersion, s.Kind, APIVersion, Kind)
	}
	for i, m := range s.Modules {
		if _, ok := abi.ParseStage(m.Stage); !ok {
			bad("modules[%d].stage: %q is no stage (topology, traffic-policy, endpoint-selection)", i, m.Stage)
		}
		if m.Source == "" {
			bad("modules[%d].source: required", i)
		}
		if !isObject(m.Config) {
			bad("modules[%d].config: %s, want an object", i, m.Config)
		}
	}
	if len(s.Cases) == 0 {
		bad("cases: none")
	}
	for i, c := range s.Cases {
		required := map[string]string{"name": c.Name, "objects": c.Objects, "node": c.Node}
		if c.Rejected != "" {
			required = map[string]string{"name": c.Name}
			if c.Objects != "" || c.Node != "" || len(c.Expect) > 0 {
				bad("cases[%d]: a case with rejected has no objects, node or expect", i)
			}
			if len(c.Config) == 0 {
				bad("cases[%d].config: required with rejected", i)
			}
		}
		for field, v := range required {
			if v == "" {
				bad("cases[%d].%s: required", i, field)
			}
		}
		for stage, config := range c.Config {
			if _, ok := abi.ParseStage(stage); !ok {
				bad("cases[%d].config: %q is no stage (topology, traffic-policy, endpoint-selection)", i, stage)
			}
			if !isObject(config) {
				bad("cases[%d].config.%s: %s, want an object", i, stage, config)
			}
		}
		for j, e := range c.Expect {
			if strings.Count(e.Service, "/") != 1 {
				bad("cases[%d].expect[%d].service: %q, want namespace/name", i, j, e.Service)
			}
			if e.IPFamily != "" && e.IPFamily != "IPv4" && e.IPFamily != "IPv6" {
				bad("cases[%d].expect[%d].ipFamily: %q, want IPv4 or IPv6", i, j, e.IPFamily)
			}
			switch e.Source {
			case "", "modules", "last-good", "builtin":
			default:
				bad("cases[%d].expect[%d].source: %q, want modules, last-good or builtin", i, j, e.Source)
			}
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %s", path, strings.Join(problems, "; "))
	}
	return &s, nil
}

// Specs returns the chain under test: extra (the command line's) first,
// then the scenario's modules for the stages extra leaves, with relative
// file sources resolved against the scenario's directory.
func (s *Scenario) Specs(extra []chain.Spec) []chain.Spec {
	out := append([]chain.Spec(nil), extra...)
	for _, m := range s.Modules {
		stage, _ := abi.ParseStage(m.Stage)
		taken := false
		for _, e := range extra {
			taken = taken || e.Stage == stage
		}
		if !taken {
			out = append(out, chain.Spec{Stage: stage, Source: s.path(m.Source), Config: m.Config})
		}
	}
	return out
}

// isObject reports whether a configuration is absent, null or a JSON
// object.
func isObject(config json.RawMessage) bool {
	c := bytes.TrimSpace(config)
	return len(c) == 0 || string(c) == "null" || c[0] == '{'
}

// specs returns the chain of a case: specs with the case's
// configurations.
func (tc Case) specs(specs []chain.Spec) ([]chain.Spec, error) {
	out := append([]chain.Spec(nil), specs...)
	for name, config := range tc.Config {
		stage, _ := abi.ParseStage(name)
		i := slices.IndexFunc(out, func(s chain.Spec) bool { return s.Stage == stage })
		if i < 0 {
			return nil, fmt.Errorf("config.%s: no module under test for the stage", name)
		}
		out[i].Config = config
	}
	return out, nil
}

// path resolves a relative file path or plain-path source.
func (s *Scenario) path(p string) string {
	if strings.Contains(p, ":") || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.dir, p)
}

// Result is the outcome of one case.
type Result struct {
	Case       string
	Mismatches []string // empty: passed
	Err        error    // the case could not run
}

// Passed reports whether the case ran and every expectation held.
func (r Result) Passed() bool { return r.Err == nil && len(r.Mismatches) == 0 }

// Run runs every case of s through the chain of specs. A case with its
// own configuration runs through a chain of its own. The error is that of
// loading the chain of specs, which a case without configuration needs.
func Run(ctx context.Context, rt *runtime.Runtime, s *Scenario, specs []chain.Spec) ([]Result, error) {
	var base *chain.Chain
	defer func() {
		if base != nil {
			base.Close()
		}
	}()
	var out []Result
	for _, tc := range s.Cases {
		r := Result{Case: tc.Name}
		if len(tc.Config) == 0 {
			if base == nil {
				var err error
				if base, err = chain.Load(ctx, rt, specs); err != nil {
					return nil, err
				}
			}
			r.Mismatches, r.Err = runCase(ctx, s, tc, base)
			out = append(out, r)
			continue
		}
		cs, err := tc.specs(specs)
		if err != nil {
			r.Err = err
			out = append(out, r)
			continue
		}
		c, err := chain.Load(ctx, rt, cs)
		switch {
		case tc.Rejected != "":
			r.Mismatches = rejection(tc.Rejected, err)
		case err != nil:
			r.Err = err
		default:
			r.Mismatches, r.Err = runCase(ctx, s, tc, c)
		}
		if c != nil {
			c.Close()
		}
		out = append(out, r)
	}
	return out, nil
}

// runCase explains the case's objects through c and compares.
func runCase(ctx context.Context, s *Scenario, tc Case, c *chain.Chain) ([]string, error) {
	docs, err := explainCase(ctx, s, tc, c)
	if err != nil {
		return nil, err
	}
	return compare(tc.Expect, docs), nil
}

// rejection checks that a chain's load failed with a rejected
// configuration whose error contains want.
func rejection(want string, err error) []string {
	switch {
	case err == nil:
		return []string{fmt.Sprintf("the configuration was accepted, want it rejected with %q", want)}
	case !errors.Is(err, runtime.ErrConfigRejected):
		return []string{fmt.Sprintf("the chain did not load (%v), want a rejected configuration", err)}
	case !strings.Contains(err.Error(), want):
		return []string{fmt.Sprintf("rejected with %q, want %q in it", err, want)}
	}
	return nil
}

func explainCase(ctx context.Context, s *Scenario, tc Case, c *chain.Chain) ([]explain.Document, error) {
	f, err := os.Open(s.path(tc.Objects))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	objs, err := objects.Decode(f, tc.Objects)
	if err != nil {
		return nil, err
	}
	// A fresh pipeline per case: no last good decision crosses cases.
	return explain.Explain(ctx, objs, tc.Node, pipeline.New(pipeline.Options{Modules: c.PipelineModules()}))
}

// compare checks every expectation against the documents of its ports.
func compare(expect []Expect, docs []explain.Document) []string {
	var out []string
	for _, e := range expect {
		matched := 0
		for _, d := range docs {
			if d.Service != e.Service || (e.Port != nil && d.Port != *e.Port) || (e.IPFamily != "" && d.IPFamily != e.IPFamily) {
				continue
			}
			matched++
			where := fmt.Sprintf("%s port %q %s", d.Service, d.Port, d.IPFamily)
			want := e.Source
			if want == "" {
				want = "modules"
			}
			if d.Source != want {
				out = append(out, fmt.Sprintf("%s: decided by %s, want %s (%s)", where, d.Source, want, d.Error))
			}
			out = append(out, endpoints(where, "clusterEndpoints", e.ClusterEndpoints, d.ClusterEndpoints)...)
			out = append(out, endpoints(where, "localEndpoints", e.LocalEndpoints, d.LocalEndpoints)...)
			if e.HasAnyEndpoints != nil && *e.HasAnyEndpoints != d.HasAnyEndpoints {
				out = append(out, fmt.Sprintf("%s: hasAnyEndpoints %v, want %v", where, d.HasAnyEndpoints, *e.HasAnyEndpoints))
			}
			if e.Weights != nil && !reflect.DeepEqual(e.Weights, d.Weights) {
				out = append(out, fmt.Sprintf("%s: weights %v, want %v", where, d.Weights, e.Weights))
			}
		}
		if matched == 0 {
			out = append(out, fmt.Sprintf("%s: no such service port in the output", e.Service))
		}
	}
	return out
}

func endpoints(where, field string, want Endpoints, got []string) []string {
	switch {
	case !want.Set:
		return nil
	case want.Null && got != nil:
		return []string{fmt.Sprintf("%s: %s %q, want null", where, field, got)}
	case !want.Null && got == nil:
		return []string{fmt.Sprintf("%s: %s null, want %q", where, field, want.List)}
	case !want.Null && !reflect.DeepEqual(want.List, append([]string{}, got...)):
		return []string{fmt.Sprintf("%s: %s %q, want %q", where, field, got, want.List)}
	}
	return nil
}

// ErrFailed is returned by Report when a case failed.
var ErrFailed = errors.New("module test failed")

// Report writes one line per case (PASS, or FAIL with each mismatch
// below it) and a last line "N passed, M failed"; it returns ErrFailed if
// a case failed.
func Report(w io.Writer, results []Result) error {
	passed, failed := 0, 0
	for _, r := range results {
		if r.Passed() {
			passed++
			fmt.Fprintf(w, "PASS %s\n", r.Case)
			continue
		}
		failed++
		fmt.Fprintf(w, "FAIL %s\n", r.Case)
		if r.Err != nil {
			fmt.Fprintf(w, "    %s\n", printable.String(r.Err.Error()))
		}
		for _, m := range r.Mismatches {
			fmt.Fprintf(w, "    %s\n", printable.String(m))
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return ErrFailed
	}
	return nil
}
