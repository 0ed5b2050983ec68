// Package model builds the node-local model: what one node's proxy knows of
// every Service port, per IP family, after applying upstream kube-proxy's
// rules for Services and EndpointSlices.
//
// Build is pure and deterministic: it does no I/O, does not modify its input,
// and gives the same Model for the same objects whatever their order. It
// follows kube-proxy (pkg/proxy/servicechangetracker.go, serviceport.go,
// endpointslicecache.go) field for field; where it differs, on objects the
// apiserver would reject or never produce, the comment at the code says so.
//
// What it skips, like kube-proxy:
//   - Services and EndpointSlices carrying LabelServiceProxyName or
//     LabelHeadless (upstream filters both kinds with one informer selector,
//     LabelSelector);
//   - Services whose ClusterIP is "" or "None", of type ExternalName, or with
//     no ClusterIP of the family;
//   - EndpointSlices without LabelServiceName, name or namespace, or whose
//     address type is not the family (FQDN slices never match);
//   - slice ports with a nil name, a nil port or port 0, and endpoints with
//     no address.
//
// The Model carries, for each service port, the abi.ServicePort that Wasm
// modules see and the host-only fields a backend needs (ClusterIP,
// external IPs, load-balancer VIPs and source ranges, session affinity,
// health-check node port).
package model
