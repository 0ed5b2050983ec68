package backendtest

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/wasp-proxy/wasp/backends"
)

// Option changes a service port Service is building.
type Option = func(*backends.Service)

// Service returns a TCP service port "demo/<name>:http" on clusterIP port
// 80, with opts applied in order (nil ones skipped). Its Key is computed
// after the options, from the namespace, name, port name, protocol and
// ClusterIP family they leave; HasAnyEndpoints is set when they gave it
// Cluster or Local endpoints (an option may also set it on its own).
func Service(name string, clusterIP netip.Addr, opts ...Option) backends.Service {
	s := backends.Service{
		Namespace: Namespace, Name: name, PortName: PortName, Protocol: backends.TCP,
		ClusterIP: clusterIP, Port: ServicePort,
	}
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if len(s.Cluster) > 0 || len(s.Local) > 0 {
		s.HasAnyEndpoints = true
	}
	s.Key = Key(&s)
	return s
}

// Key returns the key a service port's fields give it:
// "namespace/name:portName/PROTO/IPv4" (or IPv6, by the ClusterIP).
func Key(s *backends.Service) string {
	fam := "IPv4"
	if s.ClusterIP.Is6() {
		fam = "IPv6"
	}
	return s.Namespace + "/" + s.Name + ":" + s.PortName + "/" + string(s.Protocol) + "/" + fam
}

// Endpoint returns an endpoint on addr port 8080 with weight w.
func Endpoint(addr netip.Addr, w uint32) backends.Endpoint {
	return backends.Endpoint{Addr: addr, Port: EndpointPort, Weight: w}
}

// Endpoints sets the Cluster endpoints (the set of policy Cluster).
func Endpoints(eps ...backends.Endpoint) Option {
	return func(s *backends.Service) { s.Cluster = append([]backends.Endpoint{}, eps...) }
}

// Local sets the Local endpoints (the set of policy Local): an empty,
// non-nil set when eps is empty, which drops traffic under policy Local.
func Local(eps ...backends.Endpoint) Option {
	return func(s *backends.Service) { s.Local = append([]backends.Endpoint{}, eps...) }
}

// InternalLocal sets internal traffic policy Local.
func InternalLocal() Option { return func(s *backends.Service) { s.InternalPolicyLocal = true } }

// ExternalLocal sets external traffic policy Local.
func ExternalLocal() Option { return func(s *backends.Service) { s.ExternalPolicyLocal = true } }

// WithNodePort sets the NodePort.
func WithNodePort(p uint16) Option { return func(s *backends.Service) { s.NodePort = p } }

// HealthCheckNodePort sets the health-check node port.
func HealthCheckNodePort(p uint16) Option {
	return func(s *backends.Service) { s.HealthCheckNodePort = p }
}

// ExternalIPs sets the external IPs.
func ExternalIPs(as ...netip.Addr) Option {
	return func(s *backends.Service) { s.ExternalIPs = slices.Clone(as) }
}

// VIPs sets the load-balancer VIPs.
func VIPs(as ...netip.Addr) Option {
	return func(s *backends.Service) { s.LoadBalancerVIPs = slices.Clone(as) }
}

// SourceRanges sets the load-balancer source ranges.
func SourceRanges(ps ...netip.Prefix) Option {
	return func(s *backends.Service) { s.LoadBalancerSourceRanges = slices.Clone(ps) }
}

// Affinity sets ClientIP session affinity with a timeout in seconds.
func Affinity(seconds uint32) Option {
	return func(s *backends.Service) { s.AffinityTimeout = seconds }
}

// UDP makes the service port UDP.
func UDP() Option { return func(s *backends.Service) { s.Protocol = backends.UDP } }

// Port sets the port's name and number.
func Port(name string, port uint16) Option {
	return func(s *backends.Service) { s.PortName, s.Port = name, port }
}

// UDPTwin returns s as a UDP service port (with its Key changed).
func UDPTwin(s backends.Service) backends.Service {
	s = s.Clone()
	s.Protocol = backends.UDP
	s.Key = Key(&s)
	return s
}

// State returns a State of family f on the plan: its Service and pod
// CIDRs, node 1's address as NodeIPs, and svcs sorted by Key.
func State(f backends.Family, svcs ...backends.Service) *backends.State {
	return &backends.State{
		Family:       f,
		NodeIPs:      []netip.Addr{NodeIP(f, 1)},
		ServiceCIDRs: []netip.Prefix{ServiceCIDR(f)},
		ClusterCIDRs: []netip.Prefix{PodCIDR(f)},
		Services:     SortServices(svcs),
	}
}

// SortServices sorts ss by Key, in place, and returns it.
func SortServices(ss []backends.Service) []backends.Service {
	slices.SortFunc(ss, func(a, b backends.Service) int { return strings.Compare(a.Key, b.Key) })
	return ss
}

// To6 returns the IPv6 twin of s, an IPv4 State on the plan: every
// address moved to its IPv6 twin of the plan (10.96.0.15 to
// fd00:10:96::15, 10.244.2.15 to fd00:10:244:2::15, 127.0.0.1 to ::1),
// every range of the plan to its twin, any other prefix to the twin of its
// address with as many host bits, any address outside the plan to
// fd00:ffff::<its four bytes>, and every Key recomputed.
func To6(s *backends.State) *backends.State {
	out := s.Clone()
	out.Family = backends.IPv6
	addrs := func(as []netip.Addr) {
		for i := range as {
			as[i] = addr6(as[i])
		}
	}
	prefixes := func(ps []netip.Prefix) {
		for i := range ps {
			ps[i] = prefix6(ps[i])
		}
	}
	eps := func(es []backends.Endpoint) {
		for i := range es {
			es[i].Addr = addr6(es[i].Addr)
		}
	}
	addrs(out.NodePortAddresses)
	addrs(out.NodeIPs)
	prefixes(out.ServiceCIDRs)
	prefixes(out.ClusterCIDRs)
	for i := range out.Services {
		v := &out.Services[i]
		v.ClusterIP = addr6(v.ClusterIP)
		addrs(v.ExternalIPs)
		addrs(v.LoadBalancerVIPs)
		prefixes(v.LoadBalancerSourceRanges)
		eps(v.Cluster)
		eps(v.Local)
		addrs(v.Serving)
		v.Key = Key(v)
	}
	out.Services = SortServices(out.Services)
	return out
}

func addr6(a netip.Addr) netip.Addr {
	if a.Is6() {
		return a
	}
	if a.IsLoopback() {
		return netip.IPv6Loopback()
	}
	b := a.As4()
	if PodCIDR4.Contains(a) {
		return EndpointIP(backends.IPv6, int(b[2]), int(b[3]))
	}
	for _, r := range planRanges {
		if r[0].Contains(a) && (r[0].Bits() == 24 || b[2] == 0) {
			return host(r[1], int(b[3]))
		}
	}
	// Outside the plan: the IPv4 address in the low bits of fd00:ffff::/96.
	return netip.AddrFrom16([16]byte{0: 0xfd, 2: 0xff, 3: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
}

func prefix6(p netip.Prefix) netip.Prefix {
	if p.Addr().Is6() {
		return p
	}
	for _, r := range planRanges {
		if p == r[0] {
			return r[1]
		}
	}
	if p.Bits() == 24 && PodCIDR4.Contains(p.Addr()) {
		return netip.PrefixFrom(EndpointIP(backends.IPv6, int(p.Addr().As4()[2]), 0), 64)
	}
	return netip.PrefixFrom(addr6(p.Addr()), 128-(32-p.Bits())).Masked()
}
