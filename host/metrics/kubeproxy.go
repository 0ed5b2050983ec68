package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/healthcheck"
	"github.com/wasp-proxy/wasp/host/proxy"
)

// kubeProxyNamespace is upstream's metrics subsystem, which prefixes every
// series of kubeProxy.
const kubeProxyNamespace = "kubeproxy"

// Label names and values of upstream's series.
const (
	labelIPFamily      = "ip_family"
	labelTrafficPolicy = "traffic_policy"
	labelCode          = "code"

	policyInternal = "internal"
	policyExternal = "external"
)

var (
	// syncBuckets are upstream's sync and conntrack reconciler duration
	// buckets: 1 ms to about 16 s, doubling.
	syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)
	// networkProgrammingBuckets are upstream's: 0.25 and 0.5 s, every
	// second to 59 s, every 5 s to 115 s, every 30 s to 300 s.
	networkProgrammingBuckets = concat(
		prometheus.LinearBuckets(0.25, 0.25, 2),
		prometheus.LinearBuckets(1, 1, 59),
		prometheus.LinearBuckets(60, 5, 12),
		prometheus.LinearBuckets(120, 30, 7),
	)
)

func concat(bs ...[]float64) []float64 {
	var out []float64
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// kubeProxy holds upstream kube-proxy's series (pkg/proxy/metrics), with
// their names, help, types, labels and buckets.
type kubeProxy struct {
	syncDuration, syncFullDuration, syncPartialDuration *prometheus.HistogramVec
	lastSynced, lastQueued                              *prometheus.GaugeVec
	networkProgramming                                  *prometheus.HistogramVec
	endpointChangesPending, serviceChangesPending       prometheus.Gauge
	endpointChangesTotal, serviceChangesTotal           prometheus.Counter
	noLocalEndpoints                                    *prometheus.GaugeVec
	healthzTotal, livezTotal                            *prometheus.CounterVec
	conntrackDuration                                   *prometheus.HistogramVec
	conntrackDeleted                                    *prometheus.CounterVec
}

func newKubeProxy(reg prometheus.Registerer) kubeProxy {
	f := factory{reg: reg, namespace: kubeProxyNamespace}
	family := []string{labelIPFamily}
	return kubeProxy{
		syncDuration:        f.histogram("sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", syncBuckets, family...),
		syncFullDuration:    f.histogram("sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs", syncBuckets, family...),
		syncPartialDuration: f.histogram("sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs", syncBuckets, family...),
		lastSynced:          f.gauge("sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced", family...),
		lastQueued:          f.gauge("sync_proxy_rules_last_queued_timestamp_seconds", "The last time a sync of proxy rules was queued", family...),
		networkProgramming:  f.histogram("network_programming_duration_seconds", "In Cluster Network Programming Latency in seconds", networkProgrammingBuckets, family...),
		endpointChangesPending: f.gauge("sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes").
			WithLabelValues(),
		endpointChangesTotal: f.counter("sync_proxy_rules_endpoint_changes_total", "Cumulative proxy rules Endpoint changes").
			WithLabelValues(),
		serviceChangesPending: f.gauge("sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes").
			WithLabelValues(),
		serviceChangesTotal: f.counter("sync_proxy_rules_service_changes_total", "Cumulative proxy rules Service changes").
			WithLabelValues(),
		noLocalEndpoints:  f.gauge("sync_proxy_rules_no_local_endpoints_total", "Number of services with a Local traffic policy and no endpoints", labelIPFamily, labelTrafficPolicy),
		healthzTotal:      f.counter("proxy_healthz_total", "Cumulative proxy healthz HTTP status", labelCode),
		livezTotal:        f.counter("proxy_livez_total", "Cumulative proxy livez HTTP status", labelCode),
		conntrackDuration: f.histogram("conntrack_reconciler_sync_duration_seconds", "ReconcileConntrackFlowsLatency latency in seconds", syncBuckets, family...),
		conntrackDeleted:  f.counter("conntrack_reconciler_deleted_entries_total", "Cumulative conntrack flows deleted by conntrack reconciler", family...),
	}
}

// initFamily exports the series of a family at zero.
func (k *kubeProxy) initFamily(family string) {
	for _, h := range []*prometheus.HistogramVec{k.syncDuration, k.syncFullDuration, k.syncPartialDuration, k.networkProgramming, k.conntrackDuration} {
		h.WithLabelValues(family)
	}
	for _, c := range []*prometheus.CounterVec{k.conntrackDeleted} {
		c.WithLabelValues(family)
	}
	for _, g := range []*prometheus.GaugeVec{k.lastSynced, k.lastQueued} {
		g.WithLabelValues(family)
	}
	for _, p := range []string{policyInternal, policyExternal} {
		k.noLocalEndpoints.WithLabelValues(family, p)
	}
}

// Proxy returns the hook of proxy.Opts.Metrics.
func (m *Metrics) Proxy() proxy.Metrics { return proxyHook{m} }

type proxyHook struct{ m *Metrics }

var _ proxy.Metrics = proxyHook{}

func (h proxyHook) ServiceEvent()       { h.m.serviceChangesTotal.Inc() }
func (h proxyHook) EndpointSliceEvent() { h.m.endpointChangesTotal.Inc() }

func (h proxyHook) PendingChanges(services, endpointSlices int) {
	h.m.serviceChangesPending.Set(float64(services))
	h.m.endpointChangesPending.Set(float64(endpointSlices))
}

func (h proxyHook) QueuedUpdate(f backends.Family) {
	h.m.lastQueued.WithLabelValues(familyLabel(f)).SetToCurrentTime()
}

// DriftChecked records a drift check of a family's dataplane.
func (h proxyHook) DriftChecked(r *proxy.DriftReport) {
	m, family := h.m, familyLabel(r.Family)
	m.driftCheckDuration.WithLabelValues(family).Observe(r.Duration.Seconds())
	switch {
	case r.Err != nil:
		m.driftChecks.WithLabelValues(family, driftFailed).Inc()
	case r.Drift.Empty():
		m.driftChecks.WithLabelValues(family, driftClean).Inc()
	default:
		m.driftChecks.WithLabelValues(family, driftDrifted).Inc()
		for object, n := range r.Drift.Objects {
			m.driftRepairs.WithLabelValues(family, object).Inc()
			m.driftObjects.WithLabelValues(family, object).Add(float64(n))
		}
	}
}

// Synced records a sync. One sync programs every family, so its duration
// is observed under each family's label; a sync that failed before any
// backend ran counts for every family New was given.
func (h proxyHook) Synced(r *proxy.SyncReport) {
	m := h.m
	// observe records the sync's duration under f; by the full or partial
	// kind of the sync of f's backend when it said (iptables), else of the
	// proxy's sync.
	observe := func(f backends.Family, kind backends.SyncKind) {
		family := familyLabel(f)
		m.syncDuration.WithLabelValues(family).Observe(r.Duration.Seconds())
		byType := m.syncPartialDuration
		if kind == backends.SyncFull || (kind == backends.SyncKindUnknown && r.Full) {
			byType = m.syncFullDuration
		}
		byType.WithLabelValues(family).Observe(r.Duration.Seconds())
	}
	ok := r.Err == nil
	if !ok {
		for _, f := range m.families {
			observe(f, backends.SyncKindUnknown)
		}
	}
	for i := range r.Families {
		fs := &r.Families[i]
		family := familyLabel(fs.Family)
		observe(fs.Family, fs.Result.Kind)
		m.backendSynced(family, &fs.Result, fs.Programmed())
		m.noLocalEndpoints.WithLabelValues(family, policyInternal).Set(float64(fs.NoLocalInternal))
		m.noLocalEndpoints.WithLabelValues(family, policyExternal).Set(float64(fs.NoLocalExternal))
		m.servicePorts.WithLabelValues(family).Set(float64(fs.ServicePorts))
		if !fs.Programmed() {
			ok = false
			m.syncFailed(family)
			continue
		}
		if fs.Err != nil {
			m.housekeepingFailures.WithLabelValues(family).Inc()
		}
		m.lastSynced.WithLabelValues(family).SetToCurrentTime()
		for _, d := range fs.NetworkProgramming {
			m.networkProgramming.WithLabelValues(family).Observe(d.Seconds())
		}
	}
	m.syncs.WithLabelValues(syncType(r.Full), syncResult(ok)).Inc()
	m.evaluated.Set(float64(r.Evaluated))
}

// Health returns the hook of healthcheck.ProxyOpts.Observer.
func (m *Metrics) Health() healthcheck.Observer { return healthHook{m} }

type healthHook struct{ m *Metrics }

var _ healthcheck.Observer = healthHook{}

func (h healthHook) Healthz(code int) { h.m.healthzTotal.WithLabelValues(strconv.Itoa(code)).Inc() }
func (h healthHook) Livez(code int)   { h.m.livezTotal.WithLabelValues(strconv.Itoa(code)).Inc() }

// ReconcileObserver is the hook Conntrack returns: the method of
// backends/conntrack's Observer, which this package does not import (host/
// never imports a backend; cmd/wasp wires them).
type ReconcileObserver interface {
	Reconciled(family backends.Family, d time.Duration, deleted uint64, err error)
}

// Conntrack returns the hook of conntrack.Opts.Observer.
func (m *Metrics) Conntrack() ReconcileObserver { return conntrackHook{m} }

type conntrackHook struct{ m *Metrics }

func (h conntrackHook) Reconciled(f backends.Family, d time.Duration, deleted uint64, err error) {
	family := familyLabel(f)
	h.m.conntrackDuration.WithLabelValues(family).Observe(d.Seconds())
	h.m.conntrackDeleted.WithLabelValues(family).Add(float64(deleted))
	if err != nil {
		h.m.conntrackFailures.WithLabelValues(family).Inc()
	}
}
