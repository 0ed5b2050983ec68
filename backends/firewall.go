package backends

import (
	"net/netip"
	"slices"
)

// FirewallSources returns the source prefixes allowed to reach the
// service port's load-balancer VIPs: its LoadBalancerSourceRanges, and
// the VIPs themselves when one of nodeIPs (State.NodeIPs) is in the ranges,
// since traffic from the node to a VIP bound to it loops back with the
// VIP as source; as upstream. The result is normalised (NormalizePrefixes).
// It is nil when the port has no firewall: no VIP, or no range. The
// firewall applies to traffic to the VIPs only, not to the ClusterIP,
// NodePort or external IPs.
func (s *Service) FirewallSources(nodeIPs []netip.Addr) []netip.Prefix {
	if len(s.LoadBalancerVIPs) == 0 || len(s.LoadBalancerSourceRanges) == 0 {
		return nil
	}
	sources := NormalizePrefixes(s.LoadBalancerSourceRanges)
	if !containsAny(sources, nodeIPs) {
		return sources
	}
	for _, a := range SortedAddrs(s.LoadBalancerVIPs) {
		sources = append(sources, netip.PrefixFrom(a, a.BitLen()))
	}
	return NormalizePrefixes(sources)
}

// containsAny reports whether one of addrs is in one of ps.
func containsAny(ps []netip.Prefix, addrs []netip.Addr) bool {
	for _, p := range ps {
		for _, a := range addrs {
			if p.Contains(a) {
				return true
			}
		}
	}
	return false
}

// NormalizePrefixes returns the prefixes masked, sorted, and without
// duplicates or prefixes inside another one: the set of addresses they
// cover, as an interval set holds it. nil when there is none.
func NormalizePrefixes(ps []netip.Prefix) []netip.Prefix {
	if len(ps) == 0 {
		return nil
	}
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	kept := out[:0]
	for _, p := range out {
		if len(kept) > 0 && kept[len(kept)-1].Contains(p.Addr()) {
			continue // same or inside the previous prefix (sorted by start, shorter first)
		}
		kept = append(kept, p)
	}
	return kept
}

// SortedAddrs returns a sorted copy of as without duplicates; nil when
// there is none.
func SortedAddrs(as []netip.Addr) []netip.Addr {
	if len(as) == 0 {
		return nil
	}
	out := slices.Clone(as)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
