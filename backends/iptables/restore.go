package iptables

import "strings"

// writeRestore writes the iptables-restore input (for "--noflush") that
// programs rs: the nat table, then the filter table. In each, "*table",
// a declaration of every chain it
// writes (which, with --noflush, creates the chain or flushes it), then
// their rules in order, then "-X" for each stale chain, declared too so
// that it is flushed before its deletion, and "COMMIT". The nat table
// gets its fixed chains and the service chains to write (every one of rs
// for a full sync, only the changed ones for a partial sync); the filter
// table its fixed chains.
//
// Each table's section commits on its own, so nat comes first: the rules
// a kernel may refuse (statistic, recent, DNAT) are there, and when it
// refuses one, neither table has changed. Filter rules never jump to nat
// chains nor the reverse, so new nat rules with the old filter rules are
// consistent too, should the filter section fail.
func writeRestore(b *strings.Builder, rs *Ruleset, services []*Chain, staleFilter, staleNAT []string) {
	writeTable(b, TableNAT, rs.NAT, services, staleNAT)
	writeTable(b, TableFilter, rs.Filter, nil, staleFilter)
}

func writeTable(b *strings.Builder, table string, fixed, more []*Chain, stale []string) {
	b.WriteString("*" + table + "\n")
	for _, cs := range [][]*Chain{fixed, more} {
		for _, c := range cs {
			b.WriteString(":" + c.Name + " - [0:0]\n")
		}
	}
	for _, name := range stale {
		b.WriteString(":" + name + " - [0:0]\n")
	}
	for _, cs := range [][]*Chain{fixed, more} {
		for _, c := range cs {
			for _, r := range c.Rules {
				b.WriteString("-A " + c.Name + " " + r + "\n")
			}
		}
	}
	for _, name := range stale {
		b.WriteString("-X " + name + "\n")
	}
	b.WriteString("COMMIT\n")
}

// allServiceChains returns every service chain of rs, in order.
func allServiceChains(rs *Ruleset) []*Chain {
	n := 0
	for _, f := range rs.Services {
		n += len(f.Chains)
	}
	out := make([]*Chain, 0, n)
	for _, f := range rs.Services {
		out = append(out, f.Chains...)
	}
	return out
}
