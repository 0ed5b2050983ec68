//go:build linux

package iptables

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
)

// xtKernel programs the node through the binaries of one iptables
// variant and family.
type xtKernel struct {
	netnsSets
	r     *xtables.Runner
	netns string
}

var _ kernel = (*xtKernel)(nil)

func (k *xtKernel) restore(ctx context.Context, input xtables.Input) error {
	err := k.r.RestoreFrom(ctx, input)
	var re *xtables.RestoreError
	if errors.As(err, &re) && re.Line > 0 {
		return &LineError{Line: re.Line, Text: re.Text, Err: err}
	}
	return err
}

func (k *xtKernel) save(ctx context.Context, table string, w io.Writer) error {
	return k.r.SaveTo(ctx, table, w)
}

func (k *xtKernel) chainExists(ctx context.Context, table, chain string) (bool, error) {
	return k.r.ChainExists(ctx, table, chain)
}

func (k *xtKernel) ensureRule(ctx context.Context, table, chain string, args ...string) (bool, error) {
	return k.r.EnsureRule(ctx, table, chain, args...)
}

func (k *xtKernel) deleteRule(ctx context.Context, table, chain string, args ...string) error {
	return k.r.DeleteRule(ctx, table, chain, args...)
}

func (k *xtKernel) hasRandomFully() bool { return k.r.HasRandomFully() }

func (k *xtKernel) routeLocalnet(ctx context.Context) error {
	if v, err := xtables.ReadSysctl(k.netns, xtables.SysctlRouteLocalnet); err == nil && strings.TrimSpace(v) == "1" {
		return nil
	}
	klog.FromContext(ctx).Info("Setting route_localnet=1 to allow NodePorts on localhost", "sysctl", xtables.SysctlRouteLocalnet)
	return xtables.SetSysctl(k.netns, xtables.SysctlRouteLocalnet, "1")
}

func (k *xtKernel) close() error { return nil }

// New returns a Backend that programs the node's iptables (of the
// network namespace Opts.NetNS) with the binaries of Opts.Variant, or of
// the variant the node uses (xtables.Detect) when it is "". A missing
// binary fails with an error naming it and the package to install. It
// touches nothing until the first Sync, a full one, which reconciles the
// chains a previous process left without flushing them first.
func New(ctx context.Context, o Opts) (*Backend, error) {
	if _, err := o.config(); err != nil {
		return nil, err
	}
	v := o.Variant
	if v == "" {
		var (
			reason string
			err    error
		)
		if v, reason, err = xtables.Detect(ctx, o.NetNS); err != nil {
			return nil, fmt.Errorf("iptables %s: detect the variant: %w", o.Family.String(), err)
		}
		klog.FromContext(ctx).Info("Detected the iptables variant", "ipFamily", o.Family.String(), "variant", v, "reason", reason)
	}
	r, err := xtables.New(v, o.Family, o.NetNS)
	if err != nil {
		return nil, fmt.Errorf("iptables %s: %w", o.Family.String(), err)
	}
	return newBackend(o, &xtKernel{netnsSets: netnsSets{o.NetNS}, r: r, netns: o.NetNS})
}

// CleanupLeftovers removes the chains of wasp's and the jumps to them
// from the filter and nat tables of both variants and both families, then
// the hairpin sets (SetHairpin4, SetHairpin6), in
// the network namespace at netns ("" for the current one), whatever
// options a previous process ran with. A variant whose binaries are
// missing is skipped, and so is a legacy table that is not loaded (it has
// nothing of wasp's, and reading it would load it). Every failure is
// returned, joined.
func CleanupLeftovers(ctx context.Context, netns string) error {
	var errs []error
	for _, v := range []xtables.Variant{xtables.NFT, xtables.Legacy} {
		for _, family := range []backends.Family{backends.IPv4, backends.IPv6} {
			r, err := xtables.New(v, family, netns)
			if errors.Is(err, xtables.ErrNotInstalled) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			tables := []string{TableNAT, TableFilter}
			if v == xtables.Legacy {
				if tables, err = legacyTables(netns, family); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			what := string(v) + " " + family.String()
			if err := cleanup(ctx, &xtKernel{netnsSets: netnsSets{netns}, r: r, netns: netns}, what, tables...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// The sets go once no rule of either variant uses them.
	for _, set := range []string{SetHairpin4, SetHairpin6} {
		if err := (netnsSets{netns}).destroySet(ctx, set); err != nil {
			errs = append(errs, fmt.Errorf("iptables: %w", err))
		}
	}
	return errors.Join(errs...)
}

// legacyTables returns which of the nat and filter tables of the legacy
// variant of family are loaded in the network namespace at netns.
func legacyTables(netns string, family backends.Family) ([]string, error) {
	loaded, err := xtables.LegacyTables(netns, family)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range []string{TableNAT, TableFilter} {
		if slices.Contains(loaded, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// Probe checks that the iptables backend can run in the network
// namespace at netns: the binaries of a variant are installed, the
// variant the node uses is detected, the POSTROUTING chain of the nat
// table of at least one family can be listed (a node may lack IPv6 nat;
// the Backend of a family without it fails its first Sync with the
// binary's message), and a hash:ip,port,ip ipset can be made and matched
// in a rule of that family (the hairpin set; probeSets). The error says
// what is missing.
func Probe(ctx context.Context, netns string) error {
	v, _, err := xtables.Detect(ctx, netns)
	if err != nil {
		return fmt.Errorf("iptables: detect the variant: %w", err)
	}
	var errs []error
	for _, family := range []backends.Family{backends.IPv4, backends.IPv6} {
		r, err := xtables.New(v, family, netns)
		if err != nil {
			return fmt.Errorf("iptables %s: %w", family.String(), err)
		}
		// One rule of POSTROUTING, not the table: a save of the nat table
		// costs seconds on a node with many Services.
		if ok, err := r.ChainExists(ctx, TableNAT, "POSTROUTING"); err != nil || !ok {
			if err == nil {
				err = errors.New("no POSTROUTING chain")
			}
			errs = append(errs, fmt.Errorf("iptables %s %s: the nat table is not usable: %w", v, family.String(), err))
			continue
		}
		if err := probeSets(ctx, r, netns, family); err != nil {
			return fmt.Errorf("iptables %s %s: the hairpin ipset is not usable (are the ip_set, ip_set_hash_ipportip and xt_set kernel modules available?): %w",
				v, family.String(), err)
		}
		return nil
	}
	return errors.Join(errs...)
}

// The objects probeSets makes, and removes.
const (
	probeSet   = Prefix + "PROBE-HAIRPIN"
	probeChain = Prefix + "PROBE-HAIRPIN"
)

// probeSets makes a set of the hairpin sets' type, an entry in it, and a
// rule that matches it as ChainPostrouting does, then removes them. The
// rule goes in the filter table, not nat: the set match is the same in
// every table, and with iptables-legacy each write replaces its table
// whole, which costs seconds for a nat table of many Services.
func probeSets(ctx context.Context, r *xtables.Runner, netns string, family backends.Family) (err error) {
	sets := netnsSets{netns}
	if err := sets.ensureSet(ctx, probeSet, family); err != nil {
		return err
	}
	defer func() {
		if derr := sets.destroySet(ctx, probeSet); derr != nil && err == nil {
			err = derr
		}
	}()
	a := netip.MustParseAddr("192.0.2.1")
	if family == backends.IPv6 {
		a = netip.MustParseAddr("2001:db8::1")
	}
	if err := sets.addToSet(ctx, probeSet, []HairpinEntry{{Addr: a, Protocol: backends.TCP, Port: 80}}); err != nil {
		return err
	}
	rule := "*filter\n:" + probeChain + " - [0:0]\n-A " + probeChain + " -m set --match-set " + probeSet + " dst,dst,src -j RETURN\nCOMMIT\n"
	ruleErr := r.Restore(ctx, []byte(rule))
	// The declaration makes the chain if the rule's section failed.
	if err := r.Restore(ctx, []byte("*filter\n:"+probeChain+" - [0:0]\n-X "+probeChain+"\nCOMMIT\n")); err != nil && ruleErr == nil {
		return fmt.Errorf("delete chain %s: %w", probeChain, err)
	}
	if ruleErr != nil {
		return fmt.Errorf("a rule matching ipset %s: %w", probeSet, ruleErr)
	}
	return nil
}
