// Package reference is the native Go implementation of the three wasp
// stages (topology, traffic-policy, endpoint-selection). It reproduces
// upstream kube-proxy's CategorizeEndpoints (kubernetes/kubernetes
// pkg/proxy/topology.go, read at 008b365) and serves two purposes:
//
//   - it is the oracle the differential tests run the Wasm modules against;
//   - it is the built-in fallback the host uses when no module is configured
//     for a stage.
//
// Every function works on indices into ServicePort.Endpoints and returns
// them in ascending order. The split into stages follows abi.Stage:
//
//	Topology         -> Mode, Eligible
//	TrafficPolicy    -> Cluster, Local, All, HasAnyEndpoints
//	EndpointSelection-> Weights
//
// # Upstream facts this package depends on
//
// Each was checked against the upstream source:
//
//   - Nil versus empty. Upstream builds the Cluster list with a filter that
//     always returns a non-nil slice, so a service that uses Cluster policy
//     but has no usable endpoint gets an empty set ([] in explain output),
//     never nil. The Local list, on the other hand, is only assigned when a
//     local ready or local serving-terminating endpoint exists, so a service
//     that uses Local policy but has no usable local endpoint gets nil (null),
//     not an empty set. A set the service does not use is nil. With no
//     endpoints at all every set is nil.
//   - Zone matching is set membership of the node's zone label value, read
//     with a missing label as "". There is no special case for "": a node
//     without a zone label matches an endpoint whose zone hints contain the
//     empty string (the API accepts "" as a label value). Hints that name a
//     real zone never match such a node.
//   - PreferSameNode (PreferSameTrafficDistribution, GA; treated as always
//     on) wins when every ready endpoint has at least one node hint and at
//     least one ready endpoint is hinted for this node's name. Otherwise
//     the zone rule is tried. Unready endpoints take no part in either check.
//   - All is the union of Cluster and Local when the service uses both.
//     Upstream skips the merge when no topology applies and Local did not
//     fall back to terminating endpoints, because Cluster then contains
//     Local; it merges through a map, so its order is random. Here All is
//     always the ordered union, which is the same set in every case.
package reference
