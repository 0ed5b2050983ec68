// Package conntrack is a backends.Backend decorator that removes stale UDP
// connection-tracking entries after every successful sync, as upstream
// kube-proxy's conntrack reconciler does (pkg/proxy/conntrack/cleanup.go).
//
// UDP has no connection teardown, so a conntrack entry created while a
// Service pointed at an endpoint that has since gone, or while it had no
// endpoint at all (the kernel cached the reject, or the flow was never
// DNATed), keeps steering the client's datagrams to the wrong place for as
// long as the client keeps sending. After the wrapped backend has
// programmed a State, Backend.Sync scans the conntrack table of the State's
// family once and deletes every UDP entry that
//
//   - was sent to a service frontend (ClusterIP, external IP or load-balancer
//     VIP, on the service port), or to a NodePort on any address, of a UDP
//     service port that has at least one serving endpoint, and
//   - was answered (reply source) by an address that is not one of that
//     port's serving endpoints (backends.Service.Serving).
//
// Traffic policy, topology and the module chain are deliberately ignored,
// so a UDP flow lives exactly as long as a TCP connection would: while its
// endpoint serves. A service port with no serving endpoint is left alone,
// because deleting its entries would only recreate them. TCP and SCTP
// entries are never touched.
//
// The decision is pure (see plan) and is tested on a stateful fake table;
// the kernel side is a netlink conntrack dump with deletes, optionally in
// another network namespace (Opts.NetNS).
package conntrack
