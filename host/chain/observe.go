package chain

import (
	"errors"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// Loader loads chains into a runtime, as Load, and tells an Observer
// about them.
type Loader struct {
	Runtime *runtime.Runtime
	// Observer is told about the pulls of oci:// sources and the load of
	// every stage's module; optional.
	Observer Observer
	// NativeBuiltins runs each stage whose module is its builtin default
	// (modules.Default), without a configuration, on the native reference
	// implementation (host/reference, the oracle the builtin modules are
	// tested against) instead of compiling and instantiating the module:
	// its Chain.Modules entry stays nil, and the stage costs no machine
	// code, linear memory or decoded module. Optional; wasp run sets it,
	// and whatever wants the builtin modules as Wasm (benchmarks of the
	// chain, differential tests) leaves it unset.
	NativeBuiltins bool
	// Workers, if set, runs each module that does not run natively in a
	// worker process of its own (package worker), whose runtime it
	// configures, rather than in Runtime, so that no module code runs in
	// this process: its Chain.Workers entry is set instead of its
	// Chain.Modules one. Runtime then serves for its CacheDir only, which
	// Workers should name too. Optional; wasp run sets it unless told to
	// run modules in its own process.
	Workers *runtime.Config
}

// Observer is told about module loads, for metrics. Its methods are
// called on the goroutine of the Load that reports, and must be quick.
type Observer interface {
	// oci.Observer is told about the pulls of oci:// sources.
	oci.Observer
	// Loaded reports the load of a stage's module: LoadOK, or the class
	// of its error. A chain whose load fails at a stage does not load the
	// stages after it.
	Loaded(stage abi.Stage, result LoadResult)
}

// LoadResult is the outcome of loading a stage's module, a closed set for
// a metric label.
type LoadResult string

const (
	// LoadOK: the module loaded.
	LoadOK LoadResult = "ok"
	// LoadFetch: its source could not be read: a file, a registry (see
	// oci.PullResult for why), an unknown builtin.
	LoadFetch LoadResult = "fetch"
	// LoadSignature: an oci:// module without a trusted signature.
	LoadSignature LoadResult = "signature"
	// LoadInvalidModule: not a wasp module: a bad binary, the wrong ABI,
	// missing or invalid metadata or exports, forbidden imports, failing
	// initialisation, or another stage than the one it is assigned to
	// (runtime.ErrInvalidModule).
	LoadInvalidModule LoadResult = "invalid-module"
	// LoadCompile: the module did not compile to machine code
	// (runtime.ErrCompile).
	LoadCompile LoadResult = "compile"
	// LoadConfigRejected: the module refused its configuration
	// (runtime.ErrConfigRejected).
	LoadConfigRejected LoadResult = "config-rejected"
	// LoadOther: any other failure, such as a load cancelled by shutdown.
	LoadOther LoadResult = "other"
)

// LoadResults lists every LoadResult, for exporting metric series at
// zero.
var LoadResults = []LoadResult{LoadOK, LoadFetch, LoadSignature, LoadInvalidModule, LoadCompile, LoadConfigRejected, LoadOther}

// errFetch classifies the errors of reading a module source.
var errFetch = errors.New("fetch")

// LoadResultOf returns the outcome of a stage's load that failed with err
// (LoadOK for nil).
func LoadResultOf(err error) LoadResult {
	switch {
	case err == nil:
		return LoadOK
	case oci.PullResultOf(nil, err) == oci.PullSignature:
		return LoadSignature
	case errors.Is(err, errFetch):
		return LoadFetch
	case errors.Is(err, runtime.ErrConfigRejected):
		return LoadConfigRejected
	case errors.Is(err, runtime.ErrCompile):
		return LoadCompile
	case errors.Is(err, runtime.ErrInvalidModule):
		return LoadInvalidModule
	}
	return LoadOther
}

// loaded tells the Observer, if any, of a stage's load.
func (l Loader) loaded(stage abi.Stage, err error) {
	if l.Observer != nil {
		l.Observer.Loaded(stage, LoadResultOf(err))
	}
}

// classified is err, which errors.Is also finds to be class.
type classified struct{ err, class error }

func (c classified) Error() string   { return c.err.Error() }
func (c classified) Unwrap() []error { return []error{c.err, c.class} }
