// Package chain resolves the module chain — which module runs each stage —
// from module sources, and loads it into a runtime.
//
// A source is "builtin:NAME" (a module embedded in wasp), "file:///PATH", a
// plain file path, or "oci://REGISTRY/REPOSITORY@sha256:DIGEST" (a module
// artifact in a registry, see package oci). Stages without a source run
// their builtin default.
package chain

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/runtime/worker"
	"github.com/wasp-proxy/wasp/internal/localfile"
	"github.com/wasp-proxy/wasp/modules"
)

// Spec assigns a module source to a stage.
type Spec struct {
	Stage  abi.Stage
	Source string
	Limits runtime.Limits
	// Signatures, when not empty, make the module load only with
	// signatures that satisfy every policy (host/oci): typically the
	// node-wide policy and the module's own; optional. Only an oci://
	// module can carry signatures: a file (file:// or a path) is refused
	// when there is any policy (ErrUnsignedFile). A builtin module is part
	// of wasp and loads regardless.
	Signatures []oci.SignaturePolicy
	// FailurePolicy is what a service port gets when the module fails for
	// it; optional, default KeepLastGood.
	FailurePolicy pipeline.FailurePolicy
	// Config is the module's own configuration (JSON), handed to it
	// through wasp_configure (runtime.WithConfig); optional.
	Config []byte
	// Guardrails relax host-enforced invariants for the module
	// (pipeline.Guardrails); optional, default none relaxed.
	Guardrails pipeline.Guardrails
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

// Read returns the module bytes of a source, pulling an oci:// source
// without a cache or credentials.
func Read(source string) ([]byte, error) {
	return Sources{}.Read(context.Background(), source)
}

// Sources reads module sources.
type Sources struct {
	// OCI configures the client of oci:// sources; optional: the zero
	// value pulls by digest, without a cache or credentials.
	OCI oci.Options
}

// Read returns the module bytes of a source.
func (s Sources) Read(ctx context.Context, source string) ([]byte, error) {
	switch {
	case strings.HasPrefix(source, "builtin:"):
		return modules.Wasm(strings.TrimPrefix(source, "builtin:"))
	case strings.HasPrefix(source, "file://"):
		return readFile(strings.TrimPrefix(source, "file://"))
	case strings.HasPrefix(source, oci.Scheme):
		c, err := oci.New(s.OCI)
		if err != nil {
			return nil, err
		}
		a, err := c.Pull(ctx, source)
		if err != nil {
			return nil, err
		}
		klog.FromContext(ctx).V(1).Info("Module pulled", "module", source, "wasmDigest", a.WasmDigest, "fromCache", a.Cached)
		return a.Wasm, nil
	case strings.Contains(source, "://"):
		scheme, _, _ := strings.Cut(source, "://")
		return nil, fmt.Errorf("module source %q: scheme %q is not supported (use builtin:NAME, file:///PATH, oci://REPOSITORY@sha256:DIGEST or a path)", source, scheme)
	}
	return readFile(source)
}

// readFile reads a module file: a regular file of at most
// abi.MaxModuleSize bytes.
func readFile(path string) ([]byte, error) {
	b, err := localfile.Read(path, abi.MaxModuleSize)
	if err != nil {
		return nil, fmt.Errorf("module file: %w", err)
	}
	return b, nil
}

// OCICacheDir is where modules pulled from registries are kept for a
// runtime cache directory (wasp's --cache-dir): its "oci" subdirectory. It
// returns "" (no cache) for "".
func OCICacheDir(cacheDir string) string {
	if cacheDir == "" {
		return ""
	}
	return filepath.Join(cacheDir, "oci")
}

// Chain is a loaded module per stage.
type Chain struct {
	// Modules holds each stage's module that runs in this process; nil
	// for a stage that runs its builtin module natively
	// (Loader.NativeBuiltins, Native) or its module in a worker.
	Modules [len(abi.Stages) + 1]*runtime.Module
	// Workers holds each stage's module that runs in a worker process
	// (Loader.Workers); nil for the other stages.
	Workers [len(abi.Stages) + 1]*worker.Module
	Sources [len(abi.Stages) + 1]string
	// Policies are the stages' failure policies, for pipeline.Options:
	// their specs', KeepLastGood for a stage without one.
	Policies [len(abi.Stages) + 1]pipeline.FailurePolicy
	// Guardrails are the stages' relaxed guardrails: their specs'. The
	// modules of PipelineModules carry them.
	Guardrails [len(abi.Stages) + 1]pipeline.Guardrails

	// builtin holds the digest and metadata of the builtin module of each
	// stage that runs natively.
	builtin [len(abi.Stages) + 1]struct {
		digest string
		meta   *metadata.Metadata
	}
}

// Native reports whether stage runs its builtin module natively
// (Loader.NativeBuiltins): Modules[stage] and Workers[stage] are nil. A
// stage of a Chain Load did not fill has none of them.
func (c *Chain) Native(stage abi.Stage) bool {
	return c.Modules[stage] == nil && c.Workers[stage] == nil && c.builtin[stage].digest != ""
}

// InWorker reports whether stage's module runs in a worker process
// (Loader.Workers).
func (c *Chain) InWorker(stage abi.Stage) bool { return c.Workers[stage] != nil }

// Digest returns "sha256:<hex>" of stage's module: that of the embedded
// builtin module for a stage that runs it natively, "" for a stage Load
// did not fill.
func (c *Chain) Digest(stage abi.Stage) string {
	if m := c.Modules[stage]; m != nil {
		return m.Digest
	}
	if w := c.Workers[stage]; w != nil {
		return w.Digest
	}
	return c.builtin[stage].digest
}

// Metadata returns what stage's module declares about itself.
func (c *Chain) Metadata(stage abi.Stage) *metadata.Metadata {
	if m := c.Modules[stage]; m != nil {
		return m.Metadata
	}
	if w := c.Workers[stage]; w != nil {
		return w.Metadata
	}
	return c.builtin[stage].meta
}

// Config returns the configuration of stage's module (runtime.WithConfig):
// nil when it has none, as a stage that runs natively.
func (c *Chain) Config(stage abi.Stage) []byte {
	if m := c.Modules[stage]; m != nil {
		return m.Config
	}
	if w := c.Workers[stage]; w != nil {
		return w.Config
	}
	return nil
}

// Name returns the name of stage's module, for logs and metrics: the
// source it was loaded from.
func (c *Chain) Name(stage abi.Stage) string {
	if m := c.Modules[stage]; m != nil {
		return m.Name
	}
	if w := c.Workers[stage]; w != nil {
		return w.Name
	}
	return c.Sources[stage]
}

// Load loads the modules of specs, and the builtin default for every stage
// without a spec. A module must implement the stage it is assigned to, and
// accept its spec's Config (errors.Is(err, runtime.ErrConfigRejected)
// when it does not).
//
// oci:// sources are pulled into OCICacheDir(rt.CacheDir()), with the
// credentials of docker's configuration ($DOCKER_CONFIG/config.json, by
// default ~/.docker/config.json).
func Load(ctx context.Context, rt *runtime.Runtime, specs []Spec) (*Chain, error) {
	return Loader{Runtime: rt}.Load(ctx, specs)
}

// Load is the package's Load into l.Runtime, telling l.Observer.
func (l Loader) Load(ctx context.Context, specs []Spec) (*Chain, error) {
	rt := l.Runtime
	src := Sources{OCI: oci.Options{CacheDir: OCICacheDir(rt.CacheDir()), DockerConfig: true, Observer: l.Observer}}
	c := &Chain{}
	var (
		limits [len(abi.Stages) + 1]runtime.Limits
		sigs   [len(abi.Stages) + 1][]oci.SignaturePolicy
		config [len(abi.Stages) + 1][]byte
	)
	for _, b := range modules.Builtins {
		c.Sources[b.Stage] = "builtin:" + b.Name
	}
	for _, s := range specs {
		c.Sources[s.Stage], limits[s.Stage], sigs[s.Stage] = s.Source, s.Limits, s.Signatures
		c.Policies[s.Stage], c.Guardrails[s.Stage] = s.FailurePolicy, s.Guardrails
		config[s.Stage] = s.Config
	}
	for _, stage := range abi.Stages {
		if l.NativeBuiltins && c.Sources[stage] == modules.Default(stage).Source() && runtime.NoConfig(config[stage]) {
			err := c.native(stage)
			l.loaded(stage, err)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("stage %s: %w", stage, err)
			}
			continue
		}
		stageSrc := src
		stageSrc.OCI.Signatures = sigs[stage]
		var err error
		if l.Workers != nil {
			c.Workers[stage], err = loadWorker(ctx, *l.Workers, stageSrc, c.Sources[stage], limits[stage], stage, config[stage])
		} else {
			c.Modules[stage], err = load(ctx, rt, stageSrc, c.Sources[stage], limits[stage], stage, runtime.WithConfig(config[stage]))
		}
		l.loaded(stage, err)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("stage %s: %w", stage, err)
		}
	}
	return c, nil
}

// native makes stage run its builtin module natively: the pipeline runs
// host/reference for a nil module, which is what the builtin module
// computes (FuzzChain, TestChainRandom). What the module's load would
// tell about it comes from what is embedded beside it, so that its bytes
// are not even read.
func (c *Chain) native(stage abi.Stage) error {
	name := modules.Default(stage).Name
	digest, err := modules.Digest(name)
	if err != nil {
		return err
	}
	meta, err := modules.Metadata(name)
	if err != nil {
		return err
	}
	c.builtin[stage].digest, c.builtin[stage].meta = digest, meta
	return nil
}

// ErrUnsignedFile is wrapped by the error of a module file (file:// or a
// path) given signature policies: a file carries no signature, so it
// cannot satisfy one. It wraps oci.ErrNoSignature.
var ErrUnsignedFile = fmt.Errorf("%w: a module file carries no signature", oci.ErrNoSignature)

// IsFile reports whether Read reads source from a file: file:// or a
// path.
func IsFile(source string) bool {
	return strings.HasPrefix(source, "file://") || !strings.HasPrefix(source, "builtin:") && !strings.Contains(source, "://")
}

// load reads, compiles and checks the module of one stage.
func load(ctx context.Context, rt *runtime.Runtime, src Sources, source string, limits runtime.Limits, stage abi.Stage, opts ...runtime.LoadOption) (*runtime.Module, error) {
	wasm, err := read(ctx, src, source)
	if err != nil {
		return nil, err
	}
	m, err := rt.Load(ctx, source, wasm, limits, opts...)
	if err != nil {
		return nil, err
	}
	if err := implements(source, m.Metadata, stage); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// loadWorker reads the module of one stage and loads it in a worker
// process, which compiles and checks it.
func loadWorker(ctx context.Context, cfg runtime.Config, src Sources, source string, limits runtime.Limits, stage abi.Stage, config []byte) (*worker.Module, error) {
	wasm, err := read(ctx, src, source)
	if err != nil {
		return nil, err
	}
	m, err := worker.Load(ctx, worker.Opts{Name: source, Wasm: wasm, Limits: limits, Config: config, Runtime: cfg})
	if err != nil {
		return nil, err
	}
	if err := implements(source, m.Metadata, stage); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// read reads the module of source, refusing a file when signatures are
// required.
func read(ctx context.Context, src Sources, source string) ([]byte, error) {
	if len(src.OCI.Signatures) > 0 && IsFile(source) {
		return nil, classified{fmt.Errorf("module %q: %w, and signatures are required (moduleSignatures or the module's signatures section): push it to a registry and sign it there", source, ErrUnsignedFile), errFetch}
	}
	wasm, err := src.Read(ctx, source)
	if err != nil {
		return nil, classified{err, errFetch}
	}
	return wasm, nil
}

// implements checks that the module of source, which declares meta,
// implements stage.
func implements(source string, meta *metadata.Metadata, stage abi.Stage) error {
	if !meta.Implements(stage) {
		return classified{fmt.Errorf("module %q (%s) implements %v, not %s", source, meta.Name, meta.Stages, stage), runtime.ErrInvalidModule}
	}
	return nil
}

// PipelineModules returns the chain in the form pipeline.Options takes,
// each module with its stage's relaxed guardrails (pipeline.Relax).
func (c *Chain) PipelineModules() (out [len(abi.Stages) + 1]pipeline.Module) {
	for _, s := range abi.Stages {
		switch {
		case c.Modules[s] != nil:
			out[s] = pipeline.Relax(c.Modules[s], c.Guardrails[s])
		case c.Workers[s] != nil:
			out[s] = pipeline.Relax(c.Workers[s], c.Guardrails[s])
		}
	}
	return out
}

// Close releases the modules, and stops their workers.
func (c *Chain) Close() {
	for _, m := range c.Modules {
		if m != nil {
			m.Close()
		}
	}
	for _, w := range c.Workers {
		if w != nil {
			w.Close()
		}
	}
}
