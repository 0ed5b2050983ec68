package reference

import (
	"slices"

	"github.com/wasp-proxy/wasp/abi"
)

// Categorize runs Topology, TrafficPolicy and EndpointSelection in order and
// returns the final decision for one service port on node.
func Categorize(node *abi.Node, sp *abi.ServicePort) abi.Decision {
	d := Topology(node, sp)
	d = TrafficPolicy(node, sp, d)
	return EndpointSelection(node, sp, d)
}

// Topology returns the topology stage's decision: Mode and Eligible, the
// endpoints available for cluster traffic under that mode. Eligible is never
// nil; for TopologyNone it holds every endpoint index. Eligibility is about
// topology only: an unready endpoint hinted for this zone is eligible, and
// TrafficPolicy later keeps only the usable ones.
//
// A service that does not use Cluster policy gets TopologyNone, as upstream
// only looks at hints when it builds the Cluster set.
func Topology(node *abi.Node, sp *abi.ServicePort) abi.Decision {
	eps := sp.Endpoints
	zone := nodeZone(node)

	mode := abi.TopologyNone
	if sp.UsesClusterEndpoints() {
		mode = topologyMode(eps, node.Name, zone)
	}

	eligible := make(abi.Indices, 0, len(eps))
	for i := range eps {
		if availableForTopology(&eps[i], mode, node.Name, zone) {
			eligible = append(eligible, uint32(i))
		}
	}
	return abi.Decision{Mode: mode, Eligible: eligible}
}

// TrafficPolicy fills Cluster, Local, All and HasAnyEndpoints from the
// topology decision prev and returns prev with those fields set (Weights is
// cleared). It reads prev.Eligible, which must be ascending as the ABI
// requires; indices out of range are ignored, and a nil Eligible (topology
// never ran) counts as every endpoint.
//
// Nil versus empty follows upstream: Cluster is nil only when the service
// does not use Cluster policy, Local is nil whenever it has no member, and
// every set is nil when the service port has no endpoints.
func TrafficPolicy(node *abi.Node, sp *abi.ServicePort, prev abi.Decision) abi.Decision {
	d := prev
	d.Cluster, d.Local, d.All, d.HasAnyEndpoints, d.Weights = nil, nil, nil, false, nil

	eps := sp.Endpoints
	// No endpoints: nothing to categorize, every set stays nil.
	if len(eps) == 0 {
		return d
	}

	usesCluster := sp.UsesClusterEndpoints()
	if usesCluster {
		// Cluster policy uses the ready endpoints the topology left eligible.
		// Used but empty is an empty set, never nil.
		d.Cluster = make(abi.Indices, 0, len(eps))
		for _, i := range eligibleIndices(prev.Eligible, len(eps)) {
			if eps[i].Ready {
				d.Cluster = append(d.Cluster, i)
			}
		}
		// No ready endpoint for this topology means no ready endpoint
		// anywhere (the topology stage drops hints that would leave none),
		// so fall back to every serving terminating endpoint, remote ones
		// included and topology ignored.
		if len(d.Cluster) == 0 {
			for i := range eps {
				if eps[i].Serving && eps[i].Terminating {
					d.Cluster = append(d.Cluster, uint32(i))
				}
			}
		}
		// Any ready endpoint anywhere ends up in Cluster.
		d.HasAnyEndpoints = len(d.Cluster) > 0
	}

	// Without Local policy, All is the Cluster set and Local stays nil.
	if !sp.UsesLocalEndpoints() {
		d.All = d.Cluster
		return d
	}

	// An endpoint is usable somewhere in the cluster when it is ready, or
	// serving and terminating; Local policy prefers local ready endpoints and
	// falls back to local serving terminating ones, independently of the
	// Cluster fallback.
	var localReady, localServingTerminating bool
	for i := range eps {
		ep := &eps[i]
		switch {
		case ep.Ready:
			d.HasAnyEndpoints = true
			localReady = localReady || ep.Local
		case ep.Serving && ep.Terminating:
			d.HasAnyEndpoints = true
			localServingTerminating = localServingTerminating || ep.Local
		}
	}
	switch {
	case localReady:
		d.Local = filter(eps, func(ep *abi.Endpoint) bool { return ep.Local && ep.Ready })
	case localServingTerminating:
		d.Local = filter(eps, func(ep *abi.Endpoint) bool { return ep.Local && ep.Serving && ep.Terminating })
	}
	// No usable local endpoint: Local stays nil, not empty, even though the
	// service uses it; HasAnyEndpoints may still be true (drop, not reject).

	// Without Cluster policy, All is the Local set and Cluster stays nil.
	if !usesCluster {
		d.All = d.Local
		return d
	}

	// Both policies in use: All is everything reachable from this node.
	d.All = union(d.Cluster, d.Local)
	return d
}

// EndpointSelection gives weight 1 to every endpoint in prev.Cluster ∪
// prev.Local, in ascending index order, and returns prev with Weights set.
// Weights is nil when both sets are empty.
func EndpointSelection(node *abi.Node, sp *abi.ServicePort, prev abi.Decision) abi.Decision {
	d := prev
	d.Weights = nil
	chosen := union(prev.Cluster, prev.Local)
	if len(chosen) == 0 {
		return d
	}
	d.Weights = make([]abi.Weight, len(chosen))
	for k, i := range chosen {
		d.Weights[k] = abi.Weight{Index: i, Weight: 1}
	}
	return d
}

// nodeZone is the node's zone label; a missing label reads as "", exactly
// like a lookup in upstream's topology label map.
func nodeZone(node *abi.Node) string {
	zone, _ := node.Label(abi.LabelTopologyZone)
	return zone
}

// topologyMode decides from the ready endpoints' hints whether a topology
// applies. Hints are all-or-nothing: a single ready endpoint without hints of
// a kind disables that kind for the whole service port.
func topologyMode(eps []abi.Endpoint, nodeName, zone string) abi.TopologyMode {
	anyReady := false
	allNodeHinted, someForNode := true, false
	allZoneHinted, someForZone := true, false
	for i := range eps {
		ep := &eps[i]
		// Unready endpoints neither need hints nor can enable a topology.
		if !ep.Ready {
			continue
		}
		anyReady = true
		if len(ep.NodeHints) == 0 {
			allNodeHinted = false
		} else if slices.Contains(ep.NodeHints, nodeName) {
			someForNode = true
		}
		if len(ep.ZoneHints) == 0 {
			allZoneHinted = false
		} else if slices.Contains(ep.ZoneHints, zone) {
			someForZone = true
		}
	}
	switch {
	// No ready endpoint: there are no hints to honour.
	case !anyReady:
		return abi.TopologyNone
	// Same node first: every ready endpoint node-hinted, one of them for us.
	case allNodeHinted && someForNode:
		return abi.TopologyPreferSameNode
	// Then same zone: every ready endpoint zone-hinted, one of them for our
	// zone. A node without a zone label has zone "" and only matches a ""
	// hint.
	case allZoneHinted && someForZone:
		return abi.TopologyPreferSameZone
	}
	// Otherwise no partial use of hints: every endpoint is eligible.
	return abi.TopologyNone
}

// availableForTopology reports whether ep may serve cluster traffic on this
// node under mode. Membership is by hint set; there is no fallback here, the
// fallback already happened when the mode was chosen.
func availableForTopology(ep *abi.Endpoint, mode abi.TopologyMode, nodeName, zone string) bool {
	switch mode {
	case abi.TopologyNone:
		return true
	case abi.TopologyPreferSameNode:
		return slices.Contains(ep.NodeHints, nodeName)
	case abi.TopologyPreferSameZone:
		return slices.Contains(ep.ZoneHints, zone)
	}
	return false
}

// eligibleIndices returns the in-range members of eligible, or every index
// below n when eligible is nil.
func eligibleIndices(eligible abi.Indices, n int) abi.Indices {
	if eligible == nil {
		all := make(abi.Indices, n)
		for i := range all {
			all[i] = uint32(i)
		}
		return all
	}
	// Eligible is ascending, so the out-of-range indices are at the end.
	end := len(eligible)
	for end > 0 && eligible[end-1] >= uint32(n) {
		end--
	}
	return eligible[:end]
}

// filter returns the indices of the endpoints that keep accepts. The result
// is never nil.
func filter(eps []abi.Endpoint, keep func(*abi.Endpoint) bool) abi.Indices {
	out := make(abi.Indices, 0, len(eps))
	for i := range eps {
		if keep(&eps[i]) {
			out = append(out, uint32(i))
		}
	}
	return out
}

// union merges two ascending index sets into a new ascending set without
// duplicates. The result is never nil.
func union(a, b abi.Indices) abi.Indices {
	out := make(abi.Indices, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			out = append(out, a[i])
			i++
		case a[i] > b[j]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}
