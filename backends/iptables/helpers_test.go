package iptables

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// Address plan of the tests (documentation and private ranges only):
//
//	ClusterIPs        10.96.0.0/16        fd00:10:96::/112
//	pods              10.244.0.0/16       fd00:10:244::/56
//	nodes, clients    198.51.100.0/24     2001:db8:100::/64
//	LB VIPs           203.0.113.0/24      2001:db8:203::/64
//	external IPs      192.0.2.0/24        2001:db8:192::/64
//
// The node is 198.51.100.11. The last byte of a ClusterIP repeats in its
// service's endpoints, VIPs and node ports (10.96.0.15 → 10.244.1.15,
// 203.0.113.15, 30015); endpoints in 10.244.1.0/24 are on the node.

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var (
	ip  = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

const nodeIP = "198.51.100.11"

func ep(addr string, w uint32) backends.Endpoint {
	return backends.Endpoint{Addr: ip(addr), Port: 8080, Weight: w}
}

// svc returns a TCP service port "demo/<name>:http" on clusterIP:80 with
// HasAnyEndpoints set when f gives it Cluster or Local endpoints.
func svc(name, clusterIP string, f func(*backends.Service)) backends.Service {
	fam := "IPv4"
	if ip(clusterIP).Is6() {
		fam = "IPv6"
	}
	s := backends.Service{
		Key: "demo/" + name + ":http/TCP/" + fam, Namespace: "demo", Name: name, PortName: "http", Protocol: "TCP",
		ClusterIP: ip(clusterIP), Port: 80,
	}
	if f != nil {
		f(&s)
	}
	if len(s.Cluster) > 0 || len(s.Local) > 0 {
		s.HasAnyEndpoints = true
	}
	return s
}

func sortServices(ss []backends.Service) []backends.Service {
	slices.SortFunc(ss, func(a, b backends.Service) int { return strings.Compare(a.Key, b.Key) })
	return ss
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n%s", name, lineDiff(string(want), got))
	}
}

// lineDiff shows the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	only := func(a, b []string, sign string, out *strings.Builder) {
		count := map[string]int{}
		for _, l := range b {
			count[l]++
		}
		for _, l := range a {
			if count[l] > 0 {
				count[l]--
				continue
			}
			out.WriteString(sign + " " + l + "\n")
		}
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	only(w, g, "-", &b)
	only(g, w, "+", &b)
	return b.String()
}

// largeState returns n service ports with eps endpoints each.
func largeState(n, eps int) *backends.State {
	s := &backends.State{
		Family:       backends.IPv4,
		ServiceCIDRs: []netip.Prefix{pfx("10.96.0.0/16")},
		ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")},
	}
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		cip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		sv := backends.Service{
			Key: "bench/" + name + ":http/TCP/IPv4", Namespace: "bench", Name: name, PortName: "http", Protocol: "TCP",
			ClusterIP: cip, Port: 80, HasAnyEndpoints: true,
		}
		for j := range eps {
			sv.Cluster = append(sv.Cluster, backends.Endpoint{
				Addr: netip.AddrFrom4([4]byte{10, 244, byte(i >> 6), byte(i&63)<<2 | byte(j&3)}), Port: uint16(8080 + j), Weight: 1,
			})
		}
		s.Services = append(s.Services, sv)
	}
	return s
}

// goldenState4 has one service port per behaviour the plan knows.
func goldenState4() *backends.State {
	return &backends.State{
		Family:       backends.IPv4,
		NodeIPs:      []netip.Addr{ip(nodeIP)},
		ServiceCIDRs: []netip.Prefix{pfx("10.96.0.0/16")},
		ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")},
		Services: sortServices([]backends.Service{
			svc("web", "10.96.0.10", func(s *backends.Service) {
				s.Cluster = []backends.Endpoint{ep("10.244.1.10", 1), ep("10.244.2.10", 1)}
			}),
			svc("weighted", "10.96.0.11", func(s *backends.Service) {
				s.Cluster = []backends.Endpoint{ep("10.244.1.11", 6), ep("10.244.2.11", 2)}
			}),
			svc("sticky", "10.96.0.12", func(s *backends.Service) {
				s.AffinityTimeout = 10800
				s.NodePort = 30012
				s.Cluster = []backends.Endpoint{ep("10.244.1.12", 1), ep("10.244.2.12", 1)}
			}),
			svc("empty", "10.96.0.13", func(s *backends.Service) {
				s.NodePort = 30013
				s.ExternalIPs = []netip.Addr{ip("192.0.2.13")}
			}),
			svc("node-local", "10.96.0.14", func(s *backends.Service) {
				s.InternalPolicyLocal, s.HasAnyEndpoints = true, true
				s.Cluster, s.Local = nil, []backends.Endpoint{}
			}),
			svc("lb", "10.96.0.15", func(s *backends.Service) {
				s.NodePort, s.HealthCheckNodePort, s.ExternalPolicyLocal = 30015, 32015, true
				s.ExternalIPs = []netip.Addr{ip("192.0.2.15")}
				s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.15")}
				s.LoadBalancerSourceRanges = []netip.Prefix{pfx("198.51.100.0/25"), pfx("192.0.2.0/24")}
				s.Cluster = []backends.Endpoint{ep("10.244.1.15", 1), ep("10.244.2.15", 1)}
				s.Local = []backends.Endpoint{ep("10.244.1.15", 1)}
			}),
			svc("lb-remote", "10.96.0.16", func(s *backends.Service) {
				s.NodePort, s.ExternalPolicyLocal = 30016, true
				s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.16")}
				s.Cluster = []backends.Endpoint{ep("10.244.2.16", 1)}
				s.Local = []backends.Endpoint{}
			}),
			svc("lb-cluster", "10.96.0.18", func(s *backends.Service) {
				s.NodePort = 30018
				s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.18")}
				s.Cluster = []backends.Endpoint{ep("10.244.2.18", 1), ep("10.244.2.19", 1)}
			}),
			{
				Key: "demo/dns:dns/UDP/IPv4", Namespace: "demo", Name: "dns", PortName: "dns", Protocol: "UDP",
				ClusterIP: ip("10.96.0.17"), Port: 53, HasAnyEndpoints: true,
				Cluster: []backends.Endpoint{{Addr: ip("10.244.1.17"), Port: 53, Weight: 1}},
			},
		}),
	}
}

// goldenState6 is a smaller IPv6 state with NodePorts on two addresses.
func goldenState6() *backends.State {
	return &backends.State{
		Family:            backends.IPv6,
		NodePortAddresses: []netip.Addr{ip("2001:db8:100::11"), ip("::1")},
		ServiceCIDRs:      []netip.Prefix{pfx("fd00:10:96::/112")},
		ClusterCIDRs:      []netip.Prefix{pfx("fd00:10:244::/56")},
		MasqueradeAll:     true,
		Services: sortServices([]backends.Service{
			svc("web", "fd00:10:96::10", func(s *backends.Service) {
				s.NodePort = 30010
				s.AffinityTimeout = 60
				s.Cluster = []backends.Endpoint{ep("fd00:10:244:1::10", 2), ep("fd00:10:244:2::10", 1)}
			}),
			svc("empty", "fd00:10:96::13", nil),
		}),
	}
}
