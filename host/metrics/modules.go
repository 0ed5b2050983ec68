package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/oci"
)

// Label names and values of the module source series.
const (
	labelKind = "kind"

	// Cache kinds: host/oci's blob cache, the runtime's compiled code.
	cacheBlob     = "blob"
	cacheCompiled = "compiled"

	cacheHit  = "hit"
	cacheMiss = "miss"
)

// moduleSources holds the series of where modules come from: pulls,
// caches and loads.
type moduleSources struct {
	moduleFetches, moduleCacheRequests, moduleLoads *prometheus.CounterVec
}

func newModuleSources(reg prometheus.Registerer) moduleSources {
	f := factory{reg: reg, namespace: waspNamespace}
	s := moduleSources{
		moduleFetches: f.counter("module_fetches_total",
			"Pulls of oci:// modules, by result: pulled, cached (every blob from the node-local cache), or why it failed", labelResult),
		moduleCacheRequests: f.counter("module_cache_requests_total",
			"Look-ups in the module caches, by kind (blob: a pulled module's blobs; compiled: a module's machine code) and result (hit, miss)", labelKind, labelResult),
		moduleLoads: f.counter("module_loads_total",
			"Loads of a stage's module, by result: ok, or the class of the failure", labelStage, labelResult),
	}
	for _, r := range oci.PullResults {
		s.moduleFetches.WithLabelValues(string(r))
	}
	for _, kind := range []string{cacheBlob, cacheCompiled} {
		for _, hit := range []bool{true, false} {
			s.moduleCacheRequests.WithLabelValues(kind, cacheResult(hit))
		}
	}
	for _, stage := range abi.Stages {
		for _, r := range chain.LoadResults {
			s.moduleLoads.WithLabelValues(stage.String(), string(r))
		}
	}
	return s
}

func cacheResult(hit bool) string {
	if hit {
		return cacheHit
	}
	return cacheMiss
}

// Modules returns the hook of chain.Loader.Observer (and through it of
// oci.Options.Observer).
func (m *Metrics) Modules() chain.Observer { return modulesHook{m} }

type modulesHook struct{ m *Metrics }

var _ chain.Observer = modulesHook{}

func (h modulesHook) Pulled(r oci.PullResult) {
	h.m.moduleFetches.WithLabelValues(string(r)).Inc()
}

func (h modulesHook) BlobCache(hit bool) {
	h.m.moduleCacheRequests.WithLabelValues(cacheBlob, cacheResult(hit)).Inc()
}

func (h modulesHook) Loaded(stage abi.Stage, r chain.LoadResult) {
	h.m.moduleLoads.WithLabelValues(stage.String(), string(r)).Inc()
}

// ModuleCompiled counts a compilation of a module: cached if no machine
// code was compiled. It is runtime.Config.Compiled's hook.
func (m *Metrics) ModuleCompiled(cached bool) {
	m.moduleCacheRequests.WithLabelValues(cacheCompiled, cacheResult(cached)).Inc()
}
