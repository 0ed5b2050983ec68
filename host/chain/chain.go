// Package chain resolves the module chain — which module runs each stage —
// from module sources, and loads it into a runtime.
//
// A source is "builtin:NAME" (a module embedded in wasp), "file:///PATH" or
// a plain file path. Stages without a source run their builtin default.
package chain

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/modules"
)

// Spec assigns a module source to a stage.
type Spec struct {
	Stage  abi.Stage
	Source string
	Limits runtime.Limits
}

// ParseSpec parses "STAGE=SOURCE", as given to --module.
func ParseSpec(s string) (Spec, error) {
	name, src, ok := strings.Cut(s, "=")
	if !ok || src == "" {
		return Spec{}, fmt.Errorf("module %q: want STAGE=SOURCE, e.g. endpoint-selection=./module.wasm", s)
	}
	stage, ok := abi.ParseStage(name)
	if !ok {
		return Spec{}, fmt.Errorf("module %q: unknown stage %q (want topology, traffic-policy or endpoint-selection)", s, name)
	}
	return Spec{Stage: stage, Source: src}, nil
}

// Read returns the module bytes of a source.
func Read(source string) ([]byte, error) {
	switch {
	case strings.HasPrefix(source, "builtin:"):
		return modules.Wasm(strings.TrimPrefix(source, "builtin:"))
	case strings.HasPrefix(source, "file://"):
		return os.ReadFile(strings.TrimPrefix(source, "file://"))
	case strings.Contains(source, "://"):
		scheme, _, _ := strings.Cut(source, "://")
		return nil, fmt.Errorf("module source %q: scheme %q is not supported (use builtin:NAME, file:///PATH or a path)", source, scheme)
	}
	return os.ReadFile(source)
}

// Chain is a loaded module per stage.
type Chain struct {
	Modules [len(abi.Stages) + 1]*runtime.Module
	Sources [len(abi.Stages) + 1]string
}

// Load loads the modules of specs, and the builtin default for every stage
// without a spec. A module must implement the stage it is assigned to.
func Load(ctx context.Context, rt *runtime.Runtime, specs []Spec) (*Chain, error) {
	c := &Chain{}
	var limits [len(abi.Stages) + 1]runtime.Limits
	for _, b := range modules.Builtins {
		c.Sources[b.Stage] = "builtin:" + b.Name
	}
	for _, s := range specs {
		c.Sources[s.Stage], limits[s.Stage] = s.Source, s.Limits
	}
	for _, stage := range abi.Stages {
		src := c.Sources[stage]
		wasm, err := Read(src)
		if err != nil {
			return nil, fmt.Errorf("stage %s: %w", stage, err)
		}
		m, err := rt.Load(ctx, src, wasm, limits[stage])
		if err != nil {
			return nil, fmt.Errorf("stage %s: %w", stage, err)
		}
		if !m.Metadata.Implements(stage) {
			m.Close()
			return nil, fmt.Errorf("stage %s: module %q (%s) implements %v, not %s", stage, src, m.Metadata.Name, m.Metadata.Stages, stage)
		}
		c.Modules[stage] = m
	}
	return c, nil
}

// PipelineModules returns the chain in the form pipeline.Options takes.
func (c *Chain) PipelineModules() (out [len(abi.Stages) + 1]pipeline.Module) {
	for _, s := range abi.Stages {
		if c.Modules[s] != nil {
			out[s] = c.Modules[s]
		}
	}
	return out
}

// Close releases the modules.
func (c *Chain) Close() {
	for _, m := range c.Modules {
		if m != nil {
			m.Close()
		}
	}
}
