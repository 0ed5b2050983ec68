//go:build linux

package backendtest

import (
	"context"
	"errors"
	"math"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// Waits of the traffic scenarios. A refused connection is refused at
// once, an answered one answers within milliseconds: askWait only bounds
// a drop, which shows as its timeout.
const (
	askWait  = 2 * time.Second
	dropWait = 700 * time.Millisecond
)

// RunTraffic sends real packets through the backend in a netlab cluster
// (see the package documentation for the plan): node-a (node 1) with pods
// a1 and a2, node-b with pod b1, and the client outside the cluster, whose
// traffic to ClusterIPs, external IPs and VIPs is routed through node-a,
// where the backend runs. Each scenario builds its own cluster.
//
// It needs root and network namespaces; it skips with the reason in
// -short mode, without them, or when the Harness's Probe fails on node-a.
//
// The scenarios (subtests): ClusterIP (TCP and UDP from the client and
// from the node, an undefined port rejected, an unallocated ClusterIP
// dropped), Weighted (9:1 over 1000 connections), NoEndpoints (rejected at
// once; internal policy Local with no local endpoint dropped), NodePort
// (on every local address, on the node address, not on another),
// External (external IP, VIP with source ranges allowing and denying the
// client, external policy Local: local endpoints only, client address
// preserved, dropped with none local, pods short-circuit; policy Cluster
// masquerades), Affinity (ClientIP, from the client and the node),
// Incremental (endpoints changed one Sync at a time), Restart (a new
// backend on the old one's dataplane keeps an established connection and
// affinity), Cleanup, and IPv6 (ClusterIP and NodePort over TCP and UDP,
// no endpoints rejected, and the External scenarios as IPv6/External).
func RunTraffic(t *testing.T, h Harness) {
	s := newSuite(t, &h, "Traffic")
	s.run(t, "", "ClusterIP", s.clusterIP)
	s.run(t, "", "Weighted", s.weighted)
	s.run(t, "", "NoEndpoints", s.noEndpoints)
	s.run(t, "", "NodePort", s.nodePort)
	s.run(t, "", "External", s.external)
	s.run(t, "", "Affinity", s.affinity)
	s.run(t, "", "Incremental", s.incremental)
	s.run(t, "", "Restart", s.restart)
	s.run(t, "", "Cleanup", s.cleanupScenario)
	s.run(t, "", "IPv6", s.ipv6)
}

// lab is one scenario's cluster and the backends it made.
type lab struct {
	*netlab.Cluster
	s    *suite
	node *netlab.Node // node-a, where the backend runs
}

// cluster builds the scenario's cluster, or skips t with the reason it
// cannot.
func (s *suite) cluster(t *testing.T) *lab {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel test: skipped in -short mode")
	}
	c, err := netlab.BuildCluster(netlab.NewForTest(t), netlab.ClusterSpec{Nodes: []netlab.NodeSpec{
		{Name: "node-a", Pods: []string{"a1", "a2"}},
		{Name: "node-b", Pods: []string{"b1"}},
	}, EchoPorts: []uint16{EndpointPort}})
	if err != nil {
		t.Fatal(err)
	}
	if s.h.Probe != nil {
		if err := s.h.Probe(c.Nodes[0].NS.Path()); err != nil {
			t.Skipf("kernel test: the backend cannot run here: %v", err)
		}
	}
	return &lab{Cluster: c, s: s, node: c.Nodes[0]}
}

// backend returns a new backend of family on node-a, closed at the end of
// the test.
func (l *lab) backend(t *testing.T, family backends.Family) backends.Backend {
	t.Helper()
	b := l.s.h.New(t, family, l.node.NS.Path())
	t.Cleanup(func() { b.Close() })
	return b
}

// ep is pod p's endpoint in family with weight w.
func (l *lab) ep(p string, family backends.Family, w uint32) backends.Endpoint {
	pod := l.Pod(p)
	if family == backends.IPv6 {
		return Endpoint(pod.IPv6, w)
	}
	return Endpoint(pod.IPv4, w)
}

func syncOK(t *testing.T, b backends.Backend, s *backends.State) {
	t.Helper()
	if _, err := b.Sync(context.Background(), s); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

func ask(from *netlab.NS, network string, to netip.AddrPort, wait time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return from.Ask(ctx, network, to.String())
}

// MustAsk sends one echo request from a namespace of a netlab cluster to
// to over network ("tcp" or "udp") and returns the pod that answered, or
// fails t.
func MustAsk(t *testing.T, from *netlab.NS, network string, to netip.AddrPort) string {
	t.Helper()
	id, err := ask(from, network, to, askWait)
	if err != nil {
		t.Fatalf("%s to %s: %v", network, to, err)
	}
	return id
}

// Counts asks (MustAsk) n times and counts the answers by pod.
func Counts(t *testing.T, from *netlab.NS, network string, to netip.AddrPort, n int) map[string]int {
	t.Helper()
	m := map[string]int{}
	for range n {
		m[MustAsk(t, from, network, to)]++
	}
	return m
}

// expectRefused fails t unless a connection to to is refused: for IPv4
// within dropWait, before a drop would show. On kernel 6.18 an IPv6 TCP
// connect fails only when the first retransmission of its SYN is
// rejected, a second later, though the first is answered with an ICMPv6
// error too (a UDP request to the same address is refused at once); IPv6
// gets askWait.
func expectRefused(t *testing.T, from *netlab.NS, network string, to netip.AddrPort) {
	t.Helper()
	wait := dropWait
	if to.Addr().Is6() {
		wait = askWait
	}
	if id, err := ask(from, network, to, wait); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("%s to %s: got %q, %v; want connection refused", network, to, id, err)
	}
}

// expectDropped fails t unless a connection to to times out.
func expectDropped(t *testing.T, from *netlab.NS, network string, to netip.AddrPort) {
	t.Helper()
	if id, err := ask(from, network, to, dropWait); !isTimeout(err) {
		t.Errorf("%s to %s: got %q, %v; want a timeout", network, to, id, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// at is address a on the plan's service port.
func at(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, ServicePort) }

func (s *suite) clusterIP(t *testing.T) {
	const f = backends.IPv4
	l := s.cluster(t)
	web := Service("web", ClusterIP(f, 10), Endpoints(l.ep("a1", f, 1), l.ep("b1", f, 1)))
	b := l.backend(t, f)
	syncOK(t, b, State(f, web, UDPTwin(web)))
	for _, tt := range []struct {
		name    string
		from    *netlab.NS
		network string
	}{
		{"client tcp", l.Client.NS, "tcp"},
		{"client udp", l.Client.NS, "udp"},
		{"node tcp", l.node.NS, "tcp"},
		{"node udp", l.node.NS, "udp"},
	} {
		s.run(t, "ClusterIP", tt.name, func(t *testing.T) {
			got := Counts(t, tt.from, tt.network, at(ClusterIP(f, 10)), 30)
			// Each pod answers with probability 1/2: missing one of them
			// in 30 tries happens once in 2^29.
			if got["a1"] == 0 || got["b1"] == 0 || len(got) != 2 {
				t.Errorf("answers %v, want both a1 and b1", got)
			}
		})
	}
	s.run(t, "ClusterIP", "undefined port rejected", func(t *testing.T) {
		expectRefused(t, l.Client.NS, "tcp", netip.AddrPortFrom(ClusterIP(f, 10), ServicePort+1))
	})
	s.run(t, "ClusterIP", "unallocated ClusterIP dropped", func(t *testing.T) {
		expectDropped(t, l.Client.NS, "tcp", at(ClusterIP(f, 99)))
	})
}

// weighted: weights 9:1 over 1000 connections. The count of the weight-1
// pod is binomial(1000, 0.1): mean 100, standard deviation 9.5; the test
// accepts 100 ± 5σ (53..147), which fails by chance about once in 1.7
// million runs.
func (s *suite) weighted(t *testing.T) {
	const f = backends.IPv4
	l := s.cluster(t)
	b := l.backend(t, f)
	syncOK(t, b, State(f, Service("weighted", ClusterIP(f, 11), Endpoints(l.ep("a1", f, 9), l.ep("b1", f, 1)))))
	const n = 1000
	got := Counts(t, l.Client.NS, "tcp", at(ClusterIP(f, 11)), n)
	mean, sd := n*0.1, math.Sqrt(n*0.1*0.9)
	if d := math.Abs(float64(got["b1"]) - mean); d > 5*sd || got["a1"]+got["b1"] != n {
		t.Errorf("answers %v: b1 %.1fσ from its mean %.0f", got, d/sd, mean)
	}
	t.Logf("answers %v", got)
}

func (s *suite) noEndpoints(t *testing.T) {
	const f = backends.IPv4
	l := s.cluster(t)
	b := l.backend(t, f)
	syncOK(t, b, State(f,
		Service("empty", ClusterIP(f, 13), WithNodePort(NodePort(13))),
		// Internal traffic policy Local; the only endpoint is on node-b.
		Service("node-local", ClusterIP(f, 14), InternalLocal(), Endpoints(l.ep("b1", f, 1)), Local()),
		Service("sanity", ClusterIP(f, 10), Endpoints(l.ep("a1", f, 1))),
	))
	for _, tt := range []struct {
		name    string
		from    *netlab.NS
		to      netip.AddrPort
		refused bool // else: dropped
	}{
		{"client to no endpoints: rejected", l.Client.NS, at(ClusterIP(f, 13)), true},
		{"node to no endpoints: rejected", l.node.NS, at(ClusterIP(f, 13)), true},
		{"client to NodePort with no endpoints: rejected", l.Client.NS, netip.AddrPortFrom(l.node.IPv4, NodePort(13)), true},
		{"client to iTP Local with none local: dropped", l.Client.NS, at(ClusterIP(f, 14)), false},
		{"node to iTP Local with none local: dropped", l.node.NS, at(ClusterIP(f, 14)), false},
	} {
		s.run(t, "NoEndpoints", tt.name, func(t *testing.T) {
			if tt.refused {
				expectRefused(t, tt.from, "tcp", tt.to)
			} else {
				expectDropped(t, tt.from, "tcp", tt.to)
			}
		})
	}
	s.run(t, "NoEndpoints", "client to a service with endpoints", func(t *testing.T) {
		if id, err := ask(l.Client.NS, "tcp", at(ClusterIP(f, 10)), dropWait); err != nil || id != "a1" {
			t.Errorf("got %q, %v; want a1", id, err)
		}
	})
}

func (s *suite) nodePort(t *testing.T) {
	const f = backends.IPv4
	l := s.cluster(t)
	web := Service("web", ClusterIP(f, 10), WithNodePort(NodePort(10)), Endpoints(l.ep("a1", f, 1), l.ep("b1", f, 1)))
	b := l.backend(t, f)
	to := netip.AddrPortFrom(l.node.IPv4, NodePort(10))
	for _, tt := range []struct {
		name      string
		addresses []netip.Addr
	}{
		{"every local address", nil},
		{"the node address", []netip.Addr{l.node.IPv4}},
	} {
		s.run(t, "NodePort", tt.name, func(t *testing.T) {
			st := State(f, web, UDPTwin(web))
			st.NodePortAddresses = tt.addresses
			syncOK(t, b, st)
			for _, network := range []string{"tcp", "udp"} {
				if got := Counts(t, l.Client.NS, network, to, 30); got["a1"] == 0 || got["b1"] == 0 {
					t.Errorf("%s: answers %v, want both a1 and b1", network, got)
				}
			}
		})
	}
	s.run(t, "NodePort", "not on another address", func(t *testing.T) {
		st := State(f, web)
		st.NodePortAddresses = []netip.Addr{AbsentIP(f)}
		syncOK(t, b, st)
		if id, err := ask(l.Client.NS, "tcp", to, askWait); err == nil {
			t.Errorf("NodePort answered %q on an address not in NodePortAddresses", id)
		}
	})
}

// external: external IPs, VIPs with source ranges, and external traffic
// policy Local, from the client routed through node-a.
func (s *suite) external(t *testing.T) {
	l := s.cluster(t)
	s.externalIn(t, l, l.backend(t, backends.IPv4), backends.IPv4, "External")
}

// externalIn runs the External scenarios under parent, with b, a backend
// of family f, on node-a of l.
func (s *suite) externalIn(t *testing.T, l *lab, b backends.Backend, f backends.Family, parent string) {
	t.Helper()
	vips, externals, lan, client := VIPs4, External4, LAN4, l.Client.IPv4
	if f == backends.IPv6 {
		vips, externals, lan, client = VIPs6, External6, LAN6, l.Client.IPv6
	}
	for _, p := range []netip.Prefix{vips, externals} {
		if err := l.node.NS.AddRoute(p, netip.Addr{}, "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	both := Endpoints(l.ep("a1", f, 1), l.ep("b1", f, 1))
	syncOK(t, b, State(f,
		Service("ext", ClusterIP(f, 20), ExternalIPs(ExternalIP(f, 20)), both),
		Service("lb-allowed", ClusterIP(f, 21), VIPs(VIP(f, 21)), SourceRanges(lan), both),
		Service("lb-denied", ClusterIP(f, 22), VIPs(VIP(f, 22)), SourceRanges(externals), both),
		Service("lb-local", ClusterIP(f, 23), ExternalLocal(), VIPs(VIP(f, 23)), both, Local(l.ep("a1", f, 1))),
		Service("lb-none-local", ClusterIP(f, 24), ExternalLocal(), VIPs(VIP(f, 24)),
			Endpoints(l.ep("b1", f, 1)), Local()),
	))
	s.run(t, parent, "external IP", func(t *testing.T) {
		if got := Counts(t, l.Client.NS, "tcp", at(ExternalIP(f, 20)), 30); got["a1"] == 0 || got["b1"] == 0 {
			t.Errorf("answers %v, want both pods", got)
		}
	})
	s.run(t, parent, "source in the ranges", func(t *testing.T) {
		MustAsk(t, l.Client.NS, "tcp", at(VIP(f, 21)))
	})
	s.run(t, parent, "source outside the ranges: dropped", func(t *testing.T) {
		expectDropped(t, l.Client.NS, "tcp", at(VIP(f, 22)))
	})
	s.run(t, parent, "eTP Local: local endpoint only", func(t *testing.T) {
		if got := Counts(t, l.Client.NS, "tcp", at(VIP(f, 23)), 20); got["a1"] != 20 {
			t.Errorf("answers %v, want only a1", got)
		}
	})
	s.run(t, parent, "eTP Local: client address preserved", func(t *testing.T) {
		id, peer, err := askPeer(l.Client.NS, "tcp", at(VIP(f, 23)))
		if err != nil || id != "a1" || peer.Addr() != client {
			t.Errorf("got %q from %v, %v; want a1 seeing the client %s", id, peer, err, client)
		}
	})
	s.run(t, parent, "eTP Cluster: client address masqueraded", func(t *testing.T) {
		// Policy Cluster may send the connection to another node, whose
		// answer must come back through this one.
		for range 10 {
			id, peer, err := askPeer(l.Client.NS, "tcp", at(ExternalIP(f, 20)))
			if err != nil || peer.Addr() == client {
				t.Fatalf("got %q from %v, %v; want an answer seeing a node address, not the client's", id, peer, err)
			}
		}
	})
	s.run(t, parent, "eTP Local, none local: dropped", func(t *testing.T) {
		expectDropped(t, l.Client.NS, "tcp", at(VIP(f, 24)))
	})
	s.run(t, parent, "eTP Local, none local: pods short-circuit", func(t *testing.T) {
		if got := MustAsk(t, l.Pod("a2").NS, "tcp", at(VIP(f, 24))); got != "b1" {
			t.Errorf("answer %q, want b1", got)
		}
	})
}

func askPeer(from *netlab.NS, network string, to netip.AddrPort) (string, netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(context.Background(), askWait)
	defer cancel()
	return from.AskPeer(ctx, network, to.String())
}

func (s *suite) affinity(t *testing.T) {
	const f = backends.IPv4
	l := s.cluster(t)
	b := l.backend(t, f)
	st := State(f, Service("sticky", ClusterIP(f, 10), Affinity(600), Endpoints(l.ep("a1", f, 1), l.ep("b1", f, 1))))
	syncOK(t, b, st)
	got := Counts(t, l.Client.NS, "tcp", at(ClusterIP(f, 10)), 20)
	if len(got) != 1 {
		t.Errorf("answers %v, want all from one pod", got)
	}
	// Node-originated traffic has another source: it sticks too, maybe
	// to the other pod.
	if got := Counts(t, l.node.NS, "tcp", at(ClusterIP(f, 10)), 20); len(got) != 1 {
		t.Errorf("from the node: answers %v, want all from one pod", got)
	}
	var answered backends.Endpoint
	for p := range got {
		answered = l.ep(p, f, 1)
	}
	s.check(t, "Affinity", &Env{NetNS: l.node.NS.Path(), Backend: b, State: st, Client: l.Client.IPv4, Answered: answered})
}

func (s *suite) incremental(t *testing.T) {
	const f = backends.IPv4
	l := s.cluster(t)
	b := l.backend(t, f)
	steps := []struct {
		eps  []string
		want string
	}{
		{[]string{"a1"}, "a1"},
		{[]string{"b1"}, "b1"},
		{[]string{"a2"}, "a2"},
		{nil, ""}, // no endpoints: refused
		{[]string{"a1"}, "a1"},
	}
	var st *backends.State
	for i, step := range steps {
		var eps []backends.Endpoint
		for _, p := range step.eps {
			eps = append(eps, l.ep(p, f, 1))
		}
		st = State(f,
			Service("web", ClusterIP(f, 10), WithNodePort(NodePort(10)), func(s *backends.Service) { s.Cluster = eps }),
			Service("other", ClusterIP(f, 20), Endpoints(l.ep("b1", f, 1))),
		)
		syncOK(t, b, st)
		for _, to := range []netip.AddrPort{at(ClusterIP(f, 10)), netip.AddrPortFrom(l.node.IPv4, NodePort(10))} {
			if step.want == "" {
				expectRefused(t, l.Client.NS, "tcp", to)
				continue
			}
			if got := Counts(t, l.Client.NS, "tcp", to, 5); got[step.want] != 5 {
				t.Errorf("step %d: %s: answers %v, want %s", i, to, got, step.want)
			}
		}
		if got := MustAsk(t, l.Client.NS, "tcp", at(ClusterIP(f, 20))); got != "b1" {
			t.Errorf("step %d: the other service: answer %q, want b1", i, got)
		}
	}
	if s.h.FullSyncs != nil {
		if n := s.h.FullSyncs(b); n != 1 {
			t.Errorf("%d full syncs, want one (the first)", n)
		}
	}
	s.check(t, "Incremental", &Env{NetNS: l.node.NS.Path(), Backend: b, State: st, Client: l.Client.IPv4})
}

// restart: a new backend on the dataplane of a previous one keeps
// established connections and affinity.
func (s *suite) restart(t *testing.T) {
	const f = backends.IPv4
	l := s.cluster(t)
	st := State(f, Service("sticky", ClusterIP(f, 10), Affinity(600), Endpoints(l.ep("a1", f, 1), l.ep("b1", f, 1))))
	first := l.backend(t, f)
	syncOK(t, first, st)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := l.Client.NS.Dial(ctx, "tcp", at(ClusterIP(f, 10)).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before, err := netlab.Request(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := l.backend(t, f)
	syncOK(t, second, st)
	if s.h.FullSyncs != nil {
		if n := s.h.FullSyncs(second); n != 1 {
			t.Errorf("the new backend made %d full syncs, want one", n)
		}
	}
	if after, err := netlab.Request(ctx, conn); err != nil || after != before {
		t.Errorf("established connection after the restart: %q, %v; want %q", after, err, before)
	}
	if got := Counts(t, l.Client.NS, "tcp", at(ClusterIP(f, 10)), 10); got[before] != 10 {
		t.Errorf("new connections after the restart: answers %v, want all from %s", got, before)
	}
	s.check(t, "Restart", &Env{NetNS: l.node.NS.Path(), Backend: second, State: st, Client: l.Client.IPv4,
		Answered: l.ep(before, f, 1)})
}

func (s *suite) cleanupScenario(t *testing.T) {
	const f = backends.IPv4
	l := s.cluster(t)
	b := l.backend(t, f)
	st := State(f, Service("web", ClusterIP(f, 10), Endpoints(l.ep("a1", f, 1))))
	syncOK(t, b, st)
	MustAsk(t, l.Client.NS, "tcp", at(ClusterIP(f, 10)))
	for i := range 2 { // the second finds nothing, which is fine
		if err := b.Cleanup(context.Background()); err != nil {
			t.Fatalf("cleanup %d: %v", i, err)
		}
	}
	if s.h.Dump != nil {
		if d := s.h.Dump(t, b); d != "" {
			t.Errorf("after cleanup the backend's dataplane holds:\n%s", d)
		}
	}
	if id, err := ask(l.Client.NS, "tcp", at(ClusterIP(f, 10)), askWait); err == nil {
		t.Errorf("ClusterIP answered %q after cleanup", id)
	}
	s.check(t, "Cleanup", &Env{NetNS: l.node.NS.Path(), Backend: b, State: st, Client: l.Client.IPv4})
	// A Sync after Cleanup programs the dataplane again.
	syncOK(t, b, st)
	MustAsk(t, l.Client.NS, "tcp", at(ClusterIP(f, 10)))
}

func (s *suite) ipv6(t *testing.T) {
	const f = backends.IPv6
	l := s.cluster(t)
	b := l.backend(t, f)
	web := Service("web", ClusterIP(f, 10), WithNodePort(NodePort(10)), Endpoints(l.ep("a1", f, 1), l.ep("b1", f, 3)))
	syncOK(t, b, State(f, web, UDPTwin(web), Service("empty", ClusterIP(f, 13))))
	for _, tt := range []struct {
		name string
		from *netlab.NS
		to   netip.AddrPort
	}{
		{"client to ClusterIP", l.Client.NS, at(ClusterIP(f, 10))},
		{"node to ClusterIP", l.node.NS, at(ClusterIP(f, 10))},
		{"client to NodePort", l.Client.NS, netip.AddrPortFrom(l.node.IPv6, NodePort(10))},
	} {
		s.run(t, "IPv6", tt.name, func(t *testing.T) {
			for _, network := range []string{"tcp", "udp"} {
				if got := Counts(t, tt.from, network, tt.to, 40); got["a1"] == 0 || got["b1"] == 0 {
					t.Errorf("%s: answers %v, want both pods", network, got)
				}
			}
		})
	}
	s.run(t, "IPv6", "no endpoints: rejected", func(t *testing.T) {
		expectRefused(t, l.Client.NS, "tcp", at(ClusterIP(f, 13)))
	})
	s.run(t, "IPv6", "External", func(t *testing.T) { s.externalIn(t, l, b, f, "IPv6/External") })
}
