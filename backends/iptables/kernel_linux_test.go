//go:build linux

package iptables

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// Kernel tests program real iptables, with iptables-legacy and with
// iptables-nft (each test runs once per variant), in a node of a netlab
// cluster (netlab's address plan: node-a 198.51.100.11 with pods
// 10.244.1.0/24, node-b 198.51.100.12 with pods 10.244.2.0/24, client
// 198.51.100.200 routed through node-a) and send real packets through
// it. They skip with the reason in -short mode, without root, or when a
// variant's binaries are missing.

// eachVariant runs f for both variants as subtests, each on a cluster of
// its own.
func eachVariant(t *testing.T, f func(t *testing.T, v xtables.Variant, c *netlab.Cluster)) {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel test: skipped in -short mode")
	}
	for _, v := range []xtables.Variant{xtables.Legacy, xtables.NFT} {
		t.Run(string(v), func(t *testing.T) {
			f(t, v, kernelCluster(t, v))
		})
	}
}

// kernelCluster builds a two-node cluster with pods a1, a2 on node-a and
// b1 on node-b, or skips the test with the reason it cannot.
func kernelCluster(t *testing.T, v xtables.Variant) *netlab.Cluster {
	t.Helper()
	if err := netlab.Probe(); err != nil {
		t.Skipf("kernel test: %v", err)
	}
	lab := netlab.NewForTest(t)
	c, err := netlab.BuildCluster(lab, netlab.ClusterSpec{Nodes: []netlab.NodeSpec{
		{Name: "node-a", Pods: []string{"a1", "a2"}},
		{Name: "node-b", Pods: []string{"b1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := xtables.New(v, backends.IPv4, c.Nodes[0].NS.Path())
	if err != nil {
		t.Skipf("kernel test: iptables %s: %v", v, err)
	}
	if _, err := r.Save(context.Background(), TableNAT); err != nil {
		t.Skipf("kernel test: iptables %s has no usable nat table: %v", v, err)
	}
	return c
}

// kernelNS returns the path of a fresh network namespace named name, or
// skips tb, saying what it is ("kernel test", "kernel benchmark"), in
// -short mode or where netlab cannot make one.
func kernelNS(tb testing.TB, what, name string) string {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("%s: skipped in -short mode", what)
	}
	if err := netlab.Probe(); err != nil {
		tb.Skipf("%s: %v", what, err)
	}
	ns, err := netlab.NewForTest(tb).AddNS(name)
	if err != nil {
		tb.Fatal(err)
	}
	return ns.Path()
}

// nodeBackend returns a Backend programming node's namespace with v.
func nodeBackend(t *testing.T, n *netlab.Node, v xtables.Variant, family backends.Family) *Backend {
	t.Helper()
	b, err := New(context.Background(), Opts{Family: family, NetNS: n.NS.Path(), Variant: v, LocalhostNodePorts: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func syncOK(t *testing.T, b *Backend, s *backends.State) {
	t.Helper()
	if _, err := b.Sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// podEP is the endpoint of pod p's echo server in family.
func podEP(p *netlab.Pod, family backends.Family, w uint32) backends.Endpoint {
	a := p.IPv4
	if family == backends.IPv6 {
		a = p.IPv6
	}
	return backends.Endpoint{Addr: a, Port: 8080, Weight: w}
}

// clusterState returns an IPv4 State of backendtest's plan (netlab's)
// with the given service ports.
func clusterState(_ *netlab.Cluster, svcs ...backends.Service) *backends.State {
	return backendtest.State(backends.IPv4, svcs...)
}

var cip10 = netip.MustParseAddrPort("10.96.0.10:80")

func ask(from *netlab.NS, network string, to netip.AddrPort, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return from.Ask(ctx, network, to.String())
}

func counts(t *testing.T, from *netlab.NS, network string, to netip.AddrPort, n int) map[string]int {
	t.Helper()
	return backendtest.Counts(t, from, network, to, n)
}

// savedChains returns the chains of table in node's iptables of v.
func savedChains(t *testing.T, n *netlab.Node, v xtables.Variant, table string) []string {
	t.Helper()
	r, err := xtables.New(v, backends.IPv4, n.NS.Path())
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Save(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	return chainNames(out)
}

// TestKernelGoldenLoads: the golden states' restores are accepted by both
// variants, IPv4 and IPv6, leave the chains the Fake has, a second Sync of
// the same state writes nothing, and neither does a restart's full sync;
// a drift check, twice (the second compares lines by hash), finds
// nothing.
func TestKernelGoldenLoads(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		for _, s := range []*backends.State{goldenState4(), goldenState6()} {
			b := nodeBackend(t, c.Nodes[0], v, s.Family)
			if _, err := b.Sync(context.Background(), s); err != nil {
				t.Fatalf("%s: %v", s.Family, err)
			}
			syncOK(t, b, s)
			if b.stats.written != 0 || b.LastSync().Full {
				t.Errorf("%s: the second sync wrote %d chains, full %v", s.Family, b.stats.written, b.LastSync().Full)
			}
			// A restart's full sync reads every chain back as planned
			// (canonRule knows how iptables-save shows each rule) and
			// writes nothing.
			again := nodeBackend(t, c.Nodes[0], v, s.Family)
			syncOK(t, again, s)
			if again.stats.written != 0 || again.stats.stale != 0 || again.stats.jumps != 0 || !again.LastSync().Full {
				t.Errorf("%s: a restart's full sync wrote %d chains, deleted %d, added %d jumps, full %v; want nothing",
					s.Family, again.stats.written, again.stats.stale, again.stats.jumps, again.LastSync().Full)
			}
			for range 2 {
				if d, err := again.CheckDrift(context.Background()); d != nil || err != nil {
					t.Errorf("%s: drift check: %+v, %v; want none", s.Family, d, err)
				}
			}
			r, err := xtables.New(v, s.Family, c.Nodes[0].NS.Path())
			if err != nil {
				t.Fatal(err)
			}
			f := syncedFake(t, Opts{Family: s.Family, LocalhostNodePorts: true}, s)
			for _, table := range []string{TableNAT, TableFilter} {
				out, err := r.Save(context.Background(), table)
				if err != nil {
					t.Fatal(err)
				}
				got, want := ours(chainNames(out)), ours(chainNames([]byte(f.Save(table))))
				if !slices.Equal(got, want) {
					t.Errorf("%s %s: chains %v, the fake has %v", s.Family, table, got, want)
				}
				if n := strings.Count(string(out), "\n-A "+Prefix); n != b.LastSync().Rules[table] {
					t.Errorf("%s %s: %d rules in wasp's chains, LastSync says %d", s.Family, table, n, b.LastSync().Rules[table])
				}
			}
		}
	})
}

// ours returns the sorted chains of wasp's in names.
func ours(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, Prefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// TestKernelHairpin: a pod reaching itself through its service, over
// IPv4 and IPv6, TCP and UDP, lands on itself and is masqueraded by the
// hairpin set's rule (else its answer would go to itself, not back
// through the node); its neighbour lands on it too, not masqueraded. The
// pod's bridge port needs hairpin mode, as kubelet's hairpin-veth sets
// it: with bridge-nf-call-iptables, the DNATed packet is bridged back out
// of the port it came in by.
func TestKernelHairpin(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		a1, a2 := c.Pod("a1"), c.Pod("a2")
		if out, err := c.Nodes[0].NS.Command(context.Background(), "ip", "link", "set", "vp1", "type", "bridge_slave", "hairpin", "on").CombinedOutput(); err != nil {
			t.Fatalf("hairpin mode on a1's port: %v: %s", err, out)
		}
		for _, family := range []backends.Family{backends.IPv4, backends.IPv6} {
			t.Run(family.String(), func(t *testing.T) {
				b := nodeBackend(t, c.Nodes[0], v, family)
				cip := backendtest.ClusterIP(family, 10)
				web := svc("web", cip.String(), func(s *backends.Service) { s.Cluster = []backends.Endpoint{podEP(a1, family, 1)} })
				syncOK(t, b, backendtest.State(family, web, backendtest.UDPTwin(web)))
				entries, err := b.k.listSet(context.Background(), hairpinSet(family))
				if err != nil {
					t.Fatal(err)
				}
				ep := podEP(a1, family, 1)
				if want := []HairpinEntry{{ep.Addr, backends.TCP, ep.Port}, {ep.Addr, backends.UDP, ep.Port}}; len(entries) != 2 ||
					!slices.Contains(entries, want[0]) || !slices.Contains(entries, want[1]) {
					t.Fatalf("hairpin set %v, want %v", entries, want)
				}
				to := netip.AddrPortFrom(cip, 80)
				for _, from := range []*netlab.Pod{a1, a2} {
					own := podEP(from, family, 1).Addr
					for _, network := range []string{"tcp", "udp"} {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						id, peer, err := from.NS.AskPeer(ctx, network, to.String())
						cancel()
						switch {
						case err != nil || id != "a1":
							t.Errorf("%s from %s: answer %q, %v; want a1", network, from.Name, id, err)
						case from == a1 && peer.Addr() == own:
							t.Errorf("%s from a1 to itself: seen from its own address %s, want masqueraded", network, peer)
						case from != a1 && peer.Addr() != own:
							t.Errorf("%s from %s: seen from %s, want its own address %s", network, from.Name, peer, own)
						}
					}
				}
			})
		}
	})
}

// TestKernelHairpinSetReconciled: a restart's full sync brings the
// hairpin set in line with the plan: an entry deleted behind wasp's back
// comes back, one wasp did not write goes, and the set equals a fresh
// sync's; Cleanup destroys it.
func TestKernelHairpinSetReconciled(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		ctx := context.Background()
		a1, b1 := c.Pod("a1"), c.Pod("b1")
		web := svc("web", "10.96.0.10", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
		})
		s := clusterState(c, web, backendtest.UDPTwin(web))
		syncOK(t, nodeBackend(t, c.Nodes[0], v, backends.IPv4), s)
		sets := netnsSets{c.Nodes[0].NS.Path()}
		want, err := sets.listSet(ctx, SetHairpin4)
		if err != nil {
			t.Fatal(err)
		}
		if err := sets.delFromSet(ctx, SetHairpin4, want[:1]); err != nil {
			t.Fatal(err)
		}
		err = sets.do(func() error {
			proto, port := uint8(17), uint16(53)
			return netlink.IpsetAdd(SetHairpin4, &netlink.IPSetEntry{IP: net.ParseIP("10.9.9.9"), IP2: net.ParseIP("10.9.9.8"), Protocol: &proto, Port: &port})
		})
		if err != nil {
			t.Fatalf("add a foreign entry: %v", err)
		}
		b := nodeBackend(t, c.Nodes[0], v, backends.IPv4)
		syncOK(t, b, s)
		got, err := sets.listSet(ctx, SetHairpin4)
		if err != nil {
			t.Fatal(err)
		}
		sortEntries(got)
		sortEntries(want)
		if !slices.Equal(got, want) || b.stats.setAdds != 1 {
			t.Errorf("hairpin set after the restart %v (%d added), want %v (1 added)", got, b.stats.setAdds, want)
		}
		var raw *netlink.IPSetResult
		if err := sets.do(func() (err error) { raw, err = netlink.IpsetList(SetHairpin4); return err }); err != nil {
			t.Fatal(err)
		}
		if len(raw.Entries) != len(want) {
			t.Errorf("the set holds %d entries, want %d: %+v", len(raw.Entries), len(want), raw.Entries)
		}
		if err := b.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := sets.listSet(ctx, SetHairpin4); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the set after Cleanup: %v, want it gone", err)
		}
	})
}

// TestKernelAffinityRecordsTheChosenEndpoint: a new client's first
// connection puts it in the affinity list of the endpoint that answered
// and in no other: the statistic match comes before "recent --set" in
// each rule, so a rule whose statistic match fails records nothing. Ten
// trials, each from emptied lists; were the order reversed, the first
// endpoint's list would take the client whichever endpoint answered.
func TestKernelAffinityRecordsTheChosenEndpoint(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		a1, b1 := c.Pod("a1"), c.Pod("b1")
		web := svc("web", "10.96.0.10", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
			s.AffinityTimeout = 600
		})
		syncOK(t, nodeBackend(t, c.Nodes[0], v, backends.IPv4), clusterState(c, web))
		base := newServiceChains(&web).base
		lists := map[string]string{"a1": endpointName(base, &web.Cluster[0]), "b1": endpointName(base, &web.Cluster[1])}
		client := c.Client.IPv4.String()
		// proc reads or, with write, empties an affinity list of the node.
		proc := func(list, write string) (string, error) {
			var out []byte
			err := c.Nodes[0].NS.Do(func() (err error) {
				file := "/proc/thread-self/net/xt_recent/" + list
				if write != "" {
					return os.WriteFile(file, []byte(write), 0o600)
				}
				out, err = os.ReadFile(file)
				return err
			})
			return string(out), err
		}
		for trial := range 10 {
			for _, list := range lists {
				if _, err := proc(list, "/"); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ask(c.Client.NS, "tcp", cip10, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for pod, list := range lists {
				content, err := proc(list, "")
				if err != nil {
					t.Fatal(err)
				}
				if in := strings.Contains(content, "src="+client+" "); in != (pod == got) {
					t.Fatalf("trial %d: %s answered; the client in %s's list %s: %v, want %v:\n%s", trial, got, pod, list, in, pod == got, content)
				}
			}
		}
	})
}

// TestKernelLocalhostNodePort: with localhost NodePorts, the node
// reaches a NodePort on 127.0.0.1 (route_localnet set, masqueraded to the
// node's address); the suites cover the other NodePorts.
func TestKernelLocalhostNodePort(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		a1, b1 := c.Pod("a1"), c.Pod("b1")
		web := svc("web", "10.96.0.10", func(s *backends.Service) {
			s.NodePort = 30080
			s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
		})
		b := nodeBackend(t, c.Nodes[0], v, backends.IPv4)
		syncOK(t, b, clusterState(c, web))
		got := counts(t, c.Nodes[0].NS, "tcp", netip.MustParseAddrPort("127.0.0.1:30080"), 20)
		if got["a1"] == 0 || got["b1"] == 0 {
			t.Errorf("answers %v, want both a1 and b1", got)
		}
	})
}

// TestKernelPartialAndStale: endpoint changes are partial syncs that
// rewrite only the changed chains; a service port that leaves has its
// chains deleted in the same restore.
func TestKernelPartialAndStale(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		a1, a2, b1 := c.Pod("a1"), c.Pod("a2"), c.Pod("b1")
		b := nodeBackend(t, c.Nodes[0], v, backends.IPv4)
		other := svc("other", "10.96.0.20", func(s *backends.Service) {
			s.NodePort = 30020
			s.Cluster = []backends.Endpoint{podEP(b1, backends.IPv4, 1)}
		})
		otherChains := newServiceChains(&other)
		for i, st := range []struct {
			eps       []*netlab.Pod
			withOther bool
			want      string
		}{
			{[]*netlab.Pod{a1}, true, "a1"},
			{[]*netlab.Pod{b1}, true, "b1"},
			{[]*netlab.Pod{a2}, false, "a2"},
			{nil, false, ""}, // no endpoints: refused
			{[]*netlab.Pod{a1}, true, "a1"},
		} {
			web := svc("web", "10.96.0.10", func(s *backends.Service) {
				s.NodePort = 30080
				for _, p := range st.eps {
					s.Cluster = append(s.Cluster, podEP(p, backends.IPv4, 1))
				}
			})
			s := clusterState(c, web)
			if st.withOther {
				s = clusterState(c, web, other)
			}
			syncOK(t, b, s)
			for _, to := range []netip.AddrPort{cip10, netip.AddrPortFrom(c.Nodes[0].IPv4, 30080)} {
				if st.want == "" {
					if _, err := ask(c.Client.NS, "tcp", to, 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
						t.Errorf("step %d: %s: got %v, want connection refused", i, to, err)
					}
					continue
				}
				if got := counts(t, c.Client.NS, "tcp", to, 5); got[st.want] != 5 {
					t.Errorf("step %d: %s: answers %v, want %s", i, to, got, st.want)
				}
			}
			chains := savedChains(t, c.Nodes[0], v, TableNAT)
			if has := slices.Contains(chains, otherChains.svc); has != st.withOther {
				t.Errorf("step %d: chain %s of the other service present %v, want %v", i, otherChains.svc, has, st.withOther)
			}
			if got, want := ours(chains), ours(chainNames([]byte(syncedFake(t, opts4, s).Save(TableNAT)))); !slices.Equal(got, want) {
				t.Errorf("step %d: chains %v, want %v", i, got, want)
			}
		}
		if b.stats.full != 1 || b.stats.failures != 0 {
			t.Errorf("stats %+v: want one full sync (the first) and no failure", b.stats)
		}
	})
}

// TestKernelRestoreFailure: a restore the kernel refuses (a chain to
// delete that a rule of the operator's still jumps to) fails with the
// line, changes nothing, and the syncs after it are full until one
// succeeds.
func TestKernelRestoreFailure(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		a1 := c.Pod("a1")
		b := nodeBackend(t, c.Nodes[0], v, backends.IPv4)
		web := svc("web", "10.96.0.10", func(s *backends.Service) { s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1)} })
		other := svc("other", "10.96.0.20", func(s *backends.Service) { s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1)} })
		syncOK(t, b, clusterState(c, web, other))
		r, err := xtables.New(v, backends.IPv4, c.Nodes[0].NS.Path())
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		pin := []string{"-s", "192.0.2.99/32", "-j", newServiceChains(&other).svc}
		if _, err := r.EnsureRule(ctx, TableNAT, chainPrerouting, pin...); err != nil {
			t.Fatal(err)
		}
		before := savedChains(t, c.Nodes[0], v, TableNAT)
		_, err = b.Sync(ctx, clusterState(c, web))
		var le *LineError
		if !errors.Is(err, ErrRestore) || !errors.Is(err, ErrPartialRestore) || !errors.As(err, &le) || !strings.HasPrefix(le.Text, "-X ") {
			t.Fatalf("got %v, want a partial restore failure at the -X line", err)
		}
		t.Logf("error: %v", err)
		if after := savedChains(t, c.Nodes[0], v, TableNAT); !slices.Equal(after, before) {
			t.Errorf("the failed restore changed the chains: %v, was %v", after, before)
		}
		if got := counts(t, c.Client.NS, "tcp", netip.MustParseAddrPort("10.96.0.20:80"), 3); got["a1"] != 3 {
			t.Errorf("the other service after the failure: %v", got)
		}
		if _, err := b.Sync(ctx, clusterState(c, web)); !errors.Is(err, ErrRestore) || errors.Is(err, ErrPartialRestore) {
			t.Fatalf("the retry: got %v, want a full sync's failure", err)
		}
		if err := r.DeleteRule(ctx, TableNAT, chainPrerouting, pin...); err != nil {
			t.Fatal(err)
		}
		syncOK(t, b, clusterState(c, web))
		if !b.LastSync().Full || slices.Contains(savedChains(t, c.Nodes[0], v, TableNAT), newServiceChains(&other).svc) {
			t.Errorf("the recovery: full %v, chains %v", b.LastSync().Full, ours(savedChains(t, c.Nodes[0], v, TableNAT)))
		}
	})
}

// TestKernelRestart: a new Backend reconciles the chains of a previous
// one, with another state, without breaking an established connection,
// and CleanupLeftovers then removes everything of wasp's.
func TestKernelRestart(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		a1, b1 := c.Pod("a1"), c.Pod("b1")
		web := svc("web", "10.96.0.10", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
		})
		first := nodeBackend(t, c.Nodes[0], v, backends.IPv4)
		syncOK(t, first, clusterState(c, web, svc("gone", "10.96.0.30", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(b1, backends.IPv4, 1)}
		})))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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

		second := nodeBackend(t, c.Nodes[0], v, backends.IPv4)
		s := clusterState(c, web, svc("new", "10.96.0.31", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1)}
		}))
		for range 3 {
			syncOK(t, second, s)
			if after, err := netlab.Request(ctx, conn); err != nil || after != before {
				t.Fatalf("established connection after the restart: %q, %v; want %q", after, err, before)
			}
		}
		if got, want := ours(savedChains(t, c.Nodes[0], v, TableNAT)), ours(chainNames([]byte(syncedFake(t, opts4, s).Save(TableNAT)))); !slices.Equal(got, want) {
			t.Errorf("chains after the restart %v, want %v", got, want)
		}
		if got := counts(t, c.Client.NS, "tcp", netip.MustParseAddrPort("10.96.0.31:80"), 3); got["a1"] != 3 {
			t.Errorf("the new service: %v", got)
		}

		if err := CleanupLeftovers(context.Background(), c.Nodes[0].NS.Path()); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{TableNAT, TableFilter} {
			if left := ours(savedChains(t, c.Nodes[0], v, table)); len(left) != 0 {
				t.Errorf("%s: chains left after CleanupLeftovers: %v", table, left)
			}
		}
		if _, err := (netnsSets{c.Nodes[0].NS.Path()}).listSet(context.Background(), SetHairpin4); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the hairpin set after CleanupLeftovers: %v, want it gone", err)
		}
		if _, err := ask(c.Client.NS, "tcp", cip10, 700*time.Millisecond); err == nil {
			t.Error("the ClusterIP answers after CleanupLeftovers")
		}
	})
}

// TestKernelUpgradeFromEndpointChains: on a node whose nat table holds a
// service in the layout of wasp's earlier versions (one chain per
// endpoint), the first Sync deletes the endpoint chains, and the service
// answers from both endpoints.
func TestKernelUpgradeFromEndpointChains(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		a1, b1 := c.Pod("a1"), c.Pod("b1")
		web := svc("web", "10.96.0.10", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
		})
		s := clusterState(c, web)
		r, err := xtables.New(v, backends.IPv4, c.Nodes[0].NS.Path())
		if err != nil {
			t.Fatal(err)
		}
		in, seps := endpointChainsLayout(s)
		if err := r.Restore(context.Background(), []byte(in)); err != nil {
			t.Fatal(err)
		}
		if got := ours(savedChains(t, c.Nodes[0], v, TableNAT)); !slices.Contains(got, seps[0]) {
			t.Fatalf("the earlier layout was not programmed: %v", got)
		}
		syncOK(t, nodeBackend(t, c.Nodes[0], v, backends.IPv4), s)
		for _, name := range ours(savedChains(t, c.Nodes[0], v, TableNAT)) {
			if strings.HasPrefix(name, prefixSEP) {
				t.Errorf("endpoint chain %s left after the first sync", name)
			}
		}
		if got := counts(t, c.Client.NS, "tcp", cip10, 20); got["a1"] == 0 || got["b1"] == 0 {
			t.Errorf("answers %v, want both a1 and b1", got)
		}
	})
}

func TestKernelProbe(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		if err := Probe(context.Background(), c.Nodes[0].NS.Path()); err != nil {
			t.Fatal(err)
		}
		if left := ours(savedChains(t, c.Nodes[0], v, TableNAT)); len(left) != 0 {
			t.Errorf("the probe left chains %v", left)
		}
		if _, err := (netnsSets{c.Nodes[0].NS.Path()}).listSet(context.Background(), probeSet); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the probe's set: %v, want it gone", err)
		}
	})
}

// TestKernelDrift: changes behind wasp's back that break a service port
// are found by CheckDrift, with both variants: one DNAT rule of its
// policy chain deleted, the chain flushed (iptables -D, -F), a firewall
// reload that deletes wasp's chains; the next Sync brings the service
// back.
func TestKernelDrift(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		ctx := context.Background()
		node := c.Nodes[0]
		b := nodeBackend(t, node, v, backends.IPv4)
		s := clusterState(c, svc("web", "10.96.0.10", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(c.Pod("a1"), backends.IPv4, 1), podEP(c.Pod("a2"), backends.IPv4, 1)}
		}))
		policy := newServiceChains(&s.Services[0]).svc
		iptables := func(args ...string) func(t *testing.T) {
			return func(t *testing.T) {
				if out, err := node.NS.Command(ctx, "iptables-"+string(v), args...).CombinedOutput(); err != nil {
					t.Fatalf("iptables %v: %v: %s", args, err, out)
				}
			}
		}
		for _, tc := range []struct {
			name   string
			meddle func(t *testing.T)
			kind   string
			broken bool // the service answers no more
		}{
			// Rule 1 of the policy chain marks for masquerade, rule 2
			// DNATs to a1 with a probability of 1/2, rule 3 to a2.
			{"DNAT rule deleted", iptables("-t", "nat", "-D", policy, "2"), backends.DriftRule, false},
			{"policy chain flushed", iptables("-t", "nat", "-F", policy), backends.DriftRule, true},
			{"firewall reload", func(t *testing.T) {
				if err := CleanupLeftovers(ctx, node.NS.Path()); err != nil {
					t.Fatal(err)
				}
			}, backends.DriftChain, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				syncOK(t, b, s)
				if d, err := b.CheckDrift(ctx); d != nil || err != nil {
					t.Fatalf("after a sync: %v, %v", d, err)
				}
				tc.meddle(t)
				if _, err := ask(c.Client.NS, "tcp", cip10, 700*time.Millisecond); tc.broken && err == nil {
					t.Fatal("the service answers after the change")
				}
				d, err := b.CheckDrift(ctx)
				if err != nil || d.Objects[tc.kind] == 0 {
					t.Fatalf("after the change: %+v, %v; want %s drift", d, err, tc.kind)
				}
				t.Logf("found: %v %q", d.Objects, d.Examples)
				if tc.name == "DNAT rule deleted" && !strings.Contains(d.Examples[0], "rule 2 differs") {
					t.Errorf("examples %q: want rule 2 named", d.Examples)
				}
				syncOK(t, b, s)
				if d, err := b.CheckDrift(ctx); d != nil || err != nil {
					t.Errorf("after the repair: %v, %v", d, err)
				}
				if got := counts(t, c.Client.NS, "tcp", cip10, 20); got["a1"] == 0 || got["a2"] == 0 {
					t.Errorf("after the repair: answers %v, want both endpoints", got)
				}
			})
		}
	})
}

// TestKernelBesideKubeProxy: wasp's chains and a kube-proxy's (KUBE-
// chains sending the same ClusterIP to another pod) live side by side,
// as during a migration: wasp's restores and Cleanup never touch the
// KUBE- chains, an established connection through kube-proxy's rules
// keeps working while wasp takes over new connections (its jumps come
// first in the built-in chains), and removing kube-proxy's chains
// afterwards breaks nothing of wasp's.
func TestKernelBesideKubeProxy(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		ctx := context.Background()
		r, err := xtables.New(v, backends.IPv4, c.Nodes[0].NS.Path())
		if err != nil {
			t.Fatal(err)
		}
		// A ClusterIP to b1, masqueraded (the client is off-cluster).
		b1 := c.Pod("b1").IPv4.String()
		kube := "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-TEST - [0:0]\n:KUBE-SEP-TEST - [0:0]\n:KUBE-POSTROUTING - [0:0]\n" +
			"-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-TEST\n" +
			"-A KUBE-SVC-TEST -j KUBE-SEP-TEST\n" +
			"-A KUBE-SEP-TEST -p tcp -m tcp -j DNAT --to-destination " + b1 + ":8080\n" +
			"-A KUBE-POSTROUTING -d " + b1 + "/32 -p tcp -m tcp --dport 8080 -j MASQUERADE\nCOMMIT\n"
		if err := r.Restore(ctx, []byte(kube)); err != nil {
			t.Fatal(err)
		}
		kubeJumps := [][2]string{{chainPrerouting, "KUBE-SERVICES"}, {chainOutput, "KUBE-SERVICES"}, {chainPostrouting, "KUBE-POSTROUTING"}}
		for _, j := range kubeJumps {
			if _, err := r.EnsureRule(ctx, TableNAT, j[0], "-j", j[1]); err != nil {
				t.Fatal(err)
			}
		}
		kubeRules := func() string {
			out, err := r.Save(ctx, TableNAT)
			if err != nil {
				t.Fatal(err)
			}
			var ls []string
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "KUBE-") {
					ls = append(ls, l)
				}
			}
			return strings.Join(ls, "\n")
		}
		before := kubeRules()
		if got := counts(t, c.Client.NS, "tcp", cip10, 3); got["b1"] != 3 {
			t.Fatalf("through kube-proxy's rules: answers %v, want b1", got)
		}
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		conn, err := c.Client.NS.Dial(dctx, "tcp", cip10.String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if id, err := netlab.Request(dctx, conn); err != nil || id != "b1" {
			t.Fatalf("established connection: %q, %v", id, err)
		}

		b := nodeBackend(t, c.Nodes[0], v, backends.IPv4)
		s := clusterState(c, svc("web", "10.96.0.10", func(s *backends.Service) {
			s.Cluster = []backends.Endpoint{podEP(c.Pod("a1"), backends.IPv4, 1)}
		}))
		syncOK(t, b, s)
		if got := counts(t, c.Client.NS, "tcp", cip10, 3); got["a1"] != 3 {
			t.Errorf("with both: new connections answered by %v, want wasp's a1", got)
		}
		if id, err := netlab.Request(dctx, conn); err != nil || id != "b1" {
			t.Errorf("established connection with both: %q, %v; want b1", id, err)
		}
		if after := kubeRules(); after != before {
			t.Errorf("wasp's sync changed kube-proxy's rules:\n%s\nwas\n%s", after, before)
		}

		// kube-proxy leaves: its chains and jumps go.
		for _, j := range kubeJumps {
			if err := r.DeleteRule(ctx, TableNAT, j[0], "-j", j[1]); err != nil {
				t.Fatal(err)
			}
		}
		for _, chain := range []string{"KUBE-SERVICES", "KUBE-SVC-TEST", "KUBE-SEP-TEST", "KUBE-POSTROUTING"} {
			if err := r.DeleteChain(ctx, TableNAT, chain); err != nil {
				t.Fatal(err)
			}
		}
		if id, err := netlab.Request(dctx, conn); err != nil || id != "b1" {
			t.Errorf("established connection after kube-proxy left: %q, %v; want b1", id, err)
		}
		syncOK(t, b, s)
		if got := counts(t, c.Client.NS, "tcp", cip10, 3); got["a1"] != 3 {
			t.Errorf("after kube-proxy left: answers %v, want a1", got)
		}
	})
}
