package reference_test

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/wasp-proxy/wasp/abi"
)

// upstreamCategorize is a second, independent transcription of upstream
// kube-proxy's CategorizeEndpoints (pkg/proxy/topology.go @008b365), written
// straight-line over endpoint values the way upstream is, with none of the
// package's stage split or index sets. The differential tests hold the
// package to it.
//
// It follows upstream's shape on purpose: the Cluster list comes from a
// filter that returns a non-nil slice, Local is only assigned when a usable
// local endpoint exists, All is the Cluster slice itself in the no-topology
// case and a map-based merge otherwise. The one liberty: upstream's merge
// has random order; here the merged list is put back in input order so it
// can be compared.
func upstreamCategorize(endpoints []abi.Endpoint, sp *abi.ServicePort, nodeName string, topologyLabels map[string]string) (cluster, local, all []abi.Endpoint, hasAny bool) {
	if len(endpoints) == 0 {
		return
	}
	usesCluster := !sp.InternalPolicyLocal || sp.ExternallyAccessible
	usesLocal := sp.InternalPolicyLocal || (sp.ExternalPolicyLocal && sp.ExternallyAccessible)

	mode := ""
	servingTerminatingLocal := false
	if usesCluster {
		zone := topologyLabels[abi.LabelTopologyZone]
		mode = upstreamMode(endpoints, nodeName, zone)
		cluster = keep(endpoints, func(ep abi.Endpoint) bool {
			return ep.Ready && upstreamAvailable(ep, mode, nodeName, zone)
		})
		if len(cluster) == 0 {
			cluster = keep(endpoints, func(ep abi.Endpoint) bool {
				return ep.Serving && ep.Terminating
			})
		}
		if len(cluster) > 0 {
			hasAny = true
		}
	}

	if !usesLocal {
		all = cluster
		return
	}

	localReady, localServingTerminating := false, false
	for _, ep := range endpoints {
		if ep.Ready {
			hasAny = true
			if ep.Local {
				localReady = true
			}
		} else if ep.Serving && ep.Terminating {
			hasAny = true
			if ep.Local {
				localServingTerminating = true
			}
		}
	}
	if localReady {
		local = keep(endpoints, func(ep abi.Endpoint) bool { return ep.Local && ep.Ready })
	} else if localServingTerminating {
		servingTerminatingLocal = true
		local = keep(endpoints, func(ep abi.Endpoint) bool { return ep.Local && ep.Serving && ep.Terminating })
	}

	if !usesCluster {
		all = local
		return
	}
	if mode == "" && !servingTerminatingLocal {
		all = cluster
		return
	}

	merged := make(map[string]abi.Endpoint, len(cluster)+len(local))
	for _, ep := range cluster {
		merged[endpointString(ep)] = ep
	}
	for _, ep := range local {
		merged[endpointString(ep)] = ep
	}
	all = make([]abi.Endpoint, 0, len(merged))
	for _, ep := range merged {
		all = append(all, ep)
	}
	// Input order, for comparison (upstream leaves map order).
	position := make(map[string]int, len(endpoints))
	for i, ep := range endpoints {
		position[endpointString(ep)] = i
	}
	slices.SortFunc(all, func(a, b abi.Endpoint) int {
		return cmp.Compare(position[endpointString(a)], position[endpointString(b)])
	})
	return
}

// upstreamMode is upstream's topologyModeFromHints with the
// PreferSameTrafficDistribution gate on.
func upstreamMode(endpoints []abi.Endpoint, nodeName, zone string) string {
	hasReady := false
	forNode, allNodeHints := false, true
	forZone, allZoneHints := false, true
	for _, ep := range endpoints {
		if !ep.Ready {
			continue
		}
		hasReady = true
		if hintSet(ep.NodeHints).len() == 0 {
			allNodeHints = false
		} else if hintSet(ep.NodeHints).has(nodeName) {
			forNode = true
		}
		if hintSet(ep.ZoneHints).len() == 0 {
			allZoneHints = false
		} else if hintSet(ep.ZoneHints).has(zone) {
			forZone = true
		}
	}
	if !hasReady {
		return ""
	}
	if allNodeHints && forNode {
		return "PreferSameNode"
	}
	if allZoneHints && forZone {
		return "PreferSameZone"
	}
	return ""
}

// upstreamAvailable is upstream's availableForTopology.
func upstreamAvailable(ep abi.Endpoint, mode, nodeName, zone string) bool {
	switch mode {
	case "":
		return true
	case "PreferSameNode":
		return hintSet(ep.NodeHints).has(nodeName)
	case "PreferSameZone":
		return hintSet(ep.ZoneHints).has(zone)
	}
	return false
}

// hintSet is a set of hint names, like the string sets upstream keeps.
type hintSet []string

func (s hintSet) len() int {
	seen := map[string]bool{}
	for _, h := range s {
		seen[h] = true
	}
	return len(seen)
}

func (s hintSet) has(name string) bool {
	for _, h := range s {
		if h == name {
			return true
		}
	}
	return false
}

// keep is upstream's filterEndpoints: the result is never nil.
func keep(endpoints []abi.Endpoint, pred func(abi.Endpoint) bool) []abi.Endpoint {
	out := make([]abi.Endpoint, 0, len(endpoints))
	for _, ep := range endpoints {
		if pred(ep) {
			out = append(out, ep)
		}
	}
	return out
}

// endpointString is upstream's Endpoint.String(): "ip:port".
func endpointString(ep abi.Endpoint) string {
	return netip.AddrPortFrom(ep.Addr, ep.Port).String()
}

// labelMap is the node's labels as the map upstream receives.
func labelMap(node *abi.Node) map[string]string {
	m := make(map[string]string, len(node.Labels))
	for _, l := range node.Labels {
		m[l.Key] = l.Value
	}
	return m
}
