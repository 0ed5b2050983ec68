package backends

import "net/netip"

// FrontendKind is what kind of address a service port answers on.
type FrontendKind uint8

const (
	// FrontendClusterIP is the ClusterIP; its traffic follows
	// Service.InternalRoute.
	FrontendClusterIP FrontendKind = iota + 1
	// FrontendExternalIP is one of Service.ExternalIPs.
	FrontendExternalIP
	// FrontendLoadBalancer is one of Service.LoadBalancerVIPs; its
	// sources are limited by Service.FirewallSources.
	FrontendLoadBalancer
	// FrontendNodePort is the NodePort, on the addresses of
	// State.NodePortAddrs.
	FrontendNodePort
)

var frontendNames = map[FrontendKind]string{FrontendClusterIP: "cluster-ip", FrontendExternalIP: "external-ip",
	FrontendLoadBalancer: "load-balancer", FrontendNodePort: "node-port"}

// String returns "cluster-ip", "external-ip", "load-balancer",
// "node-port" or "frontend(N)".
func (k FrontendKind) String() string { return enumString(frontendNames, "frontend", k) }

// Frontend is a destination a service port answers on.
type Frontend struct {
	Kind FrontendKind
	// Addr is the destination address; the zero Addr for a NodePort,
	// which answers on the node's NodePort addresses.
	Addr netip.Addr
	// Port is the destination port: Service.Port, or the NodePort.
	Port uint16
}

// External reports whether the frontend's traffic follows
// Service.ExternalRoute: every kind but the ClusterIP.
func (f Frontend) External() bool { return f.Kind != FrontendClusterIP }

// Frontends returns where the service port answers, in this order: its
// ClusterIP; its external IPs, then its load-balancer VIPs, each sorted
// and without duplicates; its NodePort, if it has one.
func (s *Service) Frontends() []Frontend {
	out := make([]Frontend, 0, 2+len(s.ExternalIPs)+len(s.LoadBalancerVIPs))
	out = append(out, Frontend{Kind: FrontendClusterIP, Addr: s.ClusterIP, Port: s.Port})
	for _, a := range SortedAddrs(s.ExternalIPs) {
		out = append(out, Frontend{Kind: FrontendExternalIP, Addr: a, Port: s.Port})
	}
	for _, a := range SortedAddrs(s.LoadBalancerVIPs) {
		out = append(out, Frontend{Kind: FrontendLoadBalancer, Addr: a, Port: s.Port})
	}
	if s.NodePort != 0 {
		out = append(out, Frontend{Kind: FrontendNodePort, Port: s.NodePort})
	}
	return out
}

// NodePortAddrs returns the addresses NodePorts answer on, sorted and
// without duplicates, or all true when NodePortAddresses is empty: every
// local address of the family. Whether loopback addresses count is the
// backend's to say (upstream's nftables mode never answers on them, its
// iptables mode may).
func (s *State) NodePortAddrs() (addrs []netip.Addr, all bool) {
	if len(s.NodePortAddresses) == 0 {
		return nil, true
	}
	return SortedAddrs(s.NodePortAddresses), false
}
