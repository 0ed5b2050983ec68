package backends

import "strconv"

// enumString returns the name of v, or "what(N)" for a value without one.
func enumString[T ~uint8](names map[T]string, what string, v T) string {
	if n, ok := names[v]; ok {
		return n
	}
	return what + "(" + strconv.Itoa(int(v)) + ")"
}

// Verdict is what a dataplane does with a new connection to a service
// port: reject it, drop it, or forward it to one of a set of endpoints.
type Verdict uint8

const (
	// Reject answers the client with an ICMP (or TCP reset) error: the
	// service port has no endpoint at all.
	Reject Verdict = iota + 1
	// Drop discards the packet silently: the service port has endpoints,
	// but none the traffic policy may use (for example, policy Local and
	// no endpoint on the node).
	Drop
	// Forward sends the connection to one of Route.Endpoints.
	Forward
)

var verdictNames = map[Verdict]string{Reject: "reject", Drop: "drop", Forward: "forward"}

// String returns "reject", "drop", "forward" or "verdict(N)".
func (v Verdict) String() string { return enumString(verdictNames, "verdict", v) }

// Route is where new connections of one kind of traffic (internal: to the
// ClusterIP; external: to a NodePort, an external IP or a load-balancer
// VIP) go, as upstream kube-proxy decides it.
type Route struct {
	// Verdict is Reject when the service port has no endpoint at all
	// (HasAnyEndpoints false), Drop when it has some but the policy's set
	// is nil (unused) or empty, Forward otherwise.
	Verdict Verdict
	// Local is whether the traffic policy is Local, so that the route
	// uses Service.Local rather than Service.Cluster.
	Local bool
	// Endpoints is the policy's set; non-empty when Verdict is Forward.
	Endpoints []Endpoint
}

// InternalRoute is the route of traffic to the ClusterIP, under the
// internal traffic policy.
func (s *Service) InternalRoute() Route { return s.route(s.InternalPolicyLocal) }

// ExternalRoute is the route of traffic to a NodePort, an external IP or
// a load-balancer VIP, under the external traffic policy. It is only
// meaningful when the service port is ExternallyReachable.
func (s *Service) ExternalRoute() Route { return s.route(s.ExternalPolicyLocal) }

func (s *Service) route(local bool) Route {
	r := Route{Local: local, Endpoints: s.Cluster}
	if local {
		r.Endpoints = s.Local
	}
	switch {
	case !s.HasAnyEndpoints:
		r.Verdict = Reject
	case len(r.Endpoints) == 0:
		r.Verdict = Drop
	default:
		r.Verdict = Forward
	}
	return r
}

// ExternallyReachable reports whether the service port answers external
// traffic: it has a NodePort, an external IP or a load-balancer VIP.
func (s *Service) ExternallyReachable() bool {
	return s.NodePort != 0 || len(s.ExternalIPs) > 0 || len(s.LoadBalancerVIPs) > 0
}
