package conntrack

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
)

// Test address plan: client 10.0.0.1, node 10.0.0.2, ClusterIPs in
// 10.96.0.0/16, pods in 10.244.0.0/16, external IPs in 203.0.113.0/24,
// load-balancer VIPs in 192.0.2.0/24, anything else on the Internet in
// 198.51.100.0/24. IPv6: the same under 2001:db8::/32 and fd00::/8.

const (
	client = "10.0.0.1"
	node   = "10.0.0.2"

	dnsIP  = "10.96.0.10" // UDP dns:53, NodePort 30053
	extIP  = "203.0.113.7"
	lbVIP  = "192.0.2.10"
	podA   = "10.244.1.5" // serving
	podB   = "10.244.2.6" // serving
	podOld = "10.244.3.9" // gone
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, addr(s))
	}
	return out
}

// udp is a flow from client:40000 to dst:dport answered by replySrc:rport.
func udp(dst string, dport uint16, replySrc string, rport uint16) flow {
	return flow{
		proto:   protoUDP,
		origSrc: addr(client), origDst: addr(dst), origSrcPort: 40000, origDstPort: dport,
		replySrc: addr(replySrc), replyDst: addr(client), replySrcPort: rport, replyDstPort: 40000,
	}
}

func tcp(dst string, dport uint16, replySrc string, rport uint16) flow {
	f := udp(dst, dport, replySrc, rport)
	f.proto = 6
	return f
}

// service returns a valid service port; key orders it in the State.
func service(key, proto, clusterIP string, port uint16, f func(*backends.Service)) backends.Service {
	svc := backends.Service{
		Key: key, Namespace: "default", Name: strings.SplitN(key, ":", 2)[0], Protocol: backends.Protocol(proto),
		ClusterIP: addr(clusterIP), Port: port, HasAnyEndpoints: true,
	}
	if f != nil {
		f(&svc)
	}
	return svc
}

// dnsState is the usual State: a UDP service on every kind of frontend,
// served by podA and podB, and a TCP service.
func dnsState() *backends.State {
	return &backends.State{Family: backends.IPv4, Services: []backends.Service{
		service("dns:53/UDP", "UDP", dnsIP, 53, func(s *backends.Service) {
			s.NodePort = 30053
			s.ExternalIPs = addrs(extIP)
			s.LoadBalancerVIPs = addrs(lbVIP)
			s.Serving = addrs(podA, podB)
		}),
		service("web:80/TCP", "TCP", "10.96.0.20", 80, func(s *backends.Service) {
			s.NodePort = 30080
			s.Serving = addrs(podA)
		}),
	}}
}

func newTestBackend(t *testing.T, family backends.Family) (*Backend, *backendfake.Fake, *fakeTable) {
	t.Helper()
	inner := backendfake.New()
	tbl := newFakeTable()
	return newBackend(inner, Opts{Family: family}, tbl), inner, tbl
}

func TestSyncDeletesStale(t *testing.T) {
	tests := []struct {
		name        string
		state       func() *backends.State // default dnsState
		flow        flow
		wantDeleted bool
	}{
		{name: "clusterIP to serving endpoint kept", flow: udp(dnsIP, 53, podA, 5353)},
		{name: "clusterIP to second serving endpoint kept", flow: udp(dnsIP, 53, podB, 5353)},
		{name: "clusterIP to gone endpoint deleted", flow: udp(dnsIP, 53, podOld, 5353), wantDeleted: true},
		{name: "clusterIP cached reject deleted", flow: udp(dnsIP, 53, dnsIP, 53), wantDeleted: true},
		{name: "clusterIP on another port kept", flow: udp(dnsIP, 54, podOld, 54)},
		{name: "externalIP to serving endpoint kept", flow: udp(extIP, 53, podA, 5353)},
		{name: "externalIP to gone endpoint deleted", flow: udp(extIP, 53, podOld, 5353), wantDeleted: true},
		{name: "externalIP cached reject deleted", flow: udp(extIP, 53, extIP, 53), wantDeleted: true},
		{name: "LB VIP to serving endpoint kept", flow: udp(lbVIP, 53, podB, 5353)},
		{name: "LB VIP to gone endpoint deleted", flow: udp(lbVIP, 53, podOld, 5353), wantDeleted: true},
		{name: "LB VIP cached reject deleted", flow: udp(lbVIP, 53, lbVIP, 53), wantDeleted: true},
		{name: "NodePort to serving endpoint kept", flow: udp(node, 30053, podA, 5353)},
		{name: "NodePort to gone endpoint deleted", flow: udp(node, 30053, podOld, 5353), wantDeleted: true},
		{name: "NodePort cached reject deleted", flow: udp(node, 30053, node, 30053), wantDeleted: true},
		// Upstream matches NodePorts on the port alone, whatever the
		// destination address.
		{name: "NodePort port on any address deleted", flow: udp("198.51.100.99", 30053, "198.51.100.99", 30053), wantDeleted: true},
		{name: "TCP flow to UDP service frontend ignored", flow: tcp(dnsIP, 53, podOld, 5353)},
		{name: "UDP flow to TCP service frontend ignored", flow: udp("10.96.0.20", 80, podOld, 80)},
		{name: "UDP flow to TCP service NodePort ignored", flow: udp(node, 30080, podOld, 80)},
		{name: "unrelated UDP flow kept", flow: udp("198.51.100.53", 53, "198.51.100.53", 53)},
		{
			name: "service without serving endpoints left alone",
			state: func() *backends.State {
				s := dnsState()
				s.Services[0].Serving = nil
				s.Services[0].HasAnyEndpoints = false
				return s
			},
			flow: udp(dnsIP, 53, dnsIP, 53),
		},
		{
			name: "terminating but serving endpoint kept",
			state: func() *backends.State {
				// podOld serves while terminating: no ready endpoint is in
				// Cluster, but Serving has it, and that is what counts.
				s := dnsState()
				s.Services[0].Serving = addrs(podOld)
				return s
			},
			flow: udp(dnsIP, 53, podOld, 5353),
		},
		{
			name: "ports of one ClusterIP are kept apart",
			state: func() *backends.State {
				s := dnsState()
				s.Services = slices.Insert(s.Services, 1, service("dns:5353/UDP", "UDP", dnsIP, 5353, func(s *backends.Service) {
					s.Serving = addrs(podOld)
				}))
				return s
			},
			flow:        udp(dnsIP, 53, podOld, 53),
			wantDeleted: true,
		},
		{
			name: "ports of one ClusterIP: the other port's endpoint kept",
			state: func() *backends.State {
				s := dnsState()
				s.Services = slices.Insert(s.Services, 1, service("dns:5353/UDP", "UDP", dnsIP, 5353, func(s *backends.Service) {
					s.Serving = addrs(podOld)
				}))
				return s
			},
			flow: udp(dnsIP, 5353, podOld, 5353),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			b, inner, tbl := newTestBackend(t, backends.IPv4)
			unrelated := udp("198.51.100.1", 123, "198.51.100.1", 123)
			tbl.add(backends.IPv4, tt.flow, unrelated)
			s := dnsState()
			if tt.state != nil {
				s = tt.state()
			}
			if _, err := b.Sync(ctx, s); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if inner.State(backends.IPv4) == nil {
				t.Fatal("inner backend was not synced")
			}
			want := []flow{tt.flow, unrelated}
			if tt.wantDeleted {
				want = want[1:]
			}
			wantTbl := newFakeTable()
			wantTbl.add(backends.IPv4, want...)
			if got, want := tbl.Dump(backends.IPv4), wantTbl.Dump(backends.IPv4); got != want {
				t.Errorf("table after Sync:\n%s\nwant:\n%s", got, want)
			}
			wantN := uint64(0)
			if tt.wantDeleted {
				wantN = 1
			}
			if got := b.Stats(); got.Reconciles != 1 || got.DeletedEntries != wantN || got.Failures != 0 {
				t.Errorf("Stats = %+v, want 1 reconcile, %d deleted, 0 failures", got, wantN)
			}
		})
	}
}

// everyKind returns one IPv4 flow of every kind dnsState's cleaner acts on
// or must leave alone: kept and stale for a ClusterIP, an external IP, an
// LB VIP and a NodePort, cached rejects, and TCP.
func everyKind() []flow {
	return []flow{
		udp(dnsIP, 53, podA, 5353),
		udp(dnsIP, 53, podOld, 5353),
		udp(dnsIP, 53, dnsIP, 53),
		udp(extIP, 53, podOld, 5353),
		udp(lbVIP, 53, podB, 5353),
		udp(lbVIP, 53, lbVIP, 53),
		udp(node, 30053, podOld, 5353),
		udp(node, 30053, podB, 5353),
		tcp(dnsIP, 53, podOld, 5353),
	}
}

// v6Flow is a UDP flow to an IPv6 service IP, which an IPv4 cleaner must
// not see.
func v6Flow() flow {
	return flow{proto: protoUDP, origSrc: addr("2001:db8::1"), origDst: addr("fd00:96::10"), origSrcPort: 1, origDstPort: 53,
		replySrc: addr("fd00:96::10"), replyDst: addr("2001:db8::1"), replySrcPort: 53, replyDstPort: 1}
}

// TestSyncWholeTable runs one Sync over a table holding every kind of
// flow and compares the sorted dump.
func TestSyncWholeTable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, _, tbl := newTestBackend(t, backends.IPv4)
	tbl.add(backends.IPv4, everyKind()...)
	tbl.add(backends.IPv6, v6Flow())
	v6Before := tbl.Dump(backends.IPv6)

	if _, err := b.Sync(ctx, dnsState()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	want := strings.Join([]string{
		"tcp src=10.0.0.1 dst=10.96.0.10 sport=40000 dport=53 src=10.244.3.9 dst=10.0.0.1 sport=5353 dport=40000",
		"udp src=10.0.0.1 dst=10.0.0.2 sport=40000 dport=30053 src=10.244.2.6 dst=10.0.0.1 sport=5353 dport=40000",
		"udp src=10.0.0.1 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.5 dst=10.0.0.1 sport=5353 dport=40000",
		"udp src=10.0.0.1 dst=192.0.2.10 sport=40000 dport=53 src=10.244.2.6 dst=10.0.0.1 sport=5353 dport=40000",
	}, "\n")
	if got := tbl.Dump(backends.IPv4); got != want {
		t.Errorf("table after Sync:\n%s\nwant:\n%s", got, want)
	}
	if got := tbl.Dump(backends.IPv6); got != v6Before {
		t.Errorf("IPv6 table changed by an IPv4 Sync:\n%s", got)
	}
	if got := b.Stats().DeletedEntries; got != 5 {
		t.Errorf("DeletedEntries = %d, want 5", got)
	}

	// Same State again: nothing left to delete.
	if _, err := b.Sync(ctx, dnsState()); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
	if got := tbl.Dump(backends.IPv4); got != want {
		t.Errorf("table after second Sync:\n%s\nwant:\n%s", got, want)
	}
	if got := b.Stats(); got.Reconciles != 2 || got.DeletedEntries != 5 {
		t.Errorf("Stats after second Sync = %+v, want 2 reconciles, 5 deleted", got)
	}
}

func TestSyncIPv6(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, _, tbl := newTestBackend(t, backends.IPv6)
	f := func(dst, replySrc string) flow {
		return flow{proto: protoUDP, origSrc: addr("2001:db8::1"), origDst: addr(dst), origSrcPort: 40000, origDstPort: 53,
			replySrc: addr(replySrc), replyDst: addr("2001:db8::1"), replySrcPort: 53, replyDstPort: 40000}
	}
	keep, stale := f("fd00:96::10", "fd00:244:1::5"), f("fd00:96::10", "fd00:244:3::9")
	tbl.add(backends.IPv6, keep, stale)
	s := &backends.State{Family: backends.IPv6, Services: []backends.Service{
		service("dns:53/UDP", "UDP", "fd00:96::10", 53, func(s *backends.Service) { s.Serving = addrs("fd00:244:1::5") }),
	}}
	if _, err := b.Sync(ctx, s); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got, want := tbl.Dump(backends.IPv6), keep.String(); got != want {
		t.Errorf("table after Sync:\n%s\nwant:\n%s", got, want)
	}
}

func TestInnerFailureSkipsCleanup(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, inner, tbl := newTestBackend(t, backends.IPv4)
	stale := udp(dnsIP, 53, podOld, 5353)
	tbl.add(backends.IPv4, stale)
	boom := errors.New("boom")
	inner.FailNextSync(boom)

	_, err := b.Sync(ctx, dnsState())
	if !errors.Is(err, boom) {
		t.Fatalf("Sync error = %v, want the inner backend's", err)
	}
	if errors.Is(err, ErrCleanup) {
		t.Errorf("inner failure %v reported as a cleanup failure", err)
	}
	if tbl.scans != 0 || tbl.Dump(backends.IPv4) != stale.String() {
		t.Errorf("table touched after an inner failure: %d scans, flows:\n%s", tbl.scans, tbl.Dump(backends.IPv4))
	}
	if got := b.Stats(); got != (Stats{}) {
		t.Errorf("Stats = %+v, want zero", got)
	}
}

func TestCleanupFailure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, inner, tbl := newTestBackend(t, backends.IPv4)
	tbl.add(backends.IPv4, udp(dnsIP, 53, podOld, 5353))
	boom := errors.New("netlink says no")
	tbl.failNext = boom

	_, err := b.Sync(ctx, dnsState())
	if !errors.Is(err, ErrCleanup) || !errors.Is(err, boom) || !errors.Is(err, backends.ErrHousekeeping) {
		t.Fatalf("Sync error = %v, want ErrCleanup (a backends.ErrHousekeeping) wrapping the table's error", err)
	}
	if !strings.Contains(err.Error(), "IPv4") {
		t.Errorf("error %q does not name the family", err)
	}
	if inner.State(backends.IPv4) == nil {
		t.Error("dataplane not programmed although only the cleanup failed")
	}
	if got := b.Stats(); got.Reconciles != 1 || got.Failures != 1 || got.DeletedEntries != 1 {
		t.Errorf("Stats = %+v, want 1 reconcile, 1 failure, 1 deleted", got)
	}

	// The reconciler keeps no state: the next Sync simply runs again.
	if _, err := b.Sync(ctx, dnsState()); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
}

// observed records what an Observer is told.
type observed struct {
	family  backends.Family
	deleted uint64
	err     error
}

type observer []observed

func (o *observer) Reconciled(family backends.Family, d time.Duration, deleted uint64, err error) {
	*o = append(*o, observed{family, deleted, err})
}

// TestObserver: the Observer hears of every cleanup, failed ones included,
// and of none when the wrapped backend failed.
func TestObserver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var obs observer
	inner := backendfake.New()
	tbl := newFakeTable()
	b := newBackend(inner, Opts{Family: backends.IPv4, Observer: &obs}, tbl)
	boom := errors.New("netlink says no")

	tbl.add(backends.IPv4, udp(dnsIP, 53, podOld, 5353), udp(dnsIP, 53, podOld, 5354))
	_, _ = b.Sync(ctx, dnsState())
	tbl.add(backends.IPv4, udp(dnsIP, 53, podOld, 5355))
	tbl.failNext = boom
	_, _ = b.Sync(ctx, dnsState())
	inner.FailNextSync(errors.New("nft says no"))
	_, _ = b.Sync(ctx, dnsState())

	want := observer{{backends.IPv4, 2, nil}, {backends.IPv4, 1, boom}}
	if !slices.Equal(obs, want) {
		t.Errorf("observed %+v, want %+v", obs, want)
	}
}

func TestNoUDPServiceSkipsScan(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, _, tbl := newTestBackend(t, backends.IPv4)
	s := dnsState()
	s.Services = s.Services[1:] // TCP only
	if _, err := b.Sync(ctx, s); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if tbl.scans != 0 {
		t.Errorf("table scanned %d times with nothing to clean", tbl.scans)
	}
	if got := b.Stats().Reconciles; got != 1 {
		t.Errorf("Reconciles = %d, want 1", got)
	}
}

func TestSyncRefusesOtherFamily(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, inner, _ := newTestBackend(t, backends.IPv6)
	if _, err := b.Sync(ctx, dnsState()); err == nil {
		t.Fatal("Sync of an IPv4 State by the IPv6 cleaner succeeded")
	}
	if inner.Counts().Syncs != 0 {
		t.Error("inner backend synced a State of the wrong family")
	}
	if _, err := b.Sync(ctx, nil); err == nil {
		t.Error("Sync(nil) succeeded")
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name  string
		inner backends.Backend
		opts  Opts
		want  []string
	}{
		{name: "nothing", want: []string{"inner: required", "family: 0"}},
		{name: "bad family", inner: backendfake.New(), opts: Opts{Family: 5}, want: []string{"family: 5"}},
		{name: "no namespace", inner: backendfake.New(), opts: Opts{Family: backends.IPv4, NetNS: "/nonexistent/netns"}, want: []string{"/nonexistent/netns"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.inner, tt.opts)
			if err == nil {
				b.Close()
				t.Fatal("New succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCleanupAndCloseDelegate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, inner, tbl := newTestBackend(t, backends.IPv4)
	if _, err := b.Sync(ctx, dnsState()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := b.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := inner.Counts(); got.Cleanups != 1 || got.Closes != 1 {
		t.Errorf("inner Counts = %+v, want 1 cleanup and 1 close", got)
	}
	if !tbl.closed {
		t.Error("table not closed")
	}
}

// checker is a Backend that checks for drift, and reports drift.
type checker struct{ *backendfake.Fake }

func (checker) CheckDrift(context.Context) (*backends.Drift, error) {
	d := &backends.Drift{}
	d.Add(backends.DriftRule, 1, "rule missing")
	return d, nil
}

// TestDriftCheckerExactly: the cleaner is a backends.DriftChecker
// exactly when the backend it wraps is one, and its check is the
// wrapped backend's.
func TestDriftCheckerExactly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner backends.Backend
	}{
		{"not a checker", backendfake.New()},
		{"a checker", checker{backendfake.New()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(tc.inner, Opts{Family: backends.IPv4}, newFakeTable()).checking()
			innerDC, want := tc.inner.(backends.DriftChecker)
			dc, got := b.(backends.DriftChecker)
			if got != want {
				t.Fatalf("the cleaner is a DriftChecker: %v, the wrapped backend: %v", got, want)
			}
			if !got {
				return
			}
			d, err := dc.CheckDrift(context.Background())
			wd, _ := innerDC.CheckDrift(context.Background())
			if err != nil || !reflect.DeepEqual(d, wd) {
				t.Errorf("CheckDrift: %+v, %v; want the wrapped backend's %+v", d, err, wd)
			}
		})
	}
}
