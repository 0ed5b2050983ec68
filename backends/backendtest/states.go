package backendtest

import (
	"net/netip"
	"slices"

	"github.com/wasp-proxy/wasp/backends"
)

var (
	ip  = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

// ep4 is endpoint n of node i, IPv4, with weight w.
func ep4(node, n int, w uint32) backends.Endpoint {
	return Endpoint(EndpointIP(backends.IPv4, node, n), w)
}

// Golden4 is an IPv4 State with one service port per behaviour a backend
// programs: endpoints on two nodes, weights, affinity, no endpoints with a
// NodePort and an external IP, internal policy Local with no local
// endpoint, a load balancer with source ranges and external policy Local
// (with and without a local endpoint), and UDP. Every call returns a new
// State.
func Golden4() *backends.State {
	const f = backends.IPv4
	s := State(f,
		Service("web", ClusterIP(f, 10), Endpoints(ep4(1, 10, 1), ep4(2, 10, 1))),
		Service("weighted", ClusterIP(f, 11), Endpoints(ep4(1, 11, 6), ep4(2, 11, 2))),
		Service("sticky", ClusterIP(f, 12), Affinity(10800), Endpoints(ep4(1, 12, 1), ep4(2, 12, 1))),
		Service("empty", ClusterIP(f, 13), WithNodePort(NodePort(13)), ExternalIPs(ExternalIP(f, 13))),
		Service("node-local", ClusterIP(f, 14), InternalLocal(), Local(), func(s *backends.Service) {
			s.HasAnyEndpoints = true // on other nodes
		}),
		Service("lb", ClusterIP(f, 15), WithNodePort(NodePort(15)), HealthCheckNodePort(HealthCheckNodePortBase+15),
			ExternalLocal(), ExternalIPs(ExternalIP(f, 15)), VIPs(VIP(f, 15)),
			SourceRanges(pfx("198.51.100.0/25"), External4),
			Endpoints(ep4(1, 15, 1), ep4(2, 15, 1)), Local(ep4(1, 15, 1))),
		Service("lb-remote", ClusterIP(f, 16), WithNodePort(NodePort(16)), ExternalLocal(), VIPs(VIP(f, 16)),
			Endpoints(ep4(2, 16, 1)), Local()),
		Service("dns", ClusterIP(f, 17), UDP(), Port("dns", 53),
			Endpoints(backends.Endpoint{Addr: EndpointIP(f, 1, 17), Port: 53, Weight: 1})),
	)
	return s
}

// Golden6 is a smaller IPv6 State: NodePorts on a node address and on
// loopback, MasqueradeAll, affinity with weights, and no endpoints.
func Golden6() *backends.State {
	const f = backends.IPv6
	s := State(f,
		Service("web", ClusterIP(f, 10), WithNodePort(NodePort(10)), Affinity(60),
			Endpoints(Endpoint(EndpointIP(f, 1, 10), 2), Endpoint(EndpointIP(f, 2, 10), 1))),
		Service("empty", ClusterIP(f, 13)),
	)
	s.NodeIPs = nil
	s.NodePortAddresses = []netip.Addr{NodeIP(f, 1), netip.IPv6Loopback()}
	s.MasqueradeAll = true
	return s
}

// Transitions returns a sequence of IPv4 States, from Golden4, that
// exercises every kind of change: service ports added and removed,
// endpoints and weights changed, policies toggled, affinity switched on
// and its timeout changed, NodePort addresses set and unset, Service CIDRs
// and masquerading changed, a NodePort added to a ClusterIP-only port,
// weights of 18 buckets (17:1) and of 16 (15:1), a multi-port Service
// losing a port (its ClusterIP stays in use), two Services claiming one
// external IP, and nothing at all. To6 gives the IPv6 sequence.
func Transitions() []*backends.State {
	const f = backends.IPv4
	var out []*backends.State
	add := func(change func(s *backends.State)) {
		s := Golden4()
		if change != nil {
			change(s)
		}
		s.Services = SortServices(s.Services)
		out = append(out, s)
	}
	find := func(s *backends.State, name string) *backends.Service {
		for i := range s.Services {
			if s.Services[i].Name == name {
				return &s.Services[i]
			}
		}
		panic("backendtest: no service " + name)
	}
	add(nil)
	add(func(s *backends.State) { // endpoints and weights
		find(s, "web").Cluster = []backends.Endpoint{ep4(1, 10, 1), ep4(3, 10, 5)}
		find(s, "weighted").Cluster = []backends.Endpoint{ep4(1, 11, 1)}
	})
	add(func(s *backends.State) { // a service goes, one comes; affinity on
		s.Services = slices.DeleteFunc(s.Services, func(v backends.Service) bool { return v.Name == "lb" })
		s.Services = append(s.Services, Service("new", ClusterIP(f, 30), Endpoints(ep4(2, 30, 1))))
		find(s, "web").AffinityTimeout = 30
	})
	add(func(s *backends.State) { // affinity timeout changes; NodePort addresses
		find(s, "sticky").AffinityTimeout = 60
		s.NodePortAddresses = []netip.Addr{NodeIP(f, 1), ip("198.51.100.0")}
	})
	add(func(s *backends.State) { // policies and no endpoints
		find(s, "web").InternalPolicyLocal = true
		find(s, "web").Local = []backends.Endpoint{ep4(1, 10, 1)}
		find(s, "weighted").Cluster = nil
		find(s, "weighted").HasAnyEndpoints = false
		find(s, "lb").ExternalPolicyLocal = false
	})
	add(func(s *backends.State) { // state-wide changes
		s.ServiceCIDRs = []netip.Prefix{pfx("10.96.0.0/12"), pfx("10.100.0.0/16")}
		s.ClusterCIDRs = nil
		s.MasqueradeAll = true
		s.NodePortAddresses = []netip.Addr{NodeIP(f, 1)}
	})
	add(func(s *backends.State) { // a frontend and buckets past 16 change how a port is programmed
		find(s, "web").NodePort = NodePort(10)
		find(s, "weighted").Cluster = []backends.Endpoint{ep4(1, 11, 17), ep4(2, 11, 1)}
		find(s, "dns").Cluster[0].Weight = 15
		find(s, "dns").Cluster = append(find(s, "dns").Cluster, backends.Endpoint{Addr: EndpointIP(f, 2, 17), Port: 53, Weight: 1})
	})
	add(func(s *backends.State) { // a multi-port Service, and a shared external IP
		web := find(s, "web").Clone()
		web.PortName, web.Port = "https", 443
		web.ExternalIPs = []netip.Addr{ExternalIP(f, 15)}
		web.Key = Key(&web)
		s.Services = append(s.Services, web)
	})
	add(func(s *backends.State) { // the multi-port Service loses its first port
		web := find(s, "web")
		web.PortName, web.Port = "https", 443
		web.Key = Key(web)
	})
	add(func(s *backends.State) { s.Services = nil })
	return out
}
