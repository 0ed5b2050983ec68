// Command topology is wasp's default topology stage: upstream kube-proxy's
// topology-aware routing. It picks the topology mode from the hints of the
// ready endpoints and marks the endpoints that mode makes available for
// cluster traffic on this node.
//
// The mode is all-or-nothing, as upstream:
//   - PreferSameNode when every ready endpoint has a node hint and at least
//     one is hinted for this node;
//   - else PreferSameZone when every ready endpoint has a zone hint and at
//     least one is hinted for this node's zone;
//   - else none: every endpoint is eligible. One ready endpoint without hints
//     disables topology for the whole service port. Unready endpoints are
//     not looked at.
package main

import (
	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

func init() { wasp.HandleTopology(topology) }

func topology(node wasp.Node, sp wasp.ServicePort, out *wasp.TopologyResult) error {
	out.Mode = mode(node, sp)
	zone, name := node.Zone(), node.Name()
	for i := range sp.Len() {
		ep := sp.Endpoint(i)
		switch out.Mode {
		case abi.TopologyPreferSameNode:
			if !ep.NodeHints().Contains(name) {
				continue
			}
		case abi.TopologyPreferSameZone:
			if !ep.ZoneHints().Contains(zone) {
				continue
			}
		}
		out.Add(i)
	}
	return nil
}

func mode(node wasp.Node, sp wasp.ServicePort) abi.TopologyMode {
	if !sp.UsesClusterEndpoints() {
		// Topology only shapes the cluster set; the local set ignores hints.
		return abi.TopologyNone
	}
	zone, name := node.Zone(), node.Name()
	allNode, allZone := true, true
	forNode, forZone := false, false
	for i := range sp.Len() {
		ep := sp.Endpoint(i)
		if !ep.Ready() {
			continue
		}
		if h := ep.NodeHints(); h.Len() == 0 {
			allNode = false
		} else if h.Contains(name) {
			forNode = true
		}
		if h := ep.ZoneHints(); h.Len() == 0 {
			allZone = false
		} else if h.Contains(zone) {
			forZone = true
		}
	}
	switch {
	case allNode && forNode:
		return abi.TopologyPreferSameNode
	case allZone && forZone:
		return abi.TopologyPreferSameZone
	}
	return abi.TopologyNone
}

func main() {}
