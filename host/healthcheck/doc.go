// Package healthcheck serves the two HTTP health endpoints of a node proxy,
// answering exactly as upstream kube-proxy does (pkg/proxy/healthcheck), so
// cloud load balancers, kubelet probes and monitoring written against
// kube-proxy work unchanged:
//
//   - ProxyServer, the proxy's own /healthz and /livez (default bind
//     0.0.0.0:10256). A family is unhealthy when an update was queued for
//     it (QueuedUpdate) more than HealthTimeout ago and has not been
//     applied since (Updated). /healthz is also unhealthy while the Node
//     is missing, being deleted, or tainted ToBeDeletedByClusterAutoscaler.
//   - ServiceServer, one listener per healthCheckNodePort of the
//     externalTrafficPolicy=Local Services, on every node-port address,
//     telling load balancers whether this node has local endpoints: 200 iff
//     the Service has at least one local ready endpoint and the proxy is
//     healthy, else 503.
//
// Response bodies, status codes and headers are byte-for-byte upstream's;
// the tests hold them as literal strings. Sockets are opened through an
// injectable Listen function, so a caller can open them in another network
// namespace.
package healthcheck
