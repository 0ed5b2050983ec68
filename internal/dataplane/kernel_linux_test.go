//go:build linux

package dataplane

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/iptables"
	"github.com/wasp-proxy/wasp/backends/nftables"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/metrics"
	"github.com/wasp-proxy/wasp/host/nodesetup"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// TestModesOnTheKernel runs every row of the table in a throwaway network
// namespace: its probe passes, its backend programs a Service, and wasp
// cleanup's pass over every row leaves nothing of wasp's, whichever mode
// programmed it.
func TestModesOnTheKernel(t *testing.T) {
	lab := netlab.NewForTest(t)
	ctx := context.Background()
	for _, bin := range []string{"nft", "iptables-save", "iptables-legacy-save"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s to read the rules back: %v", bin, err)
		}
	}
	for _, m := range Modes {
		t.Run(string(m.Name), func(t *testing.T) {
			ns, err := lab.AddNS(string(m.Name))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range m.Probe(ctx, ns.Path()) {
				if p.Outcome != nodesetup.Supported {
					t.Skipf("the kernel does not run the %s mode: probe %s: %s: %s", m.Name, p.Name, p.Outcome, p.Reason)
				}
			}
			b, err := m.New(ctx, Opts{Family: backends.IPv4, NetNS: ns.Path()})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			res, err := b.Sync(ctx, webState())
			if err != nil {
				t.Fatal(err)
			}
			if got := leftovers(t, ns); !strings.Contains(got, "10.96.0.10") {
				t.Fatalf("the %s backend programmed no ClusterIP:\n%s", m.Name, got)
			}
			if m.Metrics == metrics.IPTables && (res.Kind != backends.SyncFull || res.Objects[iptables.TableNAT] == 0) {
				t.Errorf("sync result %+v, want a full sync with its nat rules", res)
			}
			for _, c := range Modes {
				if err := c.CleanupLeftovers(ctx, ns.Path(), []backends.Family{backends.IPv4, backends.IPv6}); err != nil {
					t.Errorf("cleanup of the %s mode: %v", c.Name, err)
				}
			}
			if got := leftovers(t, ns); got != "" {
				t.Errorf("left after wasp cleanup:\n%s", got)
			}
		})
	}
}

// ownBackends build each mode's own backend of IPv4 in the network
// namespace at netns, unwrapped: what its row's New wraps.
var ownBackends = map[v1alpha1.ProxyMode]func(ctx context.Context, netns string) (backends.Backend, error){
	v1alpha1.ProxyModeNFTables: func(_ context.Context, netns string) (backends.Backend, error) {
		return nftables.New(nftables.Opts{Family: backends.IPv4, NetNS: netns})
	},
	v1alpha1.ProxyModeIPTables: func(ctx context.Context, netns string) (backends.Backend, error) {
		return iptables.New(ctx, iptables.Opts{Family: backends.IPv4, NetNS: netns})
	},
}

// TestModesCheckDrift: every row's backend, as wasp run builds it, is a
// backends.DriftChecker exactly when the mode's own backend is (a wrapper
// that hid the check would leave the mode unchecked in production), and
// its check reads the mode's dataplane: nothing after a Sync, drift once
// wasp's objects are gone behind its back.
func TestModesCheckDrift(t *testing.T) {
	lab := netlab.NewForTest(t)
	ctx := context.Background()
	for _, m := range Modes {
		t.Run(string(m.Name), func(t *testing.T) {
			own := ownBackends[m.Name]
			if own == nil {
				t.Fatalf("no own backend of mode %s in this test's table", m.Name)
			}
			ns, err := lab.AddNS("drift-" + string(m.Name))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range m.Probe(ctx, ns.Path()) {
				if p.Outcome != nodesetup.Supported {
					t.Skipf("the kernel does not run the %s mode: probe %s: %s: %s", m.Name, p.Name, p.Outcome, p.Reason)
				}
			}
			raw, err := own(ctx, ns.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			b, err := m.New(ctx, Opts{Family: backends.IPv4, NetNS: ns.Path()})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			_, want := raw.(backends.DriftChecker)
			dc, got := b.(backends.DriftChecker)
			if got != want {
				t.Fatalf("wasp run's backend is a DriftChecker: %v; the mode's own backend: %v", got, want)
			}
			if !got {
				return
			}
			if _, err := b.Sync(ctx, webState()); err != nil {
				t.Fatal(err)
			}
			if d, err := dc.CheckDrift(ctx); d != nil || err != nil {
				t.Fatalf("after a sync: %+v, %v", d, err)
			}
			if err := m.CleanupLeftovers(ctx, ns.Path(), []backends.Family{backends.IPv4}); err != nil {
				t.Fatal(err)
			}
			if d, err := dc.CheckDrift(ctx); d.Empty() || err != nil {
				t.Fatalf("after wasp's objects were removed: %+v, %v; want drift", d, err)
			}
		})
	}
}

// leftovers returns what of wasp's the rules of ns hold: its nftables
// tables and the WASP- lines of both iptables variants and families.
func leftovers(t *testing.T, ns *netlab.NS) string {
	t.Helper()
	var out []string
	run := func(name string, args ...string) string {
		b, err := ns.Command(context.Background(), name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, b)
		}
		return string(b)
	}
	if tables := run("nft", "list", "tables"); strings.Contains(tables, " wasp") {
		out = append(out, run("nft", "list", "ruleset"))
	}
	for _, save := range []string{"iptables-save", "ip6tables-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
		if _, err := exec.LookPath(save); err != nil {
			continue
		}
		for _, line := range strings.Split(run(save), "\n") {
			if strings.Contains(line, "WASP-") {
				out = append(out, save+": "+line)
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestIPTablesReadsBeLiberal: the iptables mode drops INVALID packets
// unless the node sets nf_conntrack_tcp_be_liberal, which it reads at
// start as upstream does, whether or not wasp's configuration set it.
func TestIPTablesReadsBeLiberal(t *testing.T) {
	lab := netlab.NewForTest(t)
	ctx := context.Background()
	m, err := Lookup("iptables")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sysctl   string
		wantDrop bool
	}{{"0", true}, {"1", false}} {
		t.Run("be_liberal="+tc.sysctl, func(t *testing.T) {
			ns, err := lab.AddNS("liberal" + tc.sysctl)
			if err != nil {
				t.Fatal(err)
			}
			if p := m.Probe(ctx, ns.Path()); p[0].Outcome != nodesetup.Supported {
				t.Skipf("the kernel does not run the iptables mode: %s", p[0].Reason)
			}
			if err := ns.Sysctl("net/netfilter/nf_conntrack_tcp_be_liberal", tc.sysctl); err != nil {
				t.Skipf("nf_conntrack_tcp_be_liberal: %v", err)
			}
			b, err := m.New(ctx, Opts{Family: backends.IPv4, NetNS: ns.Path()})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, err := b.Sync(ctx, webState()); err != nil {
				t.Fatal(err)
			}
			rules, err := ns.Command(ctx, "iptables-save", "-t", "filter").CombinedOutput()
			if err != nil {
				t.Fatalf("iptables-save: %v: %s", err, rules)
			}
			if drop := strings.Contains(string(rules), "--ctstate INVALID -j DROP"); drop != tc.wantDrop {
				t.Errorf("INVALID drop rule %v, want %v:\n%s", drop, tc.wantDrop, rules)
			}
		})
	}
}
