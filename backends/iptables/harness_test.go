package iptables

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
)

// harness is the Backend for backendtest's suites: on a Fake of its own
// when netns is "", else on the iptables of variant v in netns.
func harness(v xtables.Variant) backendtest.Harness {
	return backendtest.Harness{
		New: func(t *testing.T, family backends.Family, netns string) backends.Backend {
			t.Helper()
			o := Opts{Family: family, LocalhostNodePorts: true}
			if netns == "" {
				return newFakeBackend(t, NewFake(), o)
			}
			o.NetNS, o.Variant = netns, v
			b, err := New(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Dump: func(t *testing.T, b backends.Backend) string {
			t.Helper()
			return canonicalDump(t, b.(*Backend).k)
		},
		// A Sync's changes are the service chains it wrote or deleted
		// (the fixed chains are written by every one, as upstream).
		Changes:   func(b backends.Backend) int { return b.(*Backend).stats.written + b.(*Backend).stats.stale },
		FullSyncs: func(b backends.Backend) int { return b.(*Backend).stats.full },
	}
}

// canonicalDump renders what of wasp's k holds, read back with save:
// per table, the chains of wasp's by name, each with its rules in order,
// and the rules of the built-in chains that jump to them; then the
// entries of the hairpin sets that exist. "" when there is nothing of
// wasp's.
func canonicalDump(t *testing.T, k kernel) string {
	t.Helper()
	var out strings.Builder
	for _, table := range []string{TableNAT, TableFilter} {
		save := saveOf(t, k, table)
		rules := map[string][]string{}
		var chains []string
		for _, l := range strings.Split(string(save), "\n") {
			switch {
			case strings.HasPrefix(l, ":"+Prefix):
				name, _, _ := strings.Cut(l[1:], " ")
				chains = append(chains, name)
			case strings.HasPrefix(l, "-A "):
				chain, _, _ := strings.Cut(l[3:], " ")
				if strings.HasPrefix(chain, Prefix) || strings.Contains(l, " -j "+Prefix) {
					rules[chain] = append(rules[chain], l)
				}
			}
		}
		slices.Sort(chains)
		var builtin []string
		for chain := range rules {
			if !strings.HasPrefix(chain, Prefix) {
				builtin = append(builtin, chain)
			}
		}
		slices.Sort(builtin)
		if len(chains) == 0 && len(builtin) == 0 {
			continue
		}
		out.WriteString("*" + table + "\n")
		for _, c := range chains {
			out.WriteString(":" + c + "\n")
		}
		for _, c := range append(builtin, chains...) {
			for _, r := range rules[c] {
				out.WriteString(r + "\n")
			}
		}
	}
	for _, set := range []string{SetHairpin4, SetHairpin6} {
		entries, err := k.listSet(context.Background(), set)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatalf("list ipset %s: %v", set, err)
		}
		lines := make([]string, 0, len(entries))
		for _, e := range entries {
			lines = append(lines, "add "+set+" "+e.String()+"\n")
		}
		slices.Sort(lines)
		out.WriteString("ipset " + set + "\n" + strings.Join(lines, ""))
	}
	return out.String()
}
