// Package demo bundles the cluster `wasp demo` runs the proxy over: two
// nodes, three pods and three Services whose addresses match the network
// lab the demo builds (internal/netlab).
package demo

import _ "embed"

// Cluster is cluster.yaml: Nodes, Services and EndpointSlices in the
// address plan of netlab.BuildCluster.
//
//go:embed cluster.yaml
var Cluster []byte
