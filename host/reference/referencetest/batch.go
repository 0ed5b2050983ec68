// Package referencetest generates realistic, deterministic service ports for
// benchmarks and differential tests of the stage implementations (the native
// reference and the Wasm modules).
package referencetest

import (
	"cmp"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"

	"github.com/wasp-proxy/wasp/abi"
)

// Node under test and the shape of the simulated cluster.
const (
	// NodeName is the node every batch is evaluated for.
	NodeName = "node-0"
	// NodeZone is NodeName's zone.
	NodeZone = "zone-a"
	// Nodes is the number of nodes endpoints run on: node-0 .. node-9.
	Nodes = 10
)

// zones[k%len(zones)] is the zone of node-k, so node-0, node-3, node-6 and
// node-9 are in zone-a.
var zones = [...]string{"zone-a", "zone-b", "zone-c"}

// Percentages of the service port mix, out of 100.
const (
	pctInternalLocal = 10 // ClusterIP, internalTrafficPolicy: Local
	pctExternalLocal = 10 // NodePort, externalTrafficPolicy: Local
	pctNodePort      = 15 // NodePort, both policies Cluster
	pctZoneHints     = 30 // every endpoint carries zone hints
	pctSameNode      = 5  // of the hinted ones: PreferSameNode (node and zone hints)
	pctHintGap       = 5  // of the hinted ones: one endpoint lost its hints
	pctAllDraining   = 2  // every endpoint is terminating (rollout)
	pctAnnotated     = 20 // carries a few annotations
)

// Batch returns the node under test (NodeName in NodeZone) and ports service
// ports with endpointsPerPort endpoints each, generated from seed. The same
// arguments always give the same result.
//
// The mix: zones a/b/c over nodes node-0..node-9; about 30% of the service
// ports have zone hints on every endpoint (some of those PreferSameNode,
// some with one endpoint missing its hints), 10% use internalTrafficPolicy
// Local, 10% are NodePorts with externalTrafficPolicy Local, 15% plain
// NodePorts; a few percent of endpoints are terminating or unready, and a
// few service ports are fully draining. Endpoint addresses are IPv4 in
// 10.0.0.0/8, unique within a service port and sorted by "ip:port" string as
// the ABI requires.
//
// Hint slices are shared between endpoints: treat the result as read-only.
func Batch(seed uint64, ports, endpointsPerPort int) (abi.Node, []abi.ServicePort) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	node := abi.Node{
		Name: NodeName,
		Labels: []abi.Label{ // sorted by key
			{Key: "kubernetes.io/hostname", Value: NodeName},
			{Key: abi.LabelTopologyRegion, Value: "region-1"},
			{Key: abi.LabelTopologyZone, Value: NodeZone},
		},
	}

	var nodeNames [Nodes]string
	var nodeHints [Nodes][]string
	for k := range nodeNames {
		nodeNames[k] = "node-" + strconv.Itoa(k)
		nodeHints[k] = []string{nodeNames[k]}
	}
	var zoneHints [len(zones)][]string
	for z := range zones {
		zoneHints[z] = []string{zones[z]}
	}
	annotations := []abi.Label{ // sorted by key
		{Key: "service.kubernetes.io/topology-mode", Value: "Auto"},
		{Key: "wasp.io/profile", Value: "default"},
	}

	// One backing array for every endpoint keeps generation fast; each port
	// gets a capacity-limited window of it.
	all := make([]abi.Endpoint, ports*endpointsPerPort)
	out := make([]abi.ServicePort, ports)
	for p := range out {
		sp := &out[p]
		sp.Namespace = "ns-" + strconv.Itoa(p%50)
		sp.Name = "svc-" + strconv.Itoa(p)
		sp.Protocol = abi.ProtocolTCP
		sp.Port, sp.PortName = 80, "http"
		switch r := rng.IntN(10); {
		case r == 0:
			sp.Protocol, sp.Port, sp.PortName = abi.ProtocolUDP, 53, "dns"
		case r < 3:
			sp.Port, sp.PortName = 443, "https"
		case r < 4:
			sp.Port, sp.PortName = 9090, ""
		}
		targetPort := 8000 + sp.Port

		switch r := rng.IntN(100); {
		case r < pctInternalLocal:
			sp.InternalPolicyLocal = true
		case r < pctInternalLocal+pctExternalLocal:
			sp.NodePort = uint16(30000 + p%2768)
			sp.ExternalPolicyLocal = true
			sp.ExternallyAccessible = true
		case r < pctInternalLocal+pctExternalLocal+pctNodePort:
			sp.NodePort = uint16(30000 + p%2768)
			sp.ExternallyAccessible = true
		}
		if rng.IntN(100) < pctAnnotated {
			sp.Annotations = annotations
		}

		hinted := rng.IntN(100) < pctZoneHints
		sameNode := hinted && rng.IntN(100) < pctSameNode
		gap := -1 // index of the endpoint that lost its hints
		if hinted && rng.IntN(100) < pctHintGap {
			gap = rng.IntN(max(endpointsPerPort, 1))
		}
		draining := rng.IntN(100) < pctAllDraining

		eps := all[p*endpointsPerPort : (p+1)*endpointsPerPort : (p+1)*endpointsPerPort]
		for e := range eps {
			ep := &eps[e]
			k := rng.IntN(Nodes)
			ep.Addr = endpointAddr(p, e, endpointsPerPort)
			ep.Port = targetPort
			ep.NodeName = nodeNames[k]
			ep.Local = k == 0
			ep.Zone = zones[k%len(zones)]
			setConditions(ep, rng, draining)
			if hinted && e != gap {
				ep.ZoneHints = zoneHints[k%len(zones)]
				if sameNode {
					ep.NodeHints = nodeHints[k]
				}
			}
		}
		if endpointsPerPort > maxFixedWidth {
			sortByAddrPort(eps)
		}
		sp.Endpoints = eps
	}
	return node, out
}

// setConditions draws an endpoint's ready/serving/terminating combination:
// mostly ready, a few serving-terminating, not-serving-terminating or unready.
func setConditions(ep *abi.Endpoint, rng *rand.Rand, draining bool) {
	r := rng.IntN(100)
	if draining {
		r = 90 + r%7 // one of the terminating cases below
	}
	switch {
	case r < 90: // ready
		ep.Ready, ep.Serving = true, true
	case r < 95: // serving, terminating
		ep.Serving, ep.Terminating = true, true
	case r < 97: // not serving, terminating
		ep.Terminating = true
	default: // unready, not terminating
	}
}

// maxFixedWidth is the largest endpoint count per port for which
// endpointAddr yields addresses whose strings all have the same length.
const maxFixedWidth = 100

// endpointAddr is the address of endpoint e of port p, with perPort
// endpoints per port.
//
// Up to maxFixedWidth endpoints it is 10.<100+e>.<100+(p/100)%100>.<100+p%100>:
// every octet after the first has three digits, so the "ip:port" strings have
// the same length and ascending e already gives the string order the ABI
// requires. Ports 10000 apart reuse addresses, which no consumer cares about.
//
// Past that it numbers endpoints sequentially in 10.0.0.0/8 and the caller
// sorts them.
func endpointAddr(p, e, perPort int) netip.Addr {
	if perPort <= maxFixedWidth {
		return netip.AddrFrom4([4]byte{10, byte(100 + e), byte(100 + (p/100)%100), byte(100 + p%100)})
	}
	n := uint32(p*perPort+e) & 0xffffff
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

// sortByAddrPort sorts endpoints by their "ip:port" string, the order the
// ABI requires; only needed past maxFixedWidth endpoints per port.
func sortByAddrPort(eps []abi.Endpoint) {
	slices.SortFunc(eps, func(a, b abi.Endpoint) int {
		return cmp.Compare(netip.AddrPortFrom(a.Addr, a.Port).String(), netip.AddrPortFrom(b.Addr, b.Port).String())
	})
}
