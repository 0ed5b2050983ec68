//go:build linux

package nftables

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	nft "github.com/google/nftables"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// podEP is the endpoint of pod p's echo server in family.
func podEP(p *netlab.Pod, family backends.Family, w uint32) backends.Endpoint {
	a := p.IPv4
	if family == backends.IPv6 {
		a = p.IPv6
	}
	return backends.Endpoint{Addr: a, Port: 8080, Weight: w}
}

// clusterState returns a State of family with the cluster's pod ranges
// and the given service ports.
func clusterState(family backends.Family, svcs ...backends.Service) *backends.State {
	s := &backends.State{Family: family, Services: sortServices(svcs)}
	if family == backends.IPv4 {
		s.ServiceCIDRs = []netip.Prefix{pfx("10.96.0.0/16")}
		s.ClusterCIDRs = []netip.Prefix{pfx("10.244.0.0/16")}
	} else {
		s.ServiceCIDRs = []netip.Prefix{pfx("fd00:10:96::/112")}
		s.ClusterCIDRs = []netip.Prefix{pfx("fd00:10:244::/56")}
	}
	return s
}

// udpService returns the UDP twin of TCP service port s.
func udpService(s backends.Service) backends.Service {
	s.Protocol = "UDP"
	fam := "IPv4"
	if s.ClusterIP.Is6() {
		fam = "IPv6"
	}
	s.Key = s.Namespace + "/" + s.Name + ":" + s.PortName + "/UDP/" + fam
	return s
}

var (
	cip10 = netip.MustParseAddrPort("10.96.0.10:80")
	cip11 = netip.MustParseAddrPort("10.96.0.11:80")
)

// counts asks n times and counts the answers.
func counts(t *testing.T, from *netlab.NS, network string, to netip.AddrPort, n int) map[string]int {
	t.Helper()
	m := map[string]int{}
	for range n {
		m[mustAsk(t, from, network, to)]++
	}
	return m
}

func TestKernelClusterIP(t *testing.T) {
	c := kernelCluster(t)
	a1, b1 := c.Pod("a1"), c.Pod("b1")
	web := svc("web", "10.96.0.10", func(s *backends.Service) {
		s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
	})
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	syncOK(t, b, clusterState(backends.IPv4, web, udpService(web)))

	for _, tt := range []struct {
		name    string
		from    *netlab.NS
		network string
	}{
		{"client tcp", c.Client.NS, "tcp"},
		{"client udp", c.Client.NS, "udp"},
		{"node tcp", c.Nodes[0].NS, "tcp"},
		{"node udp", c.Nodes[0].NS, "udp"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := counts(t, tt.from, tt.network, cip10, 30)
			// Each pod answers with probability 1/2: missing one of them
			// in 30 tries happens once in 2^29.
			if got["a1"] == 0 || got["b1"] == 0 || len(got) != 2 {
				t.Errorf("answers %v, want both a1 and b1", got)
			}
		})
	}
	t.Run("undefined port rejected", func(t *testing.T) {
		_, err := ask(t, c.Client.NS, "tcp", netip.MustParseAddrPort("10.96.0.10:81"))
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("got %v, want connection refused", err)
		}
	})
	t.Run("unallocated ClusterIP dropped", func(t *testing.T) {
		_, err := ask(t, c.Client.NS, "tcp", netip.MustParseAddrPort("10.96.0.99:80"))
		if !isTimeout(err) {
			t.Errorf("got %v, want a timeout", err)
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// TestKernelWeighted: weights 9:1 over 1000 connections. The count of
// the weight-1 pod is binomial(1000, 0.1): mean 100, standard deviation
// 9.5; the test accepts 100 ± 5σ (53..147), which fails by chance about
// once in 1.7 million runs.
func TestKernelWeighted(t *testing.T) {
	c := kernelCluster(t)
	a1, b1 := c.Pod("a1"), c.Pod("b1")
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	syncOK(t, b, clusterState(backends.IPv4, svc("weighted", "10.96.0.11", func(s *backends.Service) {
		s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 9), podEP(b1, backends.IPv4, 1)}
	})))
	const n = 1000
	got := counts(t, c.Client.NS, "tcp", cip11, n)
	mean, sd := n*0.1, math.Sqrt(n*0.1*0.9)
	if d := math.Abs(float64(got["b1"]) - mean); d > 5*sd || got["a1"]+got["b1"] != n {
		t.Errorf("answers %v: b1 %.1fσ from its mean %.0f", got, d/sd, mean)
	}
	t.Logf("answers %v", got)
}

func TestKernelNoEndpoints(t *testing.T) {
	c := kernelCluster(t)
	a1 := c.Pod("a1")
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	syncOK(t, b, clusterState(backends.IPv4,
		svc("empty", "10.96.0.13", func(s *backends.Service) { s.NodePort = 30013 }),
		// Internal traffic policy Local; the only endpoint is on node-b.
		svc("node-local", "10.96.0.14", func(s *backends.Service) {
			s.InternalPolicyLocal = true
			s.Cluster = []backends.Endpoint{podEP(c.Pod("b1"), backends.IPv4, 1)}
			s.Local = []backends.Endpoint{}
		}),
		svc("sanity", "10.96.0.10", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1)}
		}),
	))
	node := netip.AddrPortFrom(c.Nodes[0].IPv4, 30013)
	for _, tt := range []struct {
		name     string
		from     *netlab.NS
		to       netip.AddrPort
		refused  bool // else: dropped
		answered string
	}{
		{"client to no endpoints: rejected", c.Client.NS, netip.MustParseAddrPort("10.96.0.13:80"), true, ""},
		{"node to no endpoints: rejected", c.Nodes[0].NS, netip.MustParseAddrPort("10.96.0.13:80"), true, ""},
		{"client to NodePort with no endpoints: rejected", c.Client.NS, node, true, ""},
		{"client to iTP Local with none local: dropped", c.Client.NS, netip.MustParseAddrPort("10.96.0.14:80"), false, ""},
		{"node to iTP Local with none local: dropped", c.Nodes[0].NS, netip.MustParseAddrPort("10.96.0.14:80"), false, ""},
		{"client to a service with endpoints", c.Client.NS, cip10, false, "a1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
			defer cancel()
			id, err := tt.from.Ask(ctx, "tcp", tt.to.String())
			switch {
			case tt.answered != "":
				if err != nil || id != tt.answered {
					t.Errorf("got %q, %v; want %q", id, err, tt.answered)
				}
			case tt.refused && !errors.Is(err, syscall.ECONNREFUSED):
				t.Errorf("got %q, %v; want connection refused", id, err)
			case !tt.refused && !isTimeout(err):
				t.Errorf("got %q, %v; want a timeout", id, err)
			}
		})
	}
}

func TestKernelNodePort(t *testing.T) {
	c := kernelCluster(t)
	a1, b1 := c.Pod("a1"), c.Pod("b1")
	web := svc("web", "10.96.0.10", func(s *backends.Service) {
		s.NodePort = 30080
		s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
	})
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	to := netip.AddrPortFrom(c.Nodes[0].IPv4, 30080)
	for _, tt := range []struct {
		name      string
		addresses []netip.Addr
	}{
		{"every local address", nil},
		{"the node address", []netip.Addr{c.Nodes[0].IPv4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := clusterState(backends.IPv4, web, udpService(web))
			s.NodePortAddresses = tt.addresses
			syncOK(t, b, s)
			for _, network := range []string{"tcp", "udp"} {
				if got := counts(t, c.Client.NS, network, to, 30); got["a1"] == 0 || got["b1"] == 0 {
					t.Errorf("%s: answers %v, want both a1 and b1", network, got)
				}
			}
		})
	}
	t.Run("not on another address", func(t *testing.T) {
		s := clusterState(backends.IPv4, web)
		s.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.51.100.99")}
		syncOK(t, b, s)
		if id, err := ask(t, c.Client.NS, "tcp", to); err == nil {
			t.Errorf("NodePort answered %q on an address not in NodePortAddresses", id)
		}
	})
}

func TestKernelAffinity(t *testing.T) {
	c := kernelCluster(t)
	a1, b1 := c.Pod("a1"), c.Pod("b1")
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	syncOK(t, b, clusterState(backends.IPv4, svc("sticky", "10.96.0.10", func(s *backends.Service) {
		s.AffinityTimeout = 600
		s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
	})))
	got := counts(t, c.Client.NS, "tcp", cip10, 20)
	if len(got) != 1 {
		t.Errorf("answers %v, want all from one pod", got)
	}
	// Node-originated traffic has another source: it sticks too, maybe
	// to the other pod.
	if got := counts(t, c.Nodes[0].NS, "tcp", cip10, 20); len(got) != 1 {
		t.Errorf("from the node: answers %v, want all from one pod", got)
	}
}

func TestKernelIncremental(t *testing.T) {
	c := kernelCluster(t)
	a1, a2, b1 := c.Pod("a1"), c.Pod("a2"), c.Pod("b1")
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	steps := []struct {
		eps  []*netlab.Pod
		want string
	}{
		{[]*netlab.Pod{a1}, "a1"},
		{[]*netlab.Pod{b1}, "b1"},
		{[]*netlab.Pod{a2}, "a2"},
		{nil, ""}, // no endpoints: refused
		{[]*netlab.Pod{a1}, "a1"},
	}
	for i, st := range steps {
		s := svc("web", "10.96.0.10", func(s *backends.Service) {
			s.NodePort = 30080
			for _, p := range st.eps {
				s.Cluster = append(s.Cluster, podEP(p, backends.IPv4, 1))
			}
		})
		other := svc("other", "10.96.0.20", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(b1, backends.IPv4, 1)}
		})
		syncOK(t, b, clusterState(backends.IPv4, s, other))
		for _, to := range []netip.AddrPort{cip10, netip.AddrPortFrom(c.Nodes[0].IPv4, 30080)} {
			if st.want == "" {
				if _, err := ask(t, c.Client.NS, "tcp", to); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("step %d: %s: got %v, want connection refused", i, to, err)
				}
				continue
			}
			if got := counts(t, c.Client.NS, "tcp", to, 5); got[st.want] != 5 {
				t.Errorf("step %d: %s: answers %v, want %s", i, to, got, st.want)
			}
		}
	}
	if b.stats.rebuilds != 1 || b.stats.failures != 0 {
		t.Errorf("stats %+v: want one rebuild (the first sync) and no failure", b.stats)
	}
}

// TestKernelRestart: a new Backend on the table of a previous one keeps
// established connections and affinity.
func TestKernelRestart(t *testing.T) {
	c := kernelCluster(t)
	a1, b1 := c.Pod("a1"), c.Pod("b1")
	state := clusterState(backends.IPv4, svc("sticky", "10.96.0.10", func(s *backends.Service) {
		s.AffinityTimeout = 600
		s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
	}))
	first := nodeBackend(t, c.Nodes[0], backends.IPv4)
	syncOK(t, first, state)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.Client.NS.Dial(ctx, "tcp", cip10.String())
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

	second := nodeBackend(t, c.Nodes[0], backends.IPv4)
	syncOK(t, second, state)
	if second.stats.rebuilds != 1 {
		t.Fatalf("stats %+v: want a rebuild", second.stats)
	}
	if after, err := netlab.Request(ctx, conn); err != nil || after != before {
		t.Errorf("established connection after the restart: %q, %v; want %q", after, err, before)
	}
	elems := affinityElements(t, c.Nodes[0], state, before)
	if len(elems) != 1 || elems[0] != c.Client.IPv4 {
		t.Errorf("affinity set of %s holds %v, want the client %s", before, elems, c.Client.IPv4)
	}
	if got := counts(t, c.Client.NS, "tcp", cip10, 10); got[before] != 10 {
		t.Errorf("new connections after the restart: answers %v, want all from %s", got, before)
	}
}

// affinityElements lists the affinity set of the endpoint of pod in the
// state's only service, through netlink (not nft).
func affinityElements(t *testing.T, n *netlab.Node, s *backends.State, pod string) []netip.Addr {
	t.Helper()
	svc := &s.Services[0]
	var set string
	for i := range svc.Cluster {
		if p := podByAddr(n, svc.Cluster[i].Addr); p == pod {
			set = affinitySetPrefix + endpointBase(svc, &svc.Cluster[i])
		}
	}
	k, err := newNetlinkKernel(n.NS.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	conn, err := k.(*netlinkKernel).conn(0)
	if err != nil {
		t.Fatal(err)
	}
	table := &nft.Table{Name: DefaultTable, Family: nft.TableFamilyIPv4}
	els, err := conn.GetSetElements(&nft.Set{Table: table, Name: set, KeyType: nft.TypeIPAddr})
	if err != nil {
		t.Fatalf("set %q: %v", set, err)
	}
	var out []netip.Addr
	for _, e := range els {
		a, _ := netip.AddrFromSlice(e.Key)
		out = append(out, a)
	}
	return out
}

func podByAddr(n *netlab.Node, a netip.Addr) string {
	for _, nd := range []*netlab.Node{n} {
		_ = nd
	}
	for _, p := range n.Pods {
		if p.IPv4 == a || p.IPv6 == a {
			return p.Name
		}
	}
	// The pod may be on another node: the cluster's pods are named by
	// node letter, and node-b's is b1.
	if a.Is4() && a.As4()[2] == 2 {
		return "b1"
	}
	return ""
}

func TestKernelCleanup(t *testing.T) {
	c := kernelCluster(t)
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	syncOK(t, b, clusterState(backends.IPv4, svc("web", "10.96.0.10", func(s *backends.Service) {
		s.Cluster = []backends.Endpoint{podEP(c.Pod("a1"), backends.IPv4, 1)}
	})))
	mustAsk(t, c.Client.NS, "tcp", cip10)
	for i := range 2 { // the second finds no table, which is fine
		if err := b.Cleanup(context.Background()); err != nil {
			t.Fatalf("cleanup %d: %v", i, err)
		}
	}
	inv, err := b.k.load(context.Background(), backends.IPv4, DefaultTable)
	if err != nil || inv.exists {
		t.Errorf("after cleanup: table exists %v, %v", inv != nil && inv.exists, err)
	}
	if id, err := ask(t, c.Client.NS, "tcp", cip10); err == nil {
		t.Errorf("ClusterIP answered %q after cleanup", id)
	}
	// A Sync after Cleanup programs the table again.
	syncOK(t, b, clusterState(backends.IPv4, svc("web", "10.96.0.10", func(s *backends.Service) {
		s.Cluster = []backends.Endpoint{podEP(c.Pod("a1"), backends.IPv4, 1)}
	})))
	mustAsk(t, c.Client.NS, "tcp", cip10)
}

func TestKernelIPv6(t *testing.T) {
	c := kernelCluster(t)
	a1, b1 := c.Pod("a1"), c.Pod("b1")
	b := nodeBackend(t, c.Nodes[0], backends.IPv6)
	web := svc("web", "fd00:10:96::10", func(s *backends.Service) {
		s.NodePort = 30080
		s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv6, 1), podEP(b1, backends.IPv6, 3)}
	})
	syncOK(t, b, clusterState(backends.IPv6, web, udpService(web),
		svc("empty", "fd00:10:96::13", nil)))
	cip := netip.MustParseAddrPort("[fd00:10:96::10]:80")
	for _, tt := range []struct {
		name string
		from *netlab.NS
		to   netip.AddrPort
	}{
		{"client to ClusterIP", c.Client.NS, cip},
		{"node to ClusterIP", c.Nodes[0].NS, cip},
		{"client to NodePort", c.Client.NS, netip.AddrPortFrom(c.Nodes[0].IPv6, 30080)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, network := range []string{"tcp", "udp"} {
				if got := counts(t, tt.from, network, tt.to, 40); got["a1"] == 0 || got["b1"] == 0 {
					t.Errorf("%s: answers %v, want both pods", network, got)
				}
			}
		})
	}
	t.Run("no endpoints: rejected", func(t *testing.T) {
		_, err := ask(t, c.Client.NS, "tcp", netip.MustParseAddrPort("[fd00:10:96::13]:80"))
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("got %v, want connection refused", err)
		}
	})
}

// TestKernelStaleChainsDeletedAtOnce: removing a service deletes its
// chains in the transaction that deletes the map elements pointing to
// them, which kernels since 6.2 accept (upstream defers the delete for
// older ones).
func TestKernelStaleChainsDeletedAtOnce(t *testing.T) {
	c := kernelCluster(t)
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	web := svc("web", "10.96.0.10", func(s *backends.Service) {
		s.NodePort, s.AffinityTimeout = 30080, 60
		s.ExternalIPs = []netip.Addr{ip("192.0.2.10")}
		s.Cluster = []backends.Endpoint{podEP(c.Pod("a1"), backends.IPv4, 1), podEP(c.Pod("b1"), backends.IPv4, 1)}
	})
	syncOK(t, b, clusterState(backends.IPv4, web))
	syncOK(t, b, clusterState(backends.IPv4))
	if b.stats.rebuilds != 1 || b.stats.lastOps == 0 {
		t.Fatalf("stats %+v", b.stats)
	}
	inv, err := b.k.load(context.Background(), backends.IPv4, DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	for name := range inv.chains {
		if len(name) > len("service-") && name[:len("service-")] == "service-" && name != "service-endpoints-check" {
			t.Errorf("stale chain %q left", name)
		}
	}
	for name := range inv.sets {
		if len(name) > len(affinitySetPrefix) && name[:len(affinitySetPrefix)] == affinitySetPrefix {
			t.Errorf("stale set %q left", name)
		}
	}
}

// TestKernelLarge programs 3000 service ports with 5 endpoints each (a
// transaction of about 40k messages, past the default socket buffers),
// then changes one.
func TestKernelLarge(t *testing.T) {
	c := kernelCluster(t)
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	s := largeState(3000, 5)
	start := time.Now()
	syncOK(t, b, s)
	full := time.Since(start)
	s.Services[1234].Cluster = s.Services[1234].Cluster[:2]
	start = time.Now()
	syncOK(t, b, s)
	t.Logf("full sync %v (%d operations before), one-service change %v (%d operations)", full, 0, time.Since(start), b.stats.lastOps)
	if b.stats.rebuilds != 1 {
		t.Errorf("stats %+v", b.stats)
	}
}

// TestKernelTransitions applies the state sequence of TestTransitions, in
// order and then in random orders, to the kernel: every incremental
// transaction must be accepted, and the table must hold the chains and
// sets of a fresh plan.
func TestKernelTransitions(t *testing.T) {
	c := kernelCluster(t)
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	states := transitionStates()
	order := make([]int, 0, 4*len(states))
	for i := range states {
		order = append(order, i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3 * len(states) {
		order = append(order, r.IntN(len(states)))
	}
	for step, i := range order {
		if err := b.Sync(context.Background(), states[i]); err != nil {
			t.Fatalf("step %d state %d: %v", step, i, err)
		}
		inv, err := b.k.load(context.Background(), backends.IPv4, DefaultTable)
		if err != nil {
			t.Fatal(err)
		}
		rs := Plan(backends.IPv4, DefaultTable, DefaultMasqueradeBit, states[i])
		var chains, sets []string
		for _, f := range rs.fragments() {
			for _, ch := range f.Chains {
				chains = append(chains, ch.Name)
			}
			for _, s := range f.Sets {
				sets = append(sets, s.Name)
			}
		}
		slices.Sort(chains)
		slices.Sort(sets)
		if got := sortedKeys(inv.chains); !slices.Equal(got, chains) {
			t.Fatalf("step %d state %d: chains %v, want %v", step, i, got, chains)
		}
		if got := sortedKeys(inv.sets); !slices.Equal(got, sets) {
			t.Fatalf("step %d state %d: sets %v, want %v", step, i, got, sets)
		}
	}
	if b.stats.rebuilds != 1 {
		t.Errorf("stats %+v: want one rebuild", b.stats)
	}
}

// TestKernelExternal: external IPs, LB VIPs with source ranges, and
// externalTrafficPolicy Local, from the client routed through node-a.
func TestKernelExternal(t *testing.T) {
	c := kernelCluster(t)
	a1, b1 := c.Pod("a1"), c.Pod("b1")
	for _, p := range []string{"203.0.113.0/24", "192.0.2.0/24"} {
		if err := c.Nodes[0].NS.AddRoute(pfx(p), netip.Addr{}, "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	both := []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	syncOK(t, b, clusterState(backends.IPv4,
		svc("ext", "10.96.0.20", func(s *backends.Service) {
			s.ExternalIPs = []netip.Addr{ip("192.0.2.20")}
			s.Cluster = both
		}),
		svc("lb-allowed", "10.96.0.21", func(s *backends.Service) {
			s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.21")}
			s.LoadBalancerSourceRanges = []netip.Prefix{pfx("198.51.100.0/24")}
			s.Cluster = both
		}),
		svc("lb-denied", "10.96.0.22", func(s *backends.Service) {
			s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.22")}
			s.LoadBalancerSourceRanges = []netip.Prefix{pfx("192.0.2.0/24")}
			s.Cluster = both
		}),
		svc("lb-local", "10.96.0.23", func(s *backends.Service) {
			s.ExternalPolicyLocal = true
			s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.23")}
			s.Cluster = both
			s.Local = []backends.Endpoint{podEP(a1, backends.IPv4, 1)}
		}),
		svc("lb-none-local", "10.96.0.24", func(s *backends.Service) {
			s.ExternalPolicyLocal = true
			s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.24")}
			s.Cluster = []backends.Endpoint{podEP(b1, backends.IPv4, 1)}
			s.Local = []backends.Endpoint{}
		}),
	))
	at := func(s string) netip.AddrPort { return netip.AddrPortFrom(ip(s), 80) }
	t.Run("external IP", func(t *testing.T) {
		if got := counts(t, c.Client.NS, "tcp", at("192.0.2.20"), 30); got["a1"] == 0 || got["b1"] == 0 {
			t.Errorf("answers %v, want both pods", got)
		}
	})
	t.Run("source in the ranges", func(t *testing.T) {
		mustAsk(t, c.Client.NS, "tcp", at("203.0.113.21"))
	})
	t.Run("source outside the ranges: dropped", func(t *testing.T) {
		if id, err := ask(t, c.Client.NS, "tcp", at("203.0.113.22")); !isTimeout(err) {
			t.Errorf("got %q, %v; want a timeout", id, err)
		}
	})
	t.Run("eTP Local: local endpoint only", func(t *testing.T) {
		if got := counts(t, c.Client.NS, "tcp", at("203.0.113.23"), 20); got["a1"] != 20 {
			t.Errorf("answers %v, want only a1", got)
		}
	})
	t.Run("eTP Local, none local: dropped", func(t *testing.T) {
		if id, err := ask(t, c.Client.NS, "tcp", at("203.0.113.24")); !isTimeout(err) {
			t.Errorf("got %q, %v; want a timeout", id, err)
		}
	})
	t.Run("eTP Local, none local: pods short-circuit", func(t *testing.T) {
		if got := mustAsk(t, c.Pod("a2").NS, "tcp", at("203.0.113.24")); got != "b1" {
			t.Errorf("answer %q, want b1", got)
		}
	})
}
