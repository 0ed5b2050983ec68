// Package perf measures wasp end to end against upstream kube-proxy, both
// in the same mode (nftables, or iptables with WASP_PERF_MODE=iptables),
// both driven by the same real kube-apiserver, the same Services and the
// same packets.
//
// One test, TestScale, runs only with WASP_PERF=1 (make bench-e2e): it
// builds upstream kube-proxy (controlplane.BuildKubeProxy), sets up the
// end-to-end environment of package framework, and runs wasp in node-a's
// network namespace and kube-proxy in node-b's, each reaching the apiserver
// through its own loopback forwarder. For every size it loads that many
// Services of ten fake endpoints each, then measures one proxy at a time
// (the other stopped, so they never share the two cores):
//
//   - full sync after a restart: the duration the proxy reports for its
//     first sync, and the time from process start until a Service created
//     while it was down answers through its ClusterIP;
//   - one new Service, and one endpoint change: from the API call until the
//     new Service, or the new endpoint's identity, answers through the
//     ClusterIP, polled with a new connection every few milliseconds from
//     inside the proxy's node namespace; before each, the proxy rests two
//     minimum sync periods so that its rate limiter's burst is full; a
//     new Service is two API calls (the Service, then its EndpointSlice),
//     and the table also gives the time from the return of the second
//     until it answers, the proxy's share;
//   - VmRSS and VmHWM of the proxy process, 30 s after the last change had
//     been programmed and the proxy had gone idle: the resident size it
//     keeps, as a dashboard shows it (kube-proxy's periodic resync, every
//     30 s, may fall in that time: it is part of its steady state);
//   - the dataplane: TCP connect and one request round trip from the client
//     namespace through the ClusterIP, against the same straight to the pod.
//
// Every number is observed from outside, by real packets where possible,
// the same way for both proxies, and printed as a table with the ratio
// wasp/kube-proxy. Nothing asserts a time: the test fails only on
// functional errors (a proxy that does not start, a Service that never
// answers).
//
// Environment: WASP_PERF_SIZES (default 100,1000,5000,10000),
// WASP_PERF_PROXIES (default wasp,kube-proxy), WASP_PERF_CONNS (sequential
// connections per dataplane path, default 3000), WASP_PERF_REPEAT (changes
// measured per size, default 3), WASP_PERF_MIN_SYNC_PERIOD (both proxies'
// minimum sync period, default 1s, their common default), WASP_PERF_MODE
// (both proxies' mode: nftables, the default, or iptables),
// WASP_PERF_IPTABLES_VARIANT (in iptables mode: nft, the default, or
// legacy), WASP_PERF_IDLE (how long each proxy idles after its last
// measurement before its memory is read once more, default 1m; 0 skips
// that reading), WASP_PERF_OUT
// (also write the table to this file), WASP_PERF_LOGS (keep the proxies'
// logs in this directory), WASP_PERF_PROFILES (keep wasp's heap profile
// and memory maps, taken when its memory is read, in this directory),
// WASP_PERF_MODULE (wasp's --module, STAGE=SOURCE: a module of the
// operator's own, which runs in a worker process). A proxy's memory is
// that of its process and its descendants (wasp's workers), summed. See
// test/README.md.
package perf
