package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/proxy"
)

// TestModeSeries: each mode exports its own upstream series, from the
// start, and none of the other mode's.
func TestModeSeries(t *testing.T) {
	nft := []string{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total"}
	ipt := []string{"kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
		"kubeproxy_sync_proxy_rules_iptables_total", "kubeproxy_sync_proxy_rules_iptables_last"}
	tests := []struct {
		mode          Mode
		want, notWant []string
	}{
		{NFTables, nft, ipt},
		{IPTables, ipt, nft},
	}
	for _, tc := range tests {
		t.Run(string(tc.mode), func(t *testing.T) {
			m, err := NewWith(Options{Mode: tc.mode, Families: []backends.Family{backends.IPv4, backends.IPv6}})
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range tc.want {
				mf := family(t, m.Registry(), name)
				wantType, wantSeries, wantLabels := dto.MetricType_COUNTER, 2, "ip_family"
				if strings.HasSuffix(name, "_iptables_total") || strings.HasSuffix(name, "_iptables_last") {
					wantType, wantSeries, wantLabels = dto.MetricType_GAUGE, 4, "ip_family,table" // two families, filter and nat
				}
				if mf.GetType() != wantType || len(mf.GetMetric()) != wantSeries {
					t.Errorf("%s: %s with %d series, want %s with %d", name, mf.GetType(), len(mf.GetMetric()), wantType, wantSeries)
				}
				for _, s := range mf.GetMetric() {
					var names []string
					for _, l := range s.GetLabel() {
						names = append(names, l.GetName())
					}
					if got := strings.Join(names, ","); got != wantLabels {
						t.Errorf("%s: labels %s, want %s", name, got, wantLabels)
					}
				}
			}
			for _, name := range tc.notWant {
				if n, err := testutil.GatherAndCount(m.Registry(), name); err != nil || n != 0 {
					t.Errorf("%s: %d series (%v), want none in mode %s", name, n, err, tc.mode)
				}
			}
		})
	}
	if _, err := NewWith(Options{Mode: "ipvs"}); err == nil || !strings.Contains(err.Error(), `mode "ipvs"`) {
		t.Errorf("mode ipvs: %v, want an error naming it", err)
	}
}

// TestModeFailures: a failed sync counts in the series of the mode: the
// nftables mode's sync failures; the iptables mode's restore failures,
// and partial restore failures when the failed restore was partial, as its
// backend reports them.
func TestModeFailures(t *testing.T) {
	v4, v6 := "ip_family=IPv4", "ip_family=IPv6"
	failed := &proxy.SyncReport{Duration: time.Millisecond, Families: []proxy.FamilySync{
		{Family: backends.IPv4, Err: errors.New("restore failed")},
		{Family: backends.IPv6},
	}}

	nft := New(backends.IPv4, backends.IPv6)
	nft.Proxy().Synced(failed)
	checkValues(t, nft.Registry(), []want{
		{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", []string{v4}, 1},
		{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", []string{v6}, 0},
	})

	ipt, err := NewWith(Options{Mode: IPTables, Families: []backends.Family{backends.IPv4, backends.IPv6}})
	if err != nil {
		t.Fatal(err)
	}
	// A full restore that failed, then a partial one, as the backends'
	// SyncResults say.
	restoreFailed := errors.New("iptables-restore failed")
	ipt.Proxy().Synced(&proxy.SyncReport{Duration: time.Millisecond, Families: []proxy.FamilySync{
		{Family: backends.IPv4, Err: restoreFailed, Result: backends.SyncResult{Kind: backends.SyncFull, Failure: backends.FailureApply}},
		{Family: backends.IPv6, Result: backends.SyncResult{Kind: backends.SyncFull, Objects: map[string]int{"filter": 3, "nat": 40}}},
	}})
	ipt.Proxy().Synced(&proxy.SyncReport{Duration: time.Millisecond, Families: []proxy.FamilySync{
		{Family: backends.IPv4, Err: restoreFailed, Result: backends.SyncResult{Kind: backends.SyncPartial, Failure: backends.FailureApply}},
		{Family: backends.IPv6, Result: backends.SyncResult{Kind: backends.SyncPartial, Objects: map[string]int{"filter": 3, "nat": 44}, Written: map[string]int{"filter": 3, "nat": 9}}},
	}})
	checkValues(t, ipt.Registry(), []want{
		{"kubeproxy_sync_proxy_rules_iptables_restore_failures_total", []string{v4}, 2},
		{"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", []string{v4}, 1},
		{"kubeproxy_sync_proxy_rules_iptables_restore_failures_total", []string{v6}, 0},
		{"kubeproxy_sync_proxy_rules_iptables_total", []string{v6, "table=nat"}, 44},
		{"kubeproxy_sync_proxy_rules_iptables_last", []string{v6, "table=nat"}, 9},
		{"kubeproxy_sync_proxy_rules_iptables_total", []string{v6, "table=filter"}, 3},
		{"kubeproxy_sync_proxy_rules_iptables_total", []string{v4, "table=nat"}, 0},
	})
	// The proxy's syncs were partial ones; the backends said which were
	// full.
	checkObservations(t, ipt.Registry(), []want{
		{"kubeproxy_sync_full_proxy_rules_duration_seconds", []string{v4}, 1},
		{"kubeproxy_sync_partial_proxy_rules_duration_seconds", []string{v4}, 1},
		{"kubeproxy_sync_full_proxy_rules_duration_seconds", []string{v6}, 1},
		{"kubeproxy_sync_partial_proxy_rules_duration_seconds", []string{v6}, 1},
	})
}
