package xtables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
)

// The chains kubelet creates in the mangle table of the variant it uses:
// the hint (kubelet 1.24 and later, for exactly this purpose) and the
// canary its iptables monitor watches (1.17 and later).
const (
	HintChain          = "KUBE-IPTABLES-HINT"
	KubeletCanaryChain = "KUBE-KUBELET-CANARY"
)

// Detect chooses the variant the node's other iptables users use, in the
// network namespace at netns ("" for the current one), the way the
// kube-proxy image's iptables wrapper chooses:
//
//  1. KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY in the mangle table of
//     iptables-nft (IPv4 or IPv6): NFT; else in the mangle table of
//     iptables-legacy: Legacy. kubelet makes them in the variant it uses.
//  2. Else the variant whose tables hold more rules, both families
//     counted; a tie is NFT.
//  3. Else (no rules at all) NFT, the variant of current distributions.
//
// Only a variant whose binaries are installed is considered, so with one
// variant missing the other is chosen; with both missing the error wraps
// ErrNotInstalled. Detect reads the rules with the save binaries, the
// mangle tables alone for the hints, and every table only when no hint
// decided. It reads iptables-legacy's mangle table only where the kernel
// lists it (LegacyTables): iptables-legacy -t mangle would create one on
// a node that has none. So on a node with kubelet's hint Detect costs a
// few small reads, however many rules the nat table holds. reason says
// which evidence decided, for the log.
func Detect(ctx context.Context, netns string) (v Variant, reason string, err error) {
	return detect(ctx, netns, osExec{}, searchDirs(), LegacyTables)
}

// loadedTables is LegacyTables, or a test's stand-in.
type loadedTables func(netns string, family backends.Family) ([]string, error)

// evidence is what one variant's tables say.
type evidence struct {
	installed bool
	hint      string // the kubelet chain found in mangle, or ""
	rules     int    // rules in every table, both families
	failed    []string
}

func detect(ctx context.Context, netns string, ex execer, dirs []string, loaded loadedTables) (Variant, string, error) {
	ev := map[Variant]*evidence{}
	var missing []error
	for _, v := range []Variant{NFT, Legacy} {
		ev[v] = &evidence{}
		// Installed: everything a Runner of the variant needs for IPv4.
		var names []string
		for _, tool := range []string{toolMain, toolSave, toolRestore} {
			name, _ := command(v, backends.IPv4, tool)
			names = append(names, name)
		}
		if _, err := lookPaths(dirs, names...); err != nil {
			missing = append(missing, err)
			continue
		}
		ev[v].installed = true
	}
	nft, legacy := ev[NFT], ev[Legacy]
	switch {
	case !nft.installed && !legacy.installed:
		return "", "", fmt.Errorf("neither iptables variant is installed: %w", errors.Join(missing...))
	case !legacy.installed:
		return NFT, "only iptables-nft is installed", nil
	case !nft.installed:
		return Legacy, "only iptables-legacy is installed", nil
	}

	defer func() {
		for _, v := range []Variant{NFT, Legacy} {
			if len(ev[v].failed) > 0 {
				klog.FromContext(ctx).V(2).Info("Reading iptables rules failed; they count as none", "variant", v, "errors", ev[v].failed)
			}
		}
	}()
	// The hints, in the mangle tables alone: iptables-nft lists one table
	// without creating it; iptables-legacy's is read only where it exists.
	if err := nft.read(ctx, netns, ex, dirs, NFT, true, loaded); err != nil {
		return "", "", err
	}
	if nft.hint != "" {
		return NFT, nft.hint + " is in the mangle table of iptables-nft", nil
	}
	if err := legacy.read(ctx, netns, ex, dirs, Legacy, true, loaded); err != nil {
		return "", "", err
	}
	if legacy.hint != "" {
		return Legacy, legacy.hint + " is in the mangle table of iptables-legacy", nil
	}

	// The rules, every table of both variants.
	if err := legacy.read(ctx, netns, ex, dirs, Legacy, false, loaded); err != nil {
		return "", "", err
	}
	if err := nft.read(ctx, netns, ex, dirs, NFT, false, loaded); err != nil {
		return "", "", err
	}
	why := fmt.Sprintf("no %s or %s chain in either variant, and iptables-legacy holds %d rules, iptables-nft %d",
		HintChain, KubeletCanaryChain, legacy.rules, nft.rules)
	switch {
	case legacy.rules > nft.rules:
		return Legacy, why, nil
	case nft.rules == 0:
		return NFT, why + ": nft, the default", nil
	}
	return NFT, why, nil
}

// read adds what the save binaries of v (both families) say to e: the
// mangle table only (Legacy: only where loaded lists it), or every table,
// whose rules it counts. A binary that is missing (ip6tables only) or
// fails adds nothing; only one that cannot run at all (the namespace is
// gone, ctx is done) is an error.
func (e *evidence) read(ctx context.Context, netns string, ex execer, dirs []string, v Variant, mangleOnly bool, loaded loadedTables) error {
	for _, family := range []backends.Family{backends.IPv4, backends.IPv6} {
		name, _ := command(v, family, toolSave)
		paths, err := lookPaths(dirs, name)
		if err != nil {
			continue
		}
		if mangleOnly && v == Legacy {
			tables, err := loaded(netns, family)
			if err != nil {
				e.failed = append(e.failed, err.Error())
				continue
			}
			if !slices.Contains(tables, "mangle") {
				continue
			}
		}
		argv := []string{paths[0]}
		if mangleOnly {
			argv = append(argv, "-t", "mangle")
		}
		res, err := ex.run(ctx, netns, argv, nil, nil)
		if err != nil {
			return err
		}
		if res.code != 0 {
			e.failed = append(e.failed, fmt.Sprintf("%s: exit status %d: %s", name, res.code, condense(string(res.stderr))))
			continue
		}
		table := ""
		for l := range strings.Lines(string(res.stdout)) {
			switch {
			case strings.HasPrefix(l, "*"):
				table = strings.TrimSpace(l[1:])
			case strings.HasPrefix(l, "-A "):
				if !mangleOnly {
					e.rules++
				}
			case table == "mangle" && e.hint == "":
				for _, c := range []string{HintChain, KubeletCanaryChain} {
					if strings.HasPrefix(l, ":"+c+" ") {
						e.hint = c
					}
				}
			}
		}
	}
	return nil
}
