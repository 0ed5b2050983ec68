package backendtest

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/wasp-proxy/wasp/backends"
)

// Ports of the plan.
const (
	// ServicePort is the port of every service port the builders make.
	ServicePort = 80
	// EndpointPort is the port of every endpoint the builders make, and
	// the one netlab's pods serve their echo on.
	EndpointPort = 8080
	// NodePortBase + n is the NodePort of Service n.
	NodePortBase = 30000
	// HealthCheckNodePortBase + n is the health-check node port of
	// Service n.
	HealthCheckNodePortBase = 32000
)

// Namespace and PortName name every service port the builders make:
// "demo/<name>:http".
const (
	Namespace = "demo"
	PortName  = "http"
)

// The plan's ranges, by family (see the package documentation).
var (
	ServiceCIDR4 = netip.MustParsePrefix("10.96.0.0/16")
	ServiceCIDR6 = netip.MustParsePrefix("fd00:10:96::/112")
	PodCIDR4     = netip.MustParsePrefix("10.244.0.0/16")
	PodCIDR6     = netip.MustParsePrefix("fd00:10:244::/56")
	LAN4         = netip.MustParsePrefix("198.51.100.0/24")
	LAN6         = netip.MustParsePrefix("2001:db8:100::/64")
	External4    = netip.MustParsePrefix("192.0.2.0/24")
	External6    = netip.MustParsePrefix("2001:db8:192::/64")
	VIPs4        = netip.MustParsePrefix("203.0.113.0/24")
	VIPs6        = netip.MustParsePrefix("2001:db8:203::/64")
)

// planRanges pairs each IPv4 range of the plan with its IPv6 twin, for To6.
var planRanges = [][2]netip.Prefix{
	{ServiceCIDR4, ServiceCIDR6},
	{PodCIDR4, PodCIDR6},
	{LAN4, LAN6},
	{External4, External6},
	{VIPs4, VIPs6},
}

func pick(f backends.Family, v4, v6 netip.Prefix) netip.Prefix {
	if f == backends.IPv6 {
		return v6
	}
	return v4
}

// ServiceCIDR returns the plan's Service CIDR of family f.
func ServiceCIDR(f backends.Family) netip.Prefix { return pick(f, ServiceCIDR4, ServiceCIDR6) }

// PodCIDR returns the plan's pod CIDR (the cluster CIDR) of family f.
func PodCIDR(f backends.Family) netip.Prefix { return pick(f, PodCIDR4, PodCIDR6) }

// ClusterIP returns the ClusterIP of Service n (1..255).
func ClusterIP(f backends.Family, n int) netip.Addr { return host(ServiceCIDR(f), n) }

// EndpointIP returns endpoint n (1..255) of node i's pod range (i 1..255).
func EndpointIP(f backends.Family, node, n int) netip.Addr {
	if f == backends.IPv6 {
		return host(netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%x::/64", node)), n)
	}
	return netip.AddrFrom4([4]byte{10, 244, byte(node), byte(n)})
}

// NodeIP returns the address of node i (1-based) on the LAN.
func NodeIP(f backends.Family, i int) netip.Addr { return host(pick(f, LAN4, LAN6), 10+i) }

// ClientIP returns the address of the client outside the cluster.
func ClientIP(f backends.Family) netip.Addr { return host(pick(f, LAN4, LAN6), 200) }

// AbsentIP returns an address of the LAN that no host has.
func AbsentIP(f backends.Family) netip.Addr { return host(pick(f, LAN4, LAN6), 99) }

// ExternalIP returns external IP n (1..255).
func ExternalIP(f backends.Family, n int) netip.Addr { return host(pick(f, External4, External6), n) }

// VIP returns load-balancer VIP n (1..255).
func VIP(f backends.Family, n int) netip.Addr { return host(pick(f, VIPs4, VIPs6), n) }

// NodePort returns the NodePort of Service n.
func NodePort(n int) uint16 { return uint16(NodePortBase + n) }

// host returns address n of p: the last byte for IPv4; for IPv6 the last
// 16 bits, written in hex digits that read like n's decimal ones.
func host(p netip.Prefix, n int) netip.Addr {
	if n < 0 || n > 255 {
		panic(fmt.Sprintf("backendtest: host number %d of %s: want 0..255", n, p))
	}
	if p.Addr().Is4() {
		a := p.Masked().Addr().As4()
		a[3] = byte(n)
		return netip.AddrFrom4(a)
	}
	a := p.Masked().Addr().As16()
	v, _ := strconv.ParseUint(strconv.Itoa(n), 16, 16)
	a[14], a[15] = byte(v>>8), byte(v)
	return netip.AddrFrom16(a)
}
