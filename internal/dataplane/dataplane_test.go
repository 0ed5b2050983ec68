package dataplane

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/iptables"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/metrics"
	"github.com/wasp-proxy/wasp/host/proxy"
)

func TestLookup(t *testing.T) {
	for _, name := range []v1alpha1.ProxyMode{v1alpha1.ProxyModeNFTables, v1alpha1.ProxyModeIPTables} {
		m, err := Lookup(name)
		if err != nil || m.Name != name || string(m.Metrics) != string(name) || m.New == nil || m.Probe == nil || m.CleanupLeftovers == nil || m.Leftovers == "" {
			t.Errorf("%s: %+v, %v; want its whole row", name, m, err)
		}
	}
	if _, err := Lookup(v1alpha1.ProxyModeIPVS); err == nil || !strings.Contains(err.Error(), `proxy mode "ipvs"`) {
		t.Errorf("ipvs: %v, want an error naming it", err)
	}
}

// Test address plan: a ClusterIP Service at 10.96.0.10 with an endpoint
// at 10.244.1.10.
func webState() *backends.State {
	ep := []backends.Endpoint{{Addr: netip.MustParseAddr("10.244.1.10"), Port: 8080, Weight: 1}}
	return &backends.State{Family: backends.IPv4, Services: []backends.Service{{
		Key: "default/web:http/TCP/IPv4", Namespace: "default", Name: "web", PortName: "http", Protocol: backends.TCP,
		ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, HasAnyEndpoints: true, Cluster: ep,
	}}}
}

// TestIPTablesMetrics: an iptables backend's Syncs, their SyncResults
// handed on by the sync loop (proxy.FamilySync), reach the iptables
// mode's series: a failed full restore counts as a restore failure, a
// failed partial one as a partial restore failure too, and a successful
// sync sets the rule gauges.
func TestIPTablesMetrics(t *testing.T) {
	ctx := context.Background()
	m, err := metrics.NewWith(metrics.Options{Mode: metrics.IPTables, Families: []backends.Family{backends.IPv4}})
	if err != nil {
		t.Fatal(err)
	}
	fake := iptables.NewFake()
	ib, err := iptables.NewWithFake(iptables.Opts{Family: backends.IPv4}, fake)
	if err != nil {
		t.Fatal(err)
	}
	// sync syncs as the sync loop does, and hands the result on.
	sync := func(s *backends.State) error {
		res, err := ib.Sync(ctx, s)
		m.Proxy().Synced(&proxy.SyncReport{Families: []proxy.FamilySync{{Family: s.Family, Result: res, Err: err}}})
		return err
	}
	count := func(name string, labels ...string) float64 {
		t.Helper()
		for _, mf := range must(m.Registry().Gather()) {
			if mf.GetName() != name {
				continue
			}
		series:
			for _, s := range mf.GetMetric() {
				for i, l := range s.GetLabel() {
					if i >= len(labels) || l.GetName()+"="+l.GetValue() != labels[i] {
						continue series
					}
				}
				if s.GetCounter() != nil {
					return s.GetCounter().GetValue()
				}
				return s.GetGauge().GetValue()
			}
		}
		t.Fatalf("no series %s%v", name, labels)
		return 0
	}
	const restore, partial = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total"
	v4 := "ip_family=IPv4"

	fake.FailNext(errors.New("injected: no such match"))
	if err := sync(webState()); !errors.Is(err, iptables.ErrRestore) {
		t.Fatalf("first sync: %v, want ErrRestore", err)
	}
	if count(restore, v4) != 1 || count(partial, v4) != 0 {
		t.Errorf("after a failed full restore: %v restore, %v partial failures; want 1, 0", count(restore, v4), count(partial, v4))
	}
	if err := sync(webState()); err != nil {
		t.Fatal(err)
	}
	if n := count("kubeproxy_sync_proxy_rules_iptables_total", v4, "table=nat"); n == 0 || n != float64(ib.LastSync().Rules["nat"]) {
		t.Errorf("nat rules gauge %v, want the backend's %d", n, ib.LastSync().Rules["nat"])
	}
	s := webState()
	s.Services[0].Port = 81
	if err := sync(s); err != nil {
		t.Fatal(err)
	}
	if n := count("kubeproxy_sync_proxy_rules_iptables_last", v4, "table=nat"); ib.LastSync().Full || n == 0 || n != float64(ib.LastSync().Written["nat"]) {
		t.Errorf("after a partial sync: nat rules written gauge %v, want the backend's %d", n, ib.LastSync().Written["nat"])
	}
	s.Services[0].Port = 82
	fake.FailNext(errors.New("injected: no such match"))
	if err := sync(s); !errors.Is(err, iptables.ErrPartialRestore) {
		t.Fatalf("partial sync: %v, want ErrPartialRestore", err)
	}
	if count(restore, v4) != 2 || count(partial, v4) != 1 {
		t.Errorf("after a failed partial restore: %v restore, %v partial failures; want 2, 1", count(restore, v4), count(partial, v4))
	}
	if n, err := testutil.GatherAndCount(m.Registry(), "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"); err != nil || n != 0 {
		t.Errorf("nftables series in the iptables mode: %d, %v", n, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
