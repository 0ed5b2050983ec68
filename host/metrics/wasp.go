package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// waspNamespace prefixes wasp's own series.
const waspNamespace = "wasp"

// Label names and values of wasp's series.
const (
	labelModule  = "module"
	labelStage   = "stage"
	labelReason  = "reason"
	labelSource  = "source"
	labelName    = "name"
	labelVersion = "version"
	labelDigest  = "digest"
	labelType    = "type"
	labelResult  = "result"
	labelTrigger = "trigger"
	labelObject  = "object"

	// reasonOther is the reason of a failure that is no
	// *runtime.CallError (the input could not be encoded, the sync was
	// stopped).
	reasonOther = "other"
	// reasonNotIsolated is the reason of a port that was in a failed call
	// but was not told apart from the ports that caused it
	// (pipeline.ErrNotIsolated).
	reasonNotIsolated = "not-isolated"
)

// callBuckets are the module call duration buckets: 100 µs to about 3.3 s,
// doubling; the default call timeout is 2 s.
var callBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)

// fallbackSources are the pipeline sources that are fallbacks.
var fallbackSources = []pipeline.Source{pipeline.SourceLastGood, pipeline.SourceBuiltin}

// wasp holds wasp's own series.
type wasp struct {
	moduleCalls, moduleCallFailures, modulePortFailures *prometheus.CounterVec
	moduleCallDuration                                  *prometheus.HistogramVec
	fallbackPorts                                       *prometheus.GaugeVec
	moduleInfo                                          *prometheus.GaugeVec
	syncs                                               *prometheus.CounterVec
	evaluated                                           prometheus.Gauge
	servicePorts                                        *prometheus.GaugeVec
	housekeepingFailures, conntrackFailures             *prometheus.CounterVec
	moduleReloads                                       *prometheus.CounterVec
	driftChecks, driftRepairs, driftObjects             *prometheus.CounterVec
	driftCheckDuration                                  *prometheus.HistogramVec
}

// driftObjects are the kinds of object a drift check compares.
var driftObjects = []string{backends.DriftTable, backends.DriftChain, backends.DriftRule, backends.DriftSet, backends.DriftElement}

// Results of a drift check.
const (
	driftClean   = "clean"
	driftDrifted = "drifted"
	driftFailed  = "failed"
)

func newWasp(reg prometheus.Registerer) wasp {
	f := factory{reg: reg, namespace: waspNamespace}
	w := wasp{
		moduleReloads: f.counter("module_reloads_total",
			"Loads of a new module chain without a restart, by trigger (files: a module file changed; catalog: the ServiceProxyModules chosen for the node) and result (swapped, unchanged, failed)", labelTrigger, labelResult),
		moduleCalls: f.counter("module_calls_total",
			"Calls into a stage's module, each part of a split or bisected batch counted", labelModule, labelStage),
		moduleCallDuration: f.histogram("module_call_duration_seconds",
			"Duration of calls into a stage's module, encoding and decoding included", callBuckets, labelModule, labelStage),
		moduleCallFailures: f.counter("module_call_failures_total",
			"Calls into a stage's module that failed as a whole, by reason", labelModule, labelStage, labelReason),
		modulePortFailures: f.counter("module_service_port_failures_total",
			"Service ports a stage's module failed for, which then fell back to their last good decision or the builtin semantics, by reason", labelModule, labelStage, labelReason),
		fallbackPorts: f.gauge("fallback_service_ports",
			"Service ports served by a fallback because a stage failed for them, by stage and fallback (last-good or builtin)", labelStage, labelSource),
		moduleInfo: f.gauge("module_info",
			"The module of each stage: its source, declared name and version, and sha256 digest; always 1", labelStage, labelModule, labelName, labelVersion, labelDigest),
		syncs: f.counter("syncs_total",
			"Syncs, by type (full: every service port evaluated; partial: the changed Services' ports) and result", labelType, labelResult),
		evaluated: f.gauge("sync_evaluated_service_ports",
			"Service ports the last sync evaluated").WithLabelValues(),
		servicePorts: f.gauge("service_ports",
			"Service ports in the last State given to the family's backend", labelIPFamily),
		housekeepingFailures: f.counter("sync_housekeeping_failures_total",
			"Backend syncs that programmed the dataplane but failed in the work after it, such as the conntrack cleanup", labelIPFamily),
		conntrackFailures: f.counter("conntrack_reconciler_failures_total",
			"Conntrack cleanups that failed", labelIPFamily),
		driftChecks: f.counter("dataplane_drift_checks_total",
			"Checks of the family's dataplane against what wasp programmed, by result (clean, drifted, failed)", labelIPFamily, labelResult),
		driftRepairs: f.counter("dataplane_drift_repairs_total",
			"Drift checks that found objects of the kind changed behind wasp's back, each followed by a full rewrite of the family's dataplane", labelIPFamily, labelObject),
		driftObjects: f.counter("dataplane_drifted_objects_total",
			"Objects drift checks found missing, changed or not programmed by wasp, by kind", labelIPFamily, labelObject),
		driftCheckDuration: f.histogram("dataplane_drift_check_duration_seconds",
			"Duration of the drift checks of the family's dataplane", prometheus.ExponentialBuckets(0.0001, 2, 18), labelIPFamily),
	}
	for _, t := range []bool{true, false} {
		for _, ok := range []bool{true, false} {
			w.syncs.WithLabelValues(syncType(t), syncResult(ok))
		}
	}
	for _, stage := range abi.Stages {
		for _, src := range fallbackSources {
			w.fallbackPorts.WithLabelValues(stage.String(), src.String())
		}
	}
	return w
}

// initFamily exports the series of a family at zero.
func (w *wasp) initFamily(family string) {
	for _, c := range []*prometheus.CounterVec{w.housekeepingFailures, w.conntrackFailures} {
		c.WithLabelValues(family)
	}
	w.servicePorts.WithLabelValues(family)
	for _, r := range []string{driftClean, driftDrifted, driftFailed} {
		w.driftChecks.WithLabelValues(family, r)
	}
	for _, o := range driftObjects {
		w.driftRepairs.WithLabelValues(family, o)
		w.driftObjects.WithLabelValues(family, o)
	}
	w.driftCheckDuration.WithLabelValues(family)
}

func syncType(full bool) string {
	if full {
		return "full"
	}
	return "partial"
}

func syncResult(ok bool) string {
	if ok {
		return "success"
	}
	return "failure"
}

// SetChain records the modules of a loaded chain in wasp_module_info,
// replacing those of the chain before, and exports their call and failure
// series at zero (a stage that runs its builtin module natively has only
// the first: it makes no module calls). Call it after every load.
func (m *Metrics) SetChain(c *chain.Chain) {
	m.moduleInfo.Reset()
	for _, stage := range abi.Stages {
		if c.Digest(stage) == "" {
			continue // not loaded
		}
		var name, version string
		if md := c.Metadata(stage); md != nil {
			name, version = md.Name, md.Version
		}
		s, mod := stage.String(), c.Name(stage)
		m.moduleInfo.WithLabelValues(s, mod, name, version, c.Digest(stage)).Set(1)
		if c.Native(stage) {
			continue // it makes no module calls
		}
		m.moduleCalls.WithLabelValues(mod, s)
		m.moduleCallDuration.WithLabelValues(mod, s)
		for _, r := range runtime.Reasons {
			if r != runtime.ReasonModuleError { // a per-port reason only
				m.moduleCallFailures.WithLabelValues(mod, s, string(r))
			}
			m.modulePortFailures.WithLabelValues(mod, s, string(r))
		}
		m.modulePortFailures.WithLabelValues(mod, s, reasonNotIsolated)
	}
}

// Pipeline returns the hook of pipeline.Options.Observer.
func (m *Metrics) Pipeline() pipeline.Observer { return pipelineHook{m} }

type pipelineHook struct{ m *Metrics }

var _ pipeline.Observer = pipelineHook{}

func (h pipelineHook) Call(module string, stage abi.Stage, _ int, d time.Duration, err error) {
	s := stage.String()
	h.m.moduleCalls.WithLabelValues(module, s).Inc()
	h.m.moduleCallDuration.WithLabelValues(module, s).Observe(d.Seconds())
	if err != nil {
		h.m.moduleCallFailures.WithLabelValues(module, s, reason(err)).Inc()
	}
}

func (h pipelineHook) PortFailed(module string, stage abi.Stage, _ string, _ pipeline.Source, err error) {
	h.m.modulePortFailures.WithLabelValues(module, stage.String(), reason(err)).Inc()
}

func (h pipelineHook) Fallbacks(n *pipeline.Fallbacks) {
	for _, stage := range abi.Stages {
		for _, src := range fallbackSources {
			h.m.fallbackPorts.WithLabelValues(stage.String(), src.String()).Set(float64(n[stage][src]))
		}
	}
}

// reason returns the reason label of a module failure.
func reason(err error) string {
	if errors.Is(err, pipeline.ErrNotIsolated) {
		return reasonNotIsolated
	}
	if r := runtime.ReasonOf(err); r != "" {
		return string(r)
	}
	return reasonOther
}

// factory creates vectors in a namespace and registers them.
type factory struct {
	reg       prometheus.Registerer
	namespace string
}

func (f factory) counter(name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: f.namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(v)
	return v
}

func (f factory) gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: f.namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(v)
	return v
}

func (f factory) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: f.namespace, Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(v)
	return v
}

// Module reload triggers and results, for ModuleReload.
const (
	ReloadFiles   = "files"
	ReloadCatalog = "catalog"

	ReloadSwapped   = "swapped"
	ReloadUnchanged = "unchanged"
	ReloadFailed    = "failed"
)

// ModuleReload counts a load of a new module chain: trigger is
// ReloadFiles or ReloadCatalog, result ReloadSwapped, ReloadUnchanged or
// ReloadFailed.
func (m *Metrics) ModuleReload(trigger, result string) {
	m.moduleReloads.WithLabelValues(trigger, result).Inc()
}
