// Command trafficpolicy is wasp's default traffic-policy stage: upstream
// kube-proxy's endpoint categorisation for internal and external traffic
// policy.
//
//   - Cluster set (when the port uses cluster endpoints): ready endpoints the
//     topology stage made eligible; if there are none, every serving and
//     terminating endpoint, ignoring topology.
//   - Local set (when the port uses local endpoints): local ready endpoints;
//     if there are none, local serving and terminating endpoints; if there are
//     none of those either, the set stays nil. Topology never applies.
//   - All reachable: the union of the sets in use.
//   - hasAnyEndpoints: any usable endpoint anywhere, even when neither set
//     can use it (iTP=Local with only remote endpoints must drop, not reject).
//
// Sets a policy does not use stay nil; nil and empty mean different things
// to the dataplane.
package main

import (
	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

func init() { wasp.HandleTrafficPolicy(trafficPolicy) }

func trafficPolicy(_ wasp.Node, sp wasp.ServicePort, out *wasp.PolicyResult) error {
	n := sp.Len()
	if n == 0 {
		return nil
	}
	if sp.UsesClusterEndpoints() {
		// Used but possibly empty: upstream's cluster set is [] rather than
		// nil when no endpoint qualifies.
		out.Cluster.Use()
		eligible := sp.Decision().Eligible()
		for k := range eligible.Len() {
			if i := eligible.At(k); sp.Endpoint(i).Ready() {
				out.Cluster.Add(i)
			}
		}
		if out.Cluster.Len() == 0 {
			for i := range n {
				if ep := sp.Endpoint(i); ep.Serving() && ep.Terminating() {
					out.Cluster.Add(i)
				}
			}
		}
		out.HasAnyEndpoints = out.Cluster.Len() > 0
	}
	if !sp.UsesLocalEndpoints() {
		copySet(&out.All, &out.Cluster)
		return nil
	}

	localReady, localTerminating := false, false
	for i := range n {
		ep := sp.Endpoint(i)
		usable := ep.Ready() || (ep.Serving() && ep.Terminating())
		if usable {
			out.HasAnyEndpoints = true
		}
		if ep.Local() {
			localReady = localReady || ep.Ready()
			localTerminating = localTerminating || (ep.Serving() && ep.Terminating())
		}
	}
	for i := range n {
		ep := sp.Endpoint(i)
		switch {
		case !ep.Local():
		case localReady && ep.Ready():
			out.Local.Add(i)
		case !localReady && localTerminating && ep.Serving() && ep.Terminating():
			out.Local.Add(i)
		}
	}
	if !sp.UsesClusterEndpoints() {
		copySet(&out.All, &out.Local)
		return nil
	}
	// Both sets in use: all reachable is their union. The SDK sorts and
	// removes duplicates.
	copySet(&out.All, &out.Cluster)
	copySet(&out.All, &out.Local)
	return nil
}

// copySet adds the members of src to dst; dst becomes used if src is.
func copySet(dst, src *wasp.Set) {
	if src.IsNil() {
		return
	}
	dst.Use()
	for _, i := range src.Indices() {
		dst.Add(int(i))
	}
}

func main() {}
