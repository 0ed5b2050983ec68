// Package netlab builds throwaway network labs out of Linux network
// namespaces for wasp's kernel tests, end-to-end tests and demo: named
// namespaces, veth pairs, bridges, addresses, routes and sysctls, echo
// servers that answer with their own identity, and clients that ask them.
//
// A Lab owns every namespace it creates and removes them on Close, which
// also removes their links and ends their servers. Namespaces are named
// "wl<pid>-<n>-<name>" under /run/netns, so `ip netns exec` works on them
// while debugging, and New removes the leftovers of labs whose process has
// died.
//
// Code runs inside a namespace through NS.Do, on a locked OS thread that is
// thrown away afterwards: a socket created there stays in that namespace
// whatever thread uses it later, which is how a single process serves and
// dials in many namespaces at once.
//
// Everything needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); Probe says why a
// lab cannot be built here, for tests to skip with that reason.
//
// The echo protocol: a TCP server answers every line it receives with its
// identity and a newline, for as long as the connection lasts; a UDP server
// answers every datagram with its identity. Ask sends one request and
// returns the identity that answered. A request "peer" is answered with
// the identity, a space and the address the request came from, which
// AskPeer returns: what a NAT on the way left of the client's address.
package netlab
