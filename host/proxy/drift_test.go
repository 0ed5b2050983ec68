package proxy

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/nftables"
)

// TestDriftRepaired: an element deleted from the nftables table behind
// the backend's back is noticed by the next drift check, reported to
// Metrics, and put back by the sync it asks for, without any cluster
// change.
func TestDriftRepaired(t *testing.T) {
	client := fake.NewClientset(node(), service("web", "10.96.0.10", nil), slice("web", "10.244.1.10", "10.244.2.10"))
	f := nftables.NewFake()
	be, err := nftables.NewWithFake(nftables.Opts{Family: backends.IPv4}, f)
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeMetrics{}
	p := startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be},
		Metrics: m, DriftCheckPeriod: 20 * time.Millisecond})
	waitFor(t, "the first sync", func() bool { return strings.Contains(f.Dump(), "10.244.2.10 . 8080") })
	programmed := f.Dump()
	waitFor(t, "a clean drift check", func() bool {
		rs := m.driftReports()
		return len(rs) > 0 && rs[len(rs)-1].Err == nil && rs[len(rs)-1].Drift.Empty()
	})
	syncs := p.Stats().Syncs

	if err := f.DeleteElement(backends.IPv4, nftables.DefaultTable, "buckets-cluster-2", "10.96.0.10 . tcp . 80 . 1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the repair", func() bool { return f.Dump() == programmed })
	if p.Stats().Syncs <= syncs {
		t.Errorf("no sync after the drift")
	}
	var found *DriftReport
	for _, r := range m.driftReports() {
		if !r.Drift.Empty() {
			found = &r
			break
		}
	}
	switch {
	case found == nil:
		t.Fatal("no drift reported to Metrics")
	case found.Family != backends.IPv4 || found.Drift.Objects[backends.DriftElement] != 1:
		t.Errorf("drift report %+v, want one IPv4 element", found.Drift)
	case len(found.Drift.Examples) != 1 || !strings.Contains(found.Drift.Examples[0], "buckets-cluster-2: element 10.96.0.10 . tcp . 80 . 1 missing"):
		t.Errorf("drift examples %q, want the missing element named", found.Drift.Examples)
	}
}
