package metrics

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasp-proxy/wasp/backends"
)

// Mode is the dataplane whose upstream series a Metrics exports. Upstream
// names its sync failure series after its proxy mode, and only its
// iptables mode counts rules; dashboards and alerts written for a mode
// look for that mode's names.
type Mode string

// The modes, as kube-proxy's configuration spells them.
const (
	// NFTables exports kubeproxy_sync_proxy_rules_nftables_sync_failures_total
	// and ..._nftables_cleanup_failures_total.
	NFTables Mode = "nftables"
	// IPTables exports kubeproxy_sync_proxy_rules_iptables_restore_failures_total,
	// ..._iptables_partial_restore_failures_total, and the rule gauges
	// ..._iptables_total and ..._iptables_last by table.
	IPTables Mode = "iptables"
)

// Options configure a Metrics.
type Options struct {
	// Mode is the dataplane. Optional; default NFTables.
	Mode Mode
	// Families are the IP families the proxy serves: their series are
	// exported from the start, at zero, rather than from their first
	// event. Optional.
	Families []backends.Family
}

// iptablesTables are the tables the iptables mode's rule gauges count.
var iptablesTables = []string{"filter", "nat"}

const labelTable = "table"

// modeSeries are the series of one mode; those of the other modes are nil.
type modeSeries struct {
	mode                                          Mode
	nftablesSyncFailures, nftablesCleanupFailures *prometheus.CounterVec
	restoreFailures, partialRestoreFailures       *prometheus.CounterVec
	rulesTotal, rulesLast                         *prometheus.GaugeVec

	mu sync.Mutex
	// full holds, by family, whether the backend's last Sync was a full
	// one, as BackendSynced was told, until the proxy's report takes it.
	full map[backends.Family]bool
}

func newModeSeries(reg prometheus.Registerer, mode Mode) (*modeSeries, error) {
	f := factory{reg: reg, namespace: kubeProxyNamespace}
	family := []string{labelIPFamily}
	s := &modeSeries{mode: mode, full: map[backends.Family]bool{}}
	switch mode {
	case NFTables, "":
		s.mode = NFTables
		s.nftablesSyncFailures = f.counter("sync_proxy_rules_nftables_sync_failures_total", "Cumulative proxy nftables sync failures", family...)
		s.nftablesCleanupFailures = f.counter("sync_proxy_rules_nftables_cleanup_failures_total", "Cumulative proxy nftables cleanup failures", family...)
	case IPTables:
		s.restoreFailures = f.counter("sync_proxy_rules_iptables_restore_failures_total", "Cumulative proxy iptables restore failures", family...)
		s.partialRestoreFailures = f.counter("sync_proxy_rules_iptables_partial_restore_failures_total", "Cumulative proxy iptables partial restore failures", family...)
		s.rulesTotal = f.gauge("sync_proxy_rules_iptables_total", "Total number of iptables rules owned by kube-proxy", labelIPFamily, labelTable)
		s.rulesLast = f.gauge("sync_proxy_rules_iptables_last", "Number of iptables rules written by kube-proxy in last sync", labelIPFamily, labelTable)
	default:
		return nil, fmt.Errorf("metrics: mode %q: want %s or %s", mode, NFTables, IPTables)
	}
	return s, nil
}

// initFamily exports the mode's series of a family at zero.
func (s *modeSeries) initFamily(family string) {
	for _, c := range []*prometheus.CounterVec{s.nftablesSyncFailures, s.nftablesCleanupFailures, s.restoreFailures, s.partialRestoreFailures} {
		if c != nil {
			c.WithLabelValues(family)
		}
	}
	for _, g := range []*prometheus.GaugeVec{s.rulesTotal, s.rulesLast} {
		if g == nil {
			continue
		}
		for _, t := range iptablesTables {
			g.WithLabelValues(family, t)
		}
	}
}

// syncFailed counts a family's sync that did not program it, in the
// nftables mode; the iptables mode counts its restore failures from
// BackendSynced, which knows their kind.
func (s *modeSeries) syncFailed(family string) {
	if s.nftablesSyncFailures != nil {
		s.nftablesSyncFailures.WithLabelValues(family).Inc()
	}
}

// takeFull returns whether the last Sync of f's backend was a full one,
// if BackendSynced was told since the last call.
func (s *modeSeries) takeFull(f backends.Family) (full, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	full, ok = s.full[f]
	delete(s.full, f)
	return full, ok
}

// BackendSync is what one Sync of a family's backend did beyond its
// error, for the series of a mode that counts more than failures
// (iptables). The mode's backend wrapper reports it.
type BackendSync struct {
	Family backends.Family
	// Full: the Sync rewrote the family's whole dataplane, not only what
	// changed. The proxy's full and partial sync durations of the family
	// are observed by it.
	Full bool
	// Rules are, after a Sync that succeeded, the rules wasp owns in each
	// table ("filter", "nat"); nil: not known.
	Rules map[string]int
	// Written are the rules the Sync wrote in each table; nil: Rules
	// after a full Sync (which writes them all), else not known.
	Written map[string]int
	// RestoreFailed: the Sync failed while applying its rules
	// (iptables-restore); Partial: and it was a partial one.
	RestoreFailed, Partial bool
}

// BackendSynced records a Sync of a family's backend. It is called on
// the sync goroutine, before the proxy's report of the same sync.
func (m *Metrics) BackendSynced(b BackendSync) {
	s, family := m.modeSeries, familyLabel(b.Family)
	s.mu.Lock()
	s.full[b.Family] = b.Full
	s.mu.Unlock()
	if s.mode != IPTables {
		return
	}
	if b.RestoreFailed {
		s.restoreFailures.WithLabelValues(family).Inc()
		if b.Partial {
			s.partialRestoreFailures.WithLabelValues(family).Inc()
		}
		return
	}
	written := b.Written
	if written == nil && b.Full {
		written = b.Rules
	}
	for table, n := range b.Rules {
		s.rulesTotal.WithLabelValues(family, table).Set(float64(n))
	}
	for table, n := range written {
		s.rulesLast.WithLabelValues(family, table).Set(float64(n))
	}
}
