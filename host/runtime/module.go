package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/runtime/internal/wasmbin"
)

// Limits bound what one module may use. Zero fields take the defaults.
type Limits struct {
	// MemoryBytes caps each instance's linear memory. Default 256 MiB.
	MemoryBytes uint64
	// Timeout bounds one stage call. Default 2 s.
	Timeout time.Duration
	// InitTimeout bounds the creation of an instance: the module's start
	// functions and wasp_configure. It is longer than Timeout because a
	// Go guest's runtime starts up there, and an instance replacing a
	// failed one is created while the node may be busy: a slow start must
	// not count against a call. Default 5 × Timeout.
	InitTimeout time.Duration
	// Instances is the size of the instance pool. Default GOMAXPROCS.
	Instances int
	// RecycleAfterCalls replaces an instance after this many calls.
	// Default 10,000.
	RecycleAfterCalls int
	// RecycleAboveBytes replaces an instance whose linear memory has grown
	// past this size after a call. Default 3/4 of MemoryBytes.
	RecycleAboveBytes uint64
	// PoolMemoryBytes caps the linear memory of all the module's instances
	// together, so that what a module can take from the node does not grow
	// with its pool (Instances, one per core by default): a memory.grow
	// past it fails in the guest, as one past MemoryBytes does. Default
	// 1.5 × MemoryBytes (384 MiB).
	PoolMemoryBytes uint64
}

// Defaults for Limits.
const (
	DefaultMemoryBytes       = 256 << 20
	DefaultTimeout           = 2 * time.Second
	DefaultRecycleAfterCalls = 10000
	pageSize                 = 65536
)

func (l Limits) withDefaults() Limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	if l.InitTimeout == 0 {
		l.InitTimeout = 5 * l.Timeout
	}
	if l.Instances <= 0 {
		l.Instances = runtime.GOMAXPROCS(0)
	}
	if l.RecycleAfterCalls <= 0 {
		l.RecycleAfterCalls = DefaultRecycleAfterCalls
	}
	if l.RecycleAboveBytes == 0 {
		l.RecycleAboveBytes = l.MemoryBytes / 4 * 3
	}
	if l.PoolMemoryBytes == 0 {
		l.PoolMemoryBytes = l.MemoryBytes + l.MemoryBytes/2
	}
	return l
}

// Module is a loaded, validated module with its instance pool. It is safe
// for concurrent use: each call takes an instance of its own.
type Module struct {
	// Name is the name the module was loaded under (for logs and metrics).
	Name string
	// Digest is "sha256:<hex>" of the module binary as given to Load.
	Digest string
	// Metadata is what the module declares about itself.
	Metadata *metadata.Metadata
	// Config is the configuration every instance was given through
	// wasp_configure (WithConfig), without surrounding space; nil when
	// there is none. Two Modules of the same Digest with different Config
	// are different modules.
	Config []byte

	rt       *Runtime
	engine   wazero.Runtime
	compiled wazero.CompiledModule
	limits   Limits

	memory *memoryPool
	// minMemory is the linear memory an instance starts with, in bytes:
	// the module's declared minimum, reserved in memory before each
	// instantiation.
	minMemory uint64
	// hostBytes is what each instance is estimated to keep in the host's
	// memory besides its linear memory (instanceBytes), reserved in memory
	// with it.
	hostBytes uint64
	tokens    chan struct{} // one per instance the pool may hold
	mu        sync.Mutex
	idle      []*instance
	closed    bool

	// baseMemory is the linear memory of a fresh instance, after its
	// initialisation: what Shrink keeps.
	baseMemory uint64

	calls, recycled, shrunk, maxMemory atomic.Uint64
}

// LoadOption is an optional argument of Load.
type LoadOption func(*loadOptions)

type loadOptions struct {
	config []byte
}

// WithConfig gives the module its own configuration: JSON bytes, handed
// as they are to wasp_configure on every instance before its first stage
// call. nil, empty or JSON null is no configuration. A module that does
// not export wasp_configure accepts only no configuration or {}.
func WithConfig(config []byte) LoadOption {
	return func(o *loadOptions) { o.config = config }
}

// Load validates wasm and prepares it to run under name. It checks, before
// instantiating anything: the binary's structure, the ABI marker export,
// the metadata section, the exports each declared stage needs, and that the
// only imports are WASI's. It then compiles the module and creates one
// instance, which runs the module's initialisation and, if the module
// exports wasp_configure, gets its configuration (WithConfig): a module
// that rejects it does not load (ErrConfigRejected).
func (r *Runtime) Load(ctx context.Context, name string, wasm []byte, limits Limits, opts ...LoadOption) (_ *Module, err error) {
	// Module bytes come from operators and registries. Whatever a parser,
	// the instrumenter or wazero's compiler does with a hostile binary, it
	// must not take the node's proxy down with it.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("module %q: %w: rejected while loading: %v", name, ErrInvalidModule, p)
		}
	}()
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	config := bytes.Clone(normalConfig(o.config)) // the caller's may change
	if len(config) > abi.MaxConfigLen {
		return nil, classified{fmt.Errorf("module %q: configuration is %d bytes, more than the %d allowed", name, len(config), abi.MaxConfigLen), ErrConfigRejected}
	}
	limits = limits.withDefaults()
	digest := Digest(wasm)
	meta, err := Inspect(wasm)
	if err != nil {
		return nil, fmt.Errorf("module %q: %w", name, err)
	}
	hostBytes, err := checkCompileLimits(wasm, r.cfg.Compile)
	if err != nil {
		return nil, classified{fmt.Errorf("module %q: %w: %w", name, ErrInvalidModule, err), ErrCompile}
	}
	// Instrumenting decodes every function body and bounds what wazero's
	// decoder would otherwise allocate from the module's own counts, so it
	// runs in either interrupt mode; its output is used only when the mode
	// asks for it.
	instrumented, err := wasmbin.Instrument(wasm)
	if err != nil {
		return nil, fmt.Errorf("module %q: %w: %w", name, ErrInvalidModule, err)
	}
	bin := wasm
	switch r.cfg.Interrupt {
	case InterruptInstrument:
		bin = instrumented
	case InterruptLoopsOnly:
		if bin, err = wasmbin.InstrumentLoopsOnly(wasm); err != nil {
			return nil, fmt.Errorf("module %q: %w: %w", name, ErrInvalidModule, err)
		}
	}
	pages := uint32(min(limits.MemoryBytes/pageSize, 65536))
	engine, compiled, err := r.compile(ctx, pages, digest, bin)
	if err != nil {
		return nil, fmt.Errorf("module %q: %w", name, err)
	}
	if err := checkSignatures(compiled, meta); err != nil {
		return nil, fmt.Errorf("module %q: %w: %w", name, ErrInvalidModule, err)
	}
	minMemory, err := checkMemoryMinimum(compiled, limits, hostBytes)
	if err != nil {
		return nil, fmt.Errorf("module %q: %w: %w", name, ErrInvalidModule, err)
	}
	if _, ok := compiled.ExportedFunctions()[abi.ConfigureExport]; !ok && !noConfig(config) {
		return nil, classified{fmt.Errorf("module %q: has configuration but does not export %s", name, abi.ConfigureExport), ErrConfigRejected}
	}
	m := &Module{
		Name: name, Digest: digest, Metadata: meta, Config: config,
		rt: r, engine: engine, compiled: compiled, limits: limits,
		memory: &memoryPool{limit: limits.PoolMemoryBytes}, minMemory: minMemory, hostBytes: hostBytes,
		tokens: make(chan struct{}, limits.Instances),
	}
	for range limits.Instances {
		m.tokens <- struct{}{}
	}
	in, err := m.newInstance(ctx)
	if errors.Is(err, ErrConfigRejected) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("module %q: %w: %w", name, ErrInvalidModule, err)
	}
	m.baseMemory = uint64(in.mod.Memory().Size())
	m.idle = append(m.idle, in)
	return m, nil
}

// normalConfig returns config without surrounding space, or nil when it
// is no configuration: empty or JSON null.
func normalConfig(config []byte) []byte {
	config = bytes.TrimSpace(config)
	if len(config) == 0 || string(config) == "null" {
		return nil
	}
	return config
}

// NoConfig reports whether config, as WithConfig takes it, asks nothing
// of a module: nil, empty, JSON null or an empty JSON object. A module
// that does not export wasp_configure loads with such a configuration.
func NoConfig(config []byte) bool { return noConfig(normalConfig(config)) }

// noConfig reports whether a normalised configuration asks nothing of a
// module: none, or an empty JSON object.
func noConfig(config []byte) bool {
	if config == nil {
		return true
	}
	inner, ok := bytes.CutPrefix(config, []byte("{"))
	inner, ok2 := bytes.CutSuffix(inner, []byte("}"))
	return ok && ok2 && len(bytes.TrimSpace(inner)) == 0
}

// Digest returns "sha256:<hex>" of a module binary.
func Digest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Inspect checks a module binary's structure, ABI marker, metadata, stage
// exports and imports without compiling it, and returns its metadata.
func Inspect(wasm []byte) (*metadata.Metadata, error) {
	mod, err := wasmbin.Parse(wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	if _, ok := mod.Export(abi.MarkerExport); !ok {
		for _, e := range mod.Exports {
			if strings.HasPrefix(e.Name, "wasp_abi_v") {
				return nil, fmt.Errorf("%w: module speaks ABI %s; this host speaks only v%d (export %s)", ErrInvalidModule, strings.TrimPrefix(e.Name, "wasp_abi_"), abi.Version, abi.MarkerExport)
			}
		}
		return nil, fmt.Errorf("%w: no %s export: not a wasp ABI v%d module", ErrInvalidModule, abi.MarkerExport, abi.Version)
	}
	for _, imp := range mod.Imports {
		if imp.Module != "wasi_snapshot_preview1" {
			return nil, fmt.Errorf("%w: imports %s.%s; wasp provides only wasi_snapshot_preview1", ErrInvalidModule, imp.Module, imp.Name)
		}
	}
	payload, ok := mod.CustomSection(abi.MetadataSection)
	if !ok {
		return nil, fmt.Errorf("%w: no %q custom section (build modules with `make modules` or `wasp module build`)", ErrInvalidModule, abi.MetadataSection)
	}
	meta, err := metadata.Parse(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	if meta.MinHostVersion != "" && !versionAtLeast(HostVersion, meta.MinHostVersion) {
		return nil, fmt.Errorf("%w: module %s %s needs wasp %s or newer; this is %s", ErrInvalidModule, meta.Name, meta.Version, meta.MinHostVersion, HostVersion)
	}
	need := []string{abi.BufferExport, "memory"}
	for _, s := range abi.Stages {
		if meta.Implements(s) {
			need = append(need, s.Export())
		}
	}
	for _, name := range need {
		if _, ok := mod.Export(name); !ok {
			return nil, fmt.Errorf("%w: missing export %q", ErrInvalidModule, name)
		}
	}
	if e, ok := mod.Export(abi.ConfigureExport); ok && e.Kind != wasmbin.KindFunc {
		return nil, fmt.Errorf("%w: export %q is not a function", ErrInvalidModule, abi.ConfigureExport)
	}
	return meta, nil
}

// checkMemoryMinimum returns the linear memory, in bytes, that every
// instance of c starts with (its memory's declared minimum), and refuses
// a minimum that, with the host memory hostBytes every instance keeps
// besides, the module's memory pool could not give each of its instances
// at once: a pool that ran out while creating an instance would leave it
// without the memory it declares.
func checkMemoryMinimum(c wazero.CompiledModule, l Limits, hostBytes uint64) (uint64, error) {
	mem, ok := c.ExportedMemories()["memory"]
	if !ok {
		return 0, errors.New(`export "memory" is not a memory`)
	}
	min := uint64(mem.Min()) * pageSize
	if min > l.MemoryBytes {
		return 0, fmt.Errorf("memory minimum of %d pages (%d MiB) is over the memory cap of %d MiB", mem.Min(), min>>20, l.MemoryBytes>>20)
	}
	if need := (min + hostBytes) * uint64(l.Instances); need > l.PoolMemoryBytes {
		return 0, fmt.Errorf("memory minimum of %d pages (%d MiB), and %d MiB of host memory, times %d instances is %d MiB, over the module's memory pool of %d MiB: lower the minimum, or raise the memory limit",
			mem.Min(), min>>20, hostBytes>>20, l.Instances, need>>20, l.PoolMemoryBytes>>20)
	}
	return min, nil
}

func checkSignatures(c wazero.CompiledModule, meta *metadata.Metadata) error {
	fns := c.ExportedFunctions()
	// names renders value types as the text format writes them: (i32, i64).
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(s, ", ") + ")"
	}
	check := func(name string, params, results []api.ValueType) error {
		f, ok := fns[name]
		if !ok {
			return fmt.Errorf("export %q is not a function", name)
		}
		if !equalTypes(f.ParamTypes(), params) || !equalTypes(f.ResultTypes(), results) {
			return fmt.Errorf("export %q has signature %s -> %s, want %s -> %s", name, names(f.ParamTypes()), names(f.ResultTypes()), names(params), names(results))
		}
		return nil
	}
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	if err := check(abi.BufferExport, []api.ValueType{i32}, []api.ValueType{i32}); err != nil {
		return err
	}
	if _, ok := fns[abi.ConfigureExport]; ok {
		if err := check(abi.ConfigureExport, []api.ValueType{i32, i32}, []api.ValueType{i64}); err != nil {
			return err
		}
	}
	for _, s := range abi.Stages {
		if meta.Implements(s) {
			if err := check(s.Export(), []api.ValueType{i32, i32}, []api.ValueType{i64}); err != nil {
				return err
			}
		}
	}
	return nil
}

func equalTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Call runs stage over an encoded input batch and appends the raw output
// to dst. The output is copied out of the guest, so it stays valid after
// the instance is reused. Errors are *CallError.
func (m *Module) Call(ctx context.Context, stage abi.Stage, input, dst []byte) ([]byte, error) {
	if !m.Metadata.Implements(stage) {
		return dst, &CallError{Module: m.Name, Stage: stage, Reason: ReasonNoOutput, Err: fmt.Errorf("module does not implement stage %s", stage)}
	}
	in, err := m.acquire(ctx)
	if err != nil {
		reason := ReasonInstantiate
		if errors.Is(err, errPoolFull) {
			reason = ReasonMemory
		}
		return dst, &CallError{Module: m.Name, Stage: stage, Reason: reason, Err: err}
	}
	m.calls.Add(1)
	out, cerr := m.callRecovering(ctx, in, stage, input, dst)
	m.release(in, cerr != nil)
	if cerr != nil {
		cerr.Module = m.Name
		return dst, cerr
	}
	return out, nil
}

// callRecovering is in.call, with a panic that escapes wazero's own
// recovery (a fault of the host's, not the guest's) turned into a failed
// call, whose instance is then discarded.
func (m *Module) callRecovering(ctx context.Context, in *instance, stage abi.Stage, input, dst []byte) (out []byte, cerr *CallError) {
	defer func() {
		if p := recover(); p != nil {
			out, cerr = dst, in.failure(stage, ReasonTrap, fmt.Errorf("%w: %v", errRecovered, p))
		}
	}()
	return in.call(ctx, stage, input, dst)
}

// String returns the module's name.
func (m *Module) String() string { return m.Name }

// Instances returns the size of the instance pool: how many calls can run
// at once.
func (m *Module) Instances() int { return m.limits.Instances }

// Stats are counters of a module's lifetime.
type Stats struct {
	Calls    uint64 // calls started
	Recycled uint64 // instances replaced after a failure or by the recycle limits
	Shrunk   uint64 // idle instances discarded by Shrink
	// MaxMemoryBytes is the largest linear memory any instance had after a
	// call.
	MaxMemoryBytes uint64
}

// Stats returns the module's counters.
func (m *Module) Stats() Stats {
	return Stats{Calls: m.calls.Load(), Recycled: m.recycled.Load(), Shrunk: m.shrunk.Load(), MaxMemoryBytes: m.maxMemory.Load()}
}

// acquire takes an idle instance or creates one, waiting while the pool is
// at its limit.
func (m *Module) acquire(ctx context.Context) (*instance, error) {
	select {
	case <-m.tokens:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.tokens <- struct{}{}
		return nil, fmt.Errorf("module closed")
	}
	if n := len(m.idle); n > 0 {
		in := m.idle[n-1]
		m.idle = m.idle[:n-1]
		m.mu.Unlock()
		return in, nil
	}
	m.mu.Unlock()
	in, err := m.newInstance(ctx)
	if err != nil {
		m.tokens <- struct{}{}
		return nil, err
	}
	return in, nil
}

// release returns an instance to the pool, or discards it after a failure
// or when it reached a recycle limit.
func (m *Module) release(in *instance, failed bool) {
	size := uint64(in.mod.Memory().Size())
	for {
		old := m.maxMemory.Load()
		if size <= old || m.maxMemory.CompareAndSwap(old, size) {
			break
		}
	}
	discard := failed || in.calls >= m.limits.RecycleAfterCalls || size > m.limits.RecycleAboveBytes
	m.mu.Lock()
	if discard || m.closed {
		m.mu.Unlock()
		m.recycled.Add(1)
		in.close()
	} else {
		m.idle = append(m.idle, in)
		m.mu.Unlock()
	}
	m.tokens <- struct{}{}
}

// Shrink returns the memory of a large batch: it discards every idle
// instance whose linear memory grew past that of a fresh one, and all but
// one of the others, then makes sure one fresh instance is idle, so that
// the next small call does not pay for an instantiation. Wasm memory never
// shrinks, so after a full recompute split across the pool every instance
// keeps the linear memory of the largest call it ran (with the pipeline's
// calls of at most 1024 service ports, about 2 MiB for the default Rust
// builds; three modules × GOMAXPROCS instances) until it is recycled; a
// caller that knows that large batches are rare (the
// sync loop: one full recompute at start-up) calls Shrink after one.
// Calls in flight are not affected: their instances are not idle. The
// error is that of instantiating the fresh instance; the pool then starts
// one on the next call, as after a failure.
func (m *Module) Shrink(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	var drop []*instance
	keep := m.idle[:0]
	for _, in := range m.idle {
		if len(keep) > 0 || uint64(in.mod.Memory().Size()) > m.baseMemory {
			drop = append(drop, in)
			continue
		}
		keep = append(keep, in)
	}
	clear(m.idle[len(keep):])
	m.idle = keep
	need := len(keep) == 0 && len(drop) > 0
	m.mu.Unlock()
	for _, in := range drop {
		in.close()
	}
	m.shrunk.Add(uint64(len(drop)))
	if !need {
		return nil
	}
	// Not under the lock: instantiating runs the guest's initialisation.
	// A token is not needed either: the pool may hold up to Instances
	// idle instances, and this one replaces at least one discarded.
	in, err := m.newInstance(ctx)
	if err != nil {
		return fmt.Errorf("module %q: %w", m.Name, err)
	}
	m.mu.Lock()
	if m.closed || len(m.idle) >= m.limits.Instances {
		m.mu.Unlock()
		in.close()
		return nil
	}
	m.idle = append(m.idle, in)
	m.mu.Unlock()
	return nil
}

// Close discards every instance. Calls in flight finish first.
func (m *Module) Close() {
	m.mu.Lock()
	m.closed = true
	idle := m.idle
	m.idle = nil
	m.mu.Unlock()
	for _, in := range idle {
		in.close()
	}
}
