// Package backendtest holds what every backends.Backend is tested with: one
// address plan, builders of Services and States on it, and shared suites
// that a backend's own tests call with a small Harness. It is imported by
// _test files only.
//
// # Address plan
//
// Documentation and private ranges only, the same in every backend's unit
// tests, golden files and kernel tests (and the same as netlab's clusters,
// so that a State built here routes in a netlab cluster):
//
//	                      IPv4                     IPv6
//	Service CIDR          10.96.0.0/16             fd00:10:96::/112
//	  ClusterIP n         10.96.0.<n>              fd00:10:96::<n>
//	pod CIDR              10.244.0.0/16            fd00:10:244::/56
//	  pods of node i      10.244.<i>.0/24          fd00:10:244:<i>::/64
//	  endpoint n, node i  10.244.<i>.<n>           fd00:10:244:<i>::<n>
//	node LAN              198.51.100.0/24          2001:db8:100::/64
//	  node i (1-based)    198.51.100.<10+i>        2001:db8:100::<10+i>
//	  client (outside)    198.51.100.200           2001:db8:100::200
//	  absent address      198.51.100.99            2001:db8:100::99
//	external IPs          192.0.2.0/24             2001:db8:192::/64
//	  external IP n       192.0.2.<n>              2001:db8:192::<n>
//	load-balancer VIPs    203.0.113.0/24           2001:db8:203::/64
//	  VIP n               203.0.113.<n>            2001:db8:203::<n>
//	Service ports         80 (TCP or UDP)
//	endpoint ports        8080
//	NodePort n            30000+n
//	health-check port n   32000+n
//
// An IPv6 host number is written in hex digits that read like its decimal
// IPv4 twin (ClusterIP 15 is 10.96.0.15 and fd00:10:96::15), so the plan
// reads the same in both families. The number of a Service repeats in its
// ClusterIP, endpoints, external IPs, VIPs and node ports (Service 15:
// 10.96.0.15 → endpoints 10.244.1.15 and 10.244.2.15, external IP
// 192.0.2.15, VIP 203.0.113.15, NodePort 30015). The proxy under test runs
// on node 1; the client reaches the cluster's ClusterIPs, external IPs and
// VIPs through it, as through a router in front of the node. netlab's pod
// j of node i is endpoint 10+j of node i (a1 is 10.244.1.11).
//
// # Builders
//
// Service builds a TCP service port "demo/<name>:http" with Options
// (Endpoints, Local, NodePort, ExternalIPs, VIPs, SourceRanges, Affinity,
// UDP, ...); State wraps service ports in a State of the plan; To6 turns an
// IPv4 State of the plan into its IPv6 twin. Golden4 and Golden6 have one
// service port per behaviour, for golden files; Transitions is a sequence
// of States exercising every kind of change.
//
// # Suites
//
// RunTransitions, RunIdempotence, RunLifecycle and RunTraffic take a
// Harness, which says how to make the backend under test, how to see what
// it programmed, and which scenarios it does not support (and why). Each
// scenario is a subtest, so a failure names it and -run selects it. See
// backends/README.md ("Testing a backend").
package backendtest
