// Package cluster bundles a sample cluster — Nodes, Services and
// EndpointSlices — that `wasp explain` and the demo use when no cluster is
// given.
package cluster

import _ "embed"

// Sample is sample.yaml: three nodes in three zones and Services covering
// the traffic policies, topology hints and terminating endpoints.
//
//go:embed sample.yaml
var Sample []byte
