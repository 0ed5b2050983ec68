package nftables

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
)

// harness is the Backend for backendtest's suites: on a Fake of its own
// when netns is "" (the Fake's dump shows every rule), else on the
// kernel of netns (read back over netlink).
func harness() backendtest.Harness {
	return backendtest.Harness{
		New: func(t *testing.T, family backends.Family, netns string) backends.Backend {
			t.Helper()
			if netns == "" {
				return newFakeBackend(t, NewFake(), family)
			}
			b, err := New(Opts{Family: family, NetNS: netns})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Dump: func(t *testing.T, b backends.Backend) string {
			t.Helper()
			if f, ok := b.(*Backend).k.(*Fake); ok {
				return f.Dump()
			}
			return readBack(t, b.(*Backend))
		},
		Changes:   func(b backends.Backend) int { return b.(*Backend).stats.lastOps },
		FullSyncs: func(b backends.Backend) int { return b.(*Backend).stats.rebuilds },
	}
}

// readBack renders b's table as its kernel holds it, canonically: chains
// with their hooks and the tags of their rules in order, sets and maps
// with their types and sorted elements (but not the elements of affinity
// sets, which packets add). It is "" when the table does not exist.
func readBack(t *testing.T, b *Backend) string {
	t.Helper()
	ctx := context.Background()
	family, table := b.cfg.family, b.cfg.table
	inv, err := b.k.load(ctx, family, table)
	if err != nil {
		t.Fatalf("read back table %s: %v", table, err)
	}
	if !inv.exists {
		return ""
	}
	rules := map[string][]uint64{}
	if err := b.k.rules(ctx, family, table, func(chain string, tag uint64) {
		rules[chain] = append(rules[chain], tag)
	}); err != nil {
		t.Fatalf("read back the rules of table %s: %v", table, err)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "table %s %s\n", ipKeyword(family), table)
	for _, name := range sortedKeys(inv.chains) {
		fmt.Fprintf(&out, "chain %s", name)
		if base := inv.chains[name]; base != nil {
			fmt.Fprintf(&out, " { %s }", base)
		}
		if inv.notAccept[name] {
			out.WriteString(" policy not accept")
		}
		out.WriteString("\n")
		for _, tag := range rules[name] {
			fmt.Fprintf(&out, "\trule %016x\n", tag)
		}
	}
	for _, name := range sortedKeys(inv.sets) {
		s := inv.sets[name]
		fmt.Fprintf(&out, "set %s { type %s; dynamic %v; timeout %ds }\n", name, s.typeString(), s.Dynamic, s.Timeout)
		if strings.HasPrefix(name, affinitySetPrefix) {
			continue
		}
		var elems []string
		if err := b.k.elements(ctx, family, table, s, func(e Element) {
			el := e.Key.string(s.Key)
			if s.isMap() {
				el += " : " + e.value().string(s)
			}
			elems = append(elems, el)
		}); err != nil {
			t.Fatalf("read back set %s: %v", name, err)
		}
		slices.Sort(elems)
		for _, e := range elems {
			fmt.Fprintf(&out, "\t%s\n", e)
		}
	}
	return out.String()
}
