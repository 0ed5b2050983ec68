package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasp-proxy/wasp/host/runtime/internal/wasmbin"
)

// Interrupt selects how a call past its deadline is stopped.
type Interrupt int

const (
	// InterruptInstrument (the default) rewrites the module so that its
	// code, loops and call trees alike, counts down a budget and, when it
	// runs out, calls back into the host, which stops the call if its
	// deadline has passed (package wasmbin).
	InterruptInstrument Interrupt = iota
	// InterruptCloseOnContextDone uses wazero's WithCloseOnContextDone,
	// which checks in Go at every loop back-edge. Slower; kept for
	// comparison and as a fallback for modules the instrumenter refuses.
	InterruptCloseOnContextDone
	// InterruptLoopsOnly instruments modules with checks before backward
	// branches only, as wasp did before it bounded code without loops:
	// a baseline for benchmarks. Never use it to run modules you do not
	// trust: a call tree without loops runs past any deadline.
	InterruptLoopsOnly
)

// Config configures a Runtime.
type Config struct {
	// CacheDir, if set, keeps compiled machine code on disk across
	// restarts, keyed by module content, in a subdirectory named after
	// the wasp build. It must be writable by wasp's user alone (New
	// refuses it otherwise): what is read from there runs as native code.
	// Optional.
	CacheDir string
	// Interrupt selects the deadline mechanism. Optional.
	Interrupt Interrupt
	// Compiled, if set, is told about every compilation a Load asks for:
	// cached reports that no machine code was compiled, as this runtime
	// had compiled the module before or, with CacheDir, found it there.
	// For metrics; optional.
	Compiled func(cached bool)
	// Compile bounds the cost of compiling a module. Optional.
	Compile CompileLimits
	// IsolateCompile compiles every module first in a child process, the
	// running executable started again, which is killed if it runs past
	// Compile.Timeout or Compile.ChildMemory; this process then loads the
	// machine code from the compilation cache (CacheDir, or a temporary
	// directory removed by Close; without either, compilations run in
	// this process, bounded in time only). Optional.
	IsolateCompile bool
}

// Runtime compiles and runs modules. It is safe for concurrent use.
type Runtime struct {
	cfg   Config
	cache wazero.CompilationCache

	mu sync.Mutex
	// engines holds one wazero runtime per memory cap, since wazero sets
	// the cap per runtime. They share the compilation cache.
	engines map[uint32]wazero.Runtime
	// compiled memoises compiled modules by engine and digest.
	compiled map[compiledKey]wazero.CompiledModule
	closed   bool

	abandoned compilations
	// cacheDir is where the compilation cache is, if on disk: CacheDir,
	// or tmpDir.
	cacheDir, tmpDir string
	// isolate is whether to compile in a child process: IsolateCompile,
	// with a cacheDir for the child to write to.
	isolate bool
	// children counts the compile children started.
	children atomic.Int64
}

type compiledKey struct {
	pages  uint32
	digest string
}

// New returns a Runtime. Close releases it.
func New(cfg Config) (*Runtime, error) {
	cfg.Compile = cfg.Compile.withDefaults()
	r := &Runtime{cfg: cfg, engines: map[uint32]wazero.Runtime{}, compiled: map[compiledKey]wazero.CompiledModule{}}
	if cfg.CacheDir != "" {
		dir, err := compiledCacheDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("compilation cache %q: %w", cfg.CacheDir, err)
		}
		r.cacheDir = dir
	} else if cfg.IsolateCompile {
		// Without a directory for the child to write to (a read-only
		// root file system), compile in this process, bounded in time.
		if dir, err := os.MkdirTemp("", "wasp-compiled-"); err == nil {
			r.cacheDir, r.tmpDir = dir, dir
		}
	}
	r.isolate = cfg.IsolateCompile && r.cacheDir != ""
	if r.cacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(r.cacheDir)
		if err != nil {
			if r.tmpDir != "" {
				_ = os.RemoveAll(r.tmpDir)
			}
			return nil, fmt.Errorf("compilation cache %q: %w", r.cacheDir, err)
		}
		r.cache = c
	} else {
		r.cache = wazero.NewCompilationCache()
	}
	return r, nil
}

// CacheDir returns Config.CacheDir: where the runtime keeps compiled
// modules, and beside which module sources may keep what they download.
func (r *Runtime) CacheDir() string { return r.cfg.CacheDir }

// engine returns the wazero runtime for a memory cap of pages 64 KiB pages.
func (r *Runtime) engine(ctx context.Context, pages uint32) (wazero.Runtime, error) {
	if r.closed {
		return nil, errors.New("runtime closed")
	}
	if e, ok := r.engines[pages]; ok {
		return e, nil
	}
	cfg := wazero.NewRuntimeConfig().
		WithCompilationCache(r.cache).
		WithMemoryLimitPages(pages).
		WithCloseOnContextDone(r.cfg.Interrupt == InterruptCloseOnContextDone)
	e := wazero.NewRuntimeWithConfig(ctx, cfg)
	// WASI with wazero's defaults: no preopened directories, no environment,
	// no arguments, a fake clock and deterministic random bytes. Go guests
	// need it to start; nothing in it reaches the node.
	if err := instantiateWASI(ctx, e); err != nil {
		_ = e.Close(ctx)
		return nil, fmt.Errorf("instantiate WASI: %w", err)
	}
	// The yield function instrumented modules import. Modules may not
	// import it themselves: Inspect allows only WASI imports, and runs on
	// the binary before it is instrumented.
	_, err := e.NewHostModuleBuilder(wasmbin.YieldModule).NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(yield), nil, nil).
		Export(wasmbin.YieldFunc).
		Instantiate(ctx)
	if err != nil {
		_ = e.Close(ctx)
		return nil, fmt.Errorf("instantiate %s: %w", wasmbin.YieldModule, err)
	}
	r.engines[pages] = e
	return e, nil
}

// compile returns the compiled form of the (already validated and, if
// configured, instrumented) binary.
func (r *Runtime) compile(ctx context.Context, pages uint32, digest string, bin []byte) (wazero.Runtime, wazero.CompiledModule, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.engine(ctx, pages)
	if err != nil {
		return nil, nil, err
	}
	key := compiledKey{pages, digest}
	if c, ok := r.compiled[key]; ok {
		r.observeCompiled(true)
		return e, c, nil
	}
	files := r.cachedFiles()
	c, err := r.compileWithin(ctx, e, bin, r.cfg.Compile.Timeout)
	if err != nil {
		return nil, nil, classified{fmt.Errorf("%w: compile: %w", ErrInvalidModule, err), ErrCompile}
	}
	r.compiled[key] = c
	r.observeCompiled(files >= 0 && r.cachedFiles() == files)
	return e, c, nil
}

// Close releases every engine and compiled module. Modules loaded from the
// runtime must not be used afterwards.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	var errs []error
	for _, e := range r.engines {
		errs = append(errs, e.Close(ctx))
	}
	errs = append(errs, r.cache.Close(ctx))
	if r.tmpDir != "" {
		errs = append(errs, os.RemoveAll(r.tmpDir))
	}
	return errors.Join(errs...)
}
