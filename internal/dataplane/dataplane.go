// Package dataplane is wasp's table of proxy modes: for each mode a node
// can run (kube-proxy's names: nftables, iptables), the constructor of its
// backend, the kernel probe of its node setup, the cleanup of what it
// leaves behind, and the mode whose upstream metric series it exports.
// cmd/wasp picks the row of the configured mode; wasp cleanup runs the
// cleanup of every row.
//
// It is the one package besides cmd/ that imports both the backends and
// host/: host/ never imports a backend (RATIONALE.md), and the table is
// wiring, shared by the commands.
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/conntrack"
	"github.com/wasp-proxy/wasp/backends/iptables"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
	"github.com/wasp-proxy/wasp/backends/nftables"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/metrics"
	"github.com/wasp-proxy/wasp/host/nodesetup"
)

// Opts configure the backend of one family. The fields mean what those of
// the backends' own Opts of the same name mean; a mode ignores those it
// has no use for (nftables: LocalhostNodePorts, which upstream's nftables
// mode never serves; TCPBeLiberal; FullSyncPeriod, as it diffs against
// what it programmed).
type Opts struct {
	Family             backends.Family // required
	NetNS              string          // optional
	MasqueradeBit      int             // optional: 0 is backends.DefaultMasqueradeBit
	LocalhostNodePorts bool            // optional
	TCPBeLiberal       bool            // optional
	FullSyncPeriod     time.Duration   // optional
	// Conntrack is told about the conntrack cleaner's work, for metrics.
	// Optional.
	Conntrack conntrack.Observer
}

// Mode is one row of the table.
type Mode struct {
	// Name is the mode, as the configuration's mode spells it.
	Name v1alpha1.ProxyMode
	// Metrics is the mode of the upstream metric series it exports.
	Metrics metrics.Mode
	// New returns the backend of o.Family, wrapped in the conntrack
	// cleaner, which clears the stale UDP entries of every change. What
	// a Sync did for the mode's metric series comes back from Sync
	// (backends.SyncResult), and the backend is a
	// backends.DriftChecker exactly when the mode's backend is.
	New func(ctx context.Context, o Opts) (backends.Backend, error)
	// Probe asks the kernel, in the network namespace at netns, for what
	// the mode needs; the node setup (start-up and --init-only) runs only
	// the chosen mode's.
	Probe func(ctx context.Context, netns string) []nodesetup.ProbeResult
	// CleanupLeftovers removes, in the network namespace at netns, what
	// wasp left behind in this mode: of families, or of both where the
	// mode cleans both at once (iptables). Nothing left is no error.
	CleanupLeftovers func(ctx context.Context, netns string, families []backends.Family) error
	// Leftovers says, for people, what CleanupLeftovers removes.
	Leftovers string
}

// Modes is the table, nftables first.
var Modes = []Mode{
	{
		Name:             v1alpha1.ProxyModeNFTables,
		Metrics:          metrics.NFTables,
		New:              newNFTables,
		Probe:            nftables.Probes,
		CleanupLeftovers: nftables.CleanupLeftovers,
		Leftovers:        `the nftables tables "ip ` + nftables.DefaultTable + `" and "ip6 ` + nftables.DefaultTable + `"`,
	},
	{
		Name:    v1alpha1.ProxyModeIPTables,
		Metrics: metrics.IPTables,
		New:     newIPTables,
		Probe:   probeIPTables,
		CleanupLeftovers: func(ctx context.Context, netns string, _ []backends.Family) error {
			return iptables.CleanupLeftovers(ctx, netns)
		},
		Leftovers: "the " + iptables.Prefix + "* chains and the jumps to them in the filter and nat tables of iptables and ip6tables, nft and legacy variants, and the ipsets " +
			iptables.SetHairpin4 + " and " + iptables.SetHairpin6,
	},
}

// Lookup returns the row of mode.
func Lookup(mode v1alpha1.ProxyMode) (Mode, error) {
	var names []string
	for _, m := range Modes {
		if m.Name == mode {
			return m, nil
		}
		names = append(names, string(m.Name))
	}
	return Mode{}, fmt.Errorf("proxy mode %q: wasp runs %v", mode, names)
}

func newNFTables(_ context.Context, o Opts) (backends.Backend, error) {
	b, err := nftables.New(nftables.Opts{Family: o.Family, NetNS: o.NetNS, MasqueradeBit: o.MasqueradeBit})
	if err != nil {
		return nil, err
	}
	return withConntrack(b, o)
}

func newIPTables(ctx context.Context, o Opts) (backends.Backend, error) {
	b, err := iptables.New(ctx, iptables.Opts{Family: o.Family, NetNS: o.NetNS, MasqueradeBit: o.MasqueradeBit,
		LocalhostNodePorts: o.LocalhostNodePorts, TCPBeLiberal: o.TCPBeLiberal || beLiberal(ctx, o.NetNS), FullSyncPeriod: o.FullSyncPeriod})
	if err != nil {
		return nil, err
	}
	return withConntrack(b, o)
}

// beLiberal reports whether the node sets nf_conntrack_tcp_be_liberal in
// the network namespace at netns, as upstream's iptables mode reads it at
// start: conntrack then marks no out-of-window packet INVALID, and the
// INVALID drop rule is not needed. Unreadable (nf_conntrack not loaded):
// false.
func beLiberal(ctx context.Context, netns string) bool {
	v, err := xtables.ReadSysctl(netns, xtables.SysctlTCPBeLiberal)
	if err != nil || v == "0" {
		return false
	}
	klog.FromContext(ctx).Info("nf_conntrack_tcp_be_liberal is set: no DROP rule for INVALID packets", "value", v)
	return true
}

// withConntrack wraps b in the conntrack cleaner, closing b when it
// cannot. The result is a backends.DriftChecker exactly when b is, and
// its Sync returns b's SyncResult.
func withConntrack(b backends.Backend, o Opts) (backends.Backend, error) {
	ct, err := conntrack.New(b, conntrack.Opts{Family: o.Family, NetNS: o.NetNS, Observer: o.Conntrack})
	if err != nil {
		b.Close()
		return nil, err
	}
	return ct, nil
}

// probeIPTables is the iptables mode's probe, in nodesetup's terms: a
// node without a usable iptables (its binaries, the variant the node
// uses, a nat table, ipset for the hairpin sets) cannot run the mode.
func probeIPTables(ctx context.Context, netns string) []nodesetup.ProbeResult {
	r := nodesetup.ProbeResult{Name: "iptables", Checks: "iptables-restore of the variant the node uses, its nat table, and a hash:ip,port,ip ipset matched by a rule",
		Outcome: nodesetup.Supported}
	err := iptables.Probe(ctx, netns)
	switch {
	case err == nil:
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES), ctx.Err() != nil:
		r.Outcome, r.Reason = nodesetup.Inconclusive, err.Error()
	default:
		r.Outcome, r.Reason = nodesetup.NotSupported, err.Error()
	}
	return []nodesetup.ProbeResult{r}
}
