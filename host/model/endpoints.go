package model

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/wasp-proxy/wasp/abi"
)

// endpointIndex holds the endpoints of every service port, keyed by the
// endpoint's "ip:port" string, as upstream's spToEndpointMap.
type endpointIndex map[Key]map[string]abi.Endpoint

// list returns the endpoints of a service port sorted by their "ip:port"
// string, as upstream sorts them (so "10.0.1.10:80" < "10.0.1.1:80"), or
// nil when there is none.
func (ix endpointIndex) list(k Key) []abi.Endpoint {
	set := ix[k]
	if len(set) == 0 {
		return nil
	}
	out := make([]abi.Endpoint, 0, len(set))
	for _, s := range slices.Sorted(maps.Keys(set)) {
		out = append(out, set[s])
	}
	return out
}

// buildEndpoints merges the EndpointSlices of every Service into per
// service port endpoint sets, for the given families.
func buildEndpoints(eps []*discoveryv1.EndpointSlice, nodeName string, families []v1.IPFamily) endpointIndex {
	// Upstream keeps the first copy of a duplicate ip:port unless a later
	// one is non-terminating, and its "first" depends on map order. Sorting
	// the slices by namespace and name makes "first" well defined.
	sorted := make([]*discoveryv1.EndpointSlice, 0, len(eps))
	for _, es := range eps {
		if es != nil {
			sorted = append(sorted, es)
		}
	}
	slices.SortStableFunc(sorted, func(a, b *discoveryv1.EndpointSlice) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})

	ix := endpointIndex{}
	for _, es := range sorted {
		service, ok := es.Labels[LabelServiceName]
		if !ok || service == "" || es.Name == "" || es.Namespace == "" || hasFilteredLabel(es.Labels) {
			continue
		}
		f, ok := sliceFamily(es.AddressType)
		if !ok || !slices.Contains(families, f) {
			continue
		}
		for _, port := range es.Ports {
			// A nil name is ignored; "" is the normal unnamed port.
			if port.Name == nil || port.Port == nil || *port.Port <= 0 || *port.Port > 65535 {
				continue
			}
			var proto abi.Protocol = abi.ProtocolTCP // the apiserver's default for a nil protocol
			if port.Protocol != nil {
				if proto, ok = protocol(*port.Protocol); !ok {
					continue
				}
			}
			k := Key{Namespace: es.Namespace, Name: service, PortName: *port.Name, Protocol: proto, Family: f}
			if ix[k] == nil {
				ix[k] = map[string]abi.Endpoint{}
			}
			addEndpoints(ix[k], es.Endpoints, uint16(*port.Port), f, nodeName)
		}
	}
	return ix
}

// addEndpoints adds the endpoints of one slice port to set.
func addEndpoints(set map[string]abi.Endpoint, eps []discoveryv1.Endpoint, port uint16, f v1.IPFamily, nodeName string) {
	for i := range eps {
		ep := &eps[i]
		if len(ep.Addresses) == 0 {
			continue
		}
		// Only the first address counts (the others are, by API contract,
		// the same endpoint).
		addr, ok := parseIP(ep.Addresses[0])
		// Upstream no longer checks the endpoint's family against the
		// slice's address type, which the apiserver enforces. An address of
		// the wrong family (or an unparsable one) could only yield a rule
		// the backend cannot program, so it is dropped here.
		if !ok || familyOf(addr) != f {
			continue
		}
		e := abi.Endpoint{
			Addr:        addr,
			Port:        port,
			Ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
			Serving:     ep.Conditions.Serving == nil || *ep.Conditions.Serving,
			Terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
			Local:       nodeName != "" && ep.NodeName != nil && *ep.NodeName == nodeName,
		}
		if ep.NodeName != nil {
			e.NodeName = *ep.NodeName
		}
		if ep.Zone != nil {
			e.Zone = *ep.Zone
		}
		if ep.Hints != nil {
			e.ZoneHints = hintNames(ep.Hints.ForZones, func(z discoveryv1.ForZone) string { return z.Name })
			// The PreferSameTrafficDistribution gate is GA: node hints
			// are always read.
			e.NodeHints = hintNames(ep.Hints.ForNodes, func(n discoveryv1.ForNode) string { return n.Name })
		}

		// Two slices can hold the same ip:port while an endpoint moves
		// between them, or when a new pod reuses the IP of a terminating
		// one: the first copy wins unless a later one is not terminating.
		s := netip.AddrPortFrom(addr, port).String()
		if _, exists := set[s]; !exists || !e.Terminating {
			set[s] = e
		}
	}
}

// hintNames returns the sorted, distinct hint names (upstream keeps them in
// a set), or nil when there is none.
func hintNames[T any](hints []T, name func(T) string) []string {
	if len(hints) == 0 {
		return nil
	}
	out := make([]string, 0, len(hints))
	for _, h := range hints {
		out = append(out, name(h))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sliceFamily maps an EndpointSlice address type to an IP family; FQDN
// slices have none.
func sliceFamily(t discoveryv1.AddressType) (v1.IPFamily, bool) {
	switch t {
	case discoveryv1.AddressTypeIPv4:
		return v1.IPv4Protocol, true
	case discoveryv1.AddressTypeIPv6:
		return v1.IPv6Protocol, true
	}
	return "", false
}
