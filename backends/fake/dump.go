package fake

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/wasp-proxy/wasp/backends"
)

// DumpState renders s as text, one block per family and per service,
// separated by blank lines. Lists that a dataplane treats as sets
// (addresses, prefixes, endpoints) are sorted, so two States that program
// the same dataplane render alike. The syntax:
//
//	family ipv4
//	  node-port-addresses any              # or { 198.51.100.1, ... }
//	  node-ips { 198.51.100.1 }            # omitted when none
//	  service-cidrs { 10.96.0.0/16 }       # omitted when none
//	  cluster-cidrs { 10.244.0.0/16 }      # omitted when none
//	  masquerade-all                       # only when set
//
//	service demo/web:http/TCP/IPv4
//	  cluster-ip 10.96.0.10 tcp dport 80
//	  external-ips { 192.0.2.1 }           # the next five lines are
//	  lb-vips { 203.0.113.1 }              # omitted when empty or 0
//	  lb-source-ranges { 198.51.100.0/24 }
//	  node-port 30080
//	  health-check-node-port 32080
//	  affinity client-ip timeout 10800s
//	  internal cluster -> goto cluster
//	  external local -> drop               # only when externally reachable
//	  cluster { 10.244.1.10:8080 weight 1, 10.244.2.10:8080 weight 2 }
//	  local unused
//	  serving { 10.244.1.10, 10.244.2.10 } # omitted when none
//
// An "internal" or "external" line names the traffic policy (cluster or
// local) and the verdict of Service.InternalRoute or ExternalRoute:
// "reject", "drop", or "goto" the policy's set. An endpoint set prints as "unused"
// when nil and as "{ }" when used but empty.
func DumpState(s *backends.State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "family %s\n", s.Family.String())
	if len(s.NodePortAddresses) == 0 {
		b.WriteString("  node-port-addresses any\n")
	} else {
		fmt.Fprintf(&b, "  node-port-addresses %s\n", set(sortedAddrs(s.NodePortAddresses)))
	}
	if len(s.NodeIPs) > 0 {
		fmt.Fprintf(&b, "  node-ips %s\n", set(sortedAddrs(s.NodeIPs)))
	}
	if len(s.ServiceCIDRs) > 0 {
		fmt.Fprintf(&b, "  service-cidrs %s\n", set(sortedPrefixes(s.ServiceCIDRs)))
	}
	if len(s.ClusterCIDRs) > 0 {
		fmt.Fprintf(&b, "  cluster-cidrs %s\n", set(sortedPrefixes(s.ClusterCIDRs)))
	}
	if s.MasqueradeAll {
		b.WriteString("  masquerade-all\n")
	}
	for i := range s.Services {
		b.WriteString("\n")
		dumpService(&b, &s.Services[i])
	}
	return b.String()
}

func dumpService(b *strings.Builder, svc *backends.Service) {
	fmt.Fprintf(b, "service %s\n", svc.Key)
	fmt.Fprintf(b, "  cluster-ip %s %s dport %d\n", svc.ClusterIP, svc.Protocol.Lower(), svc.Port)
	if len(svc.ExternalIPs) > 0 {
		fmt.Fprintf(b, "  external-ips %s\n", set(sortedAddrs(svc.ExternalIPs)))
	}
	if len(svc.LoadBalancerVIPs) > 0 {
		fmt.Fprintf(b, "  lb-vips %s\n", set(sortedAddrs(svc.LoadBalancerVIPs)))
	}
	if len(svc.LoadBalancerSourceRanges) > 0 {
		fmt.Fprintf(b, "  lb-source-ranges %s\n", set(sortedPrefixes(svc.LoadBalancerSourceRanges)))
	}
	if svc.NodePort != 0 {
		fmt.Fprintf(b, "  node-port %d\n", svc.NodePort)
	}
	if svc.HealthCheckNodePort != 0 {
		fmt.Fprintf(b, "  health-check-node-port %d\n", svc.HealthCheckNodePort)
	}
	if svc.AffinityTimeout != 0 {
		fmt.Fprintf(b, "  affinity client-ip timeout %ds\n", svc.AffinityTimeout)
	}
	fmt.Fprintf(b, "  internal %s\n", verdict(svc.InternalRoute()))
	if svc.ExternallyReachable() {
		fmt.Fprintf(b, "  external %s\n", verdict(svc.ExternalRoute()))
	}
	fmt.Fprintf(b, "  cluster %s\n", endpointSet(svc.Cluster))
	fmt.Fprintf(b, "  local %s\n", endpointSet(svc.Local))
	if len(svc.Serving) > 0 {
		fmt.Fprintf(b, "  serving %s\n", set(sortedAddrs(svc.Serving)))
	}
}

// verdict is "<policy> -> <verdict>" for a route (see DumpState).
func verdict(r backends.Route) string {
	policy := "cluster"
	if r.Local {
		policy = "local"
	}
	if r.Verdict == backends.Forward {
		return policy + " -> goto " + policy
	}
	return policy + " -> " + r.Verdict.String()
}

func endpointSet(eps []backends.Endpoint) string {
	if eps == nil {
		return "unused"
	}
	sorted := slices.Clone(eps)
	slices.SortFunc(sorted, func(a, b backends.Endpoint) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Weight, b.Weight))
	})
	ss := make([]string, len(sorted))
	for i, ep := range sorted {
		ss[i] = fmt.Sprintf("%s weight %d", netip.AddrPortFrom(ep.Addr, ep.Port), ep.Weight)
	}
	return set(ss)
}

// set formats elements nft-style: "{ a, b }", or "{ }" when empty.
func set(elems []string) string {
	if len(elems) == 0 {
		return "{ }"
	}
	return "{ " + strings.Join(elems, ", ") + " }"
}

func sortedAddrs(as []netip.Addr) []string {
	sorted := slices.Clone(as)
	slices.SortFunc(sorted, netip.Addr.Compare)
	return stringsOf(sorted)
}

func sortedPrefixes(ps []netip.Prefix) []string {
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	return stringsOf(sorted)
}

func stringsOf[T fmt.Stringer](xs []T) []string {
	ss := make([]string, len(xs))
	for i, x := range xs {
		ss[i] = x.String()
	}
	return ss
}
