package metrics

import (
	"fmt"

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
}

func newModeSeries(reg prometheus.Registerer, mode Mode) (*modeSeries, error) {
	f := factory{reg: reg, namespace: kubeProxyNamespace}
	family := []string{labelIPFamily}
	s := &modeSeries{mode: mode}
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
// nftables mode; the iptables mode counts its restore failures from the
// backend's SyncResult (backendSynced), which knows their kind.
func (s *modeSeries) syncFailed(family string) {
	if s.nftablesSyncFailures != nil {
		s.nftablesSyncFailures.WithLabelValues(family).Inc()
	}
}

// backendSynced records what a Sync of a family's backend said it did,
// in the series of a mode that counts more than failures (iptables):
// restore failures, partial ones apart, and the rules wasp owns and
// wrote, by table. programmed: the Sync programmed the dataplane (its
// error, if any, is of housekeeping after it).
func (s *modeSeries) backendSynced(family string, r *backends.SyncResult, programmed bool) {
	if s.mode != IPTables {
		return
	}
	if !programmed {
		if r.Failure == backends.FailureApply {
			s.restoreFailures.WithLabelValues(family).Inc()
			if r.Kind == backends.SyncPartial {
				s.partialRestoreFailures.WithLabelValues(family).Inc()
			}
		}
		return
	}
	written := r.Written
	if written == nil && r.Kind == backends.SyncFull {
		written = r.Objects
	}
	for table, n := range r.Objects {
		s.rulesTotal.WithLabelValues(family, table).Set(float64(n))
	}
	for table, n := range written {
		s.rulesLast.WithLabelValues(family, table).Set(float64(n))
	}
}
