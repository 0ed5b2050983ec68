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

// hinted holds, per endpoint of the port at hand, whether it is hinted for
// this node and for this node's zone. Reused across ports: no allocation
// once it has grown to the largest port.
var hinted []uint8

const (
	forNode = 1 << iota
	forZone
)

func topology(node wasp.Node, sp wasp.ServicePort, out *wasp.TopologyResult) error {
	n := sp.Len()
	if !sp.UsesClusterEndpoints() {
		// Topology only shapes the cluster set; the local set ignores hints.
		for i := range n {
			out.Add(i)
		}
		return nil
	}
	zone, name := node.Zone(), node.Name()
	if cap(hinted) < n {
		hinted = make([]uint8, n)
	}
	hinted = hinted[:n]
	// One pass over the endpoints records their hints and, over the ready
	// ones only, whether every one has node (zone) hints and whether any is
	// hinted for this node (zone).
	allNode, allZone := true, true
	anyNode, anyZone := false, false
	for i := range n {
		ep := sp.Endpoint(i)
		nh, zh := ep.NodeHints(), ep.ZoneHints()
		var h uint8
		if nh.Contains(name) {
			h |= forNode
		}
		if zh.Contains(zone) {
			h |= forZone
		}
		hinted[i] = h
		if !ep.Ready() {
			continue
		}
		allNode = allNode && nh.Len() > 0
		allZone = allZone && zh.Len() > 0
		anyNode = anyNode || h&forNode != 0
		anyZone = anyZone || h&forZone != 0
		if !allNode && !allZone {
			// A ready endpoint without hints: no mode applies and every
			// endpoint is eligible, whatever the others hold.
			break
		}
	}
	var want uint8
	switch {
	case allNode && anyNode:
		out.Mode, want = abi.TopologyPreferSameNode, forNode
	case allZone && anyZone:
		out.Mode, want = abi.TopologyPreferSameZone, forZone
	}
	for i := range n {
		if want == 0 || hinted[i]&want != 0 {
			out.Add(i)
		}
	}
	return nil
}

func main() {}
