package backends_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

func TestFrontends(t *testing.T) {
	cip := netip.MustParseAddr("10.96.0.10")
	fe := func(k backends.FrontendKind, a string, port uint16) backends.Frontend {
		f := backends.Frontend{Kind: k, Port: port}
		if a != "" {
			f.Addr = netip.MustParseAddr(a)
		}
		return f
	}
	tests := []struct {
		name string
		svc  backends.Service
		want []backends.Frontend
	}{
		{"ClusterIP only", backends.Service{ClusterIP: cip, Port: 80},
			[]backends.Frontend{fe(backends.FrontendClusterIP, "10.96.0.10", 80)}},
		{"every kind, lists sorted and without duplicates", backends.Service{ClusterIP: cip, Port: 80, NodePort: 30080,
			ExternalIPs:      addrs("192.0.2.2", "192.0.2.1", "192.0.2.2"),
			LoadBalancerVIPs: addrs("203.0.113.1")},
			[]backends.Frontend{
				fe(backends.FrontendClusterIP, "10.96.0.10", 80),
				fe(backends.FrontendExternalIP, "192.0.2.1", 80),
				fe(backends.FrontendExternalIP, "192.0.2.2", 80),
				fe(backends.FrontendLoadBalancer, "203.0.113.1", 80),
				fe(backends.FrontendNodePort, "", 30080),
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.svc.Frontends()
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			for _, f := range got {
				if f.External() != (f.Kind != backends.FrontendClusterIP) {
					t.Errorf("%v: External() = %v", f.Kind, f.External())
				}
			}
		})
	}
}

func TestNodePortAddrs(t *testing.T) {
	tests := []struct {
		name    string
		given   []netip.Addr
		want    []netip.Addr
		wantAll bool
	}{
		{"none: every local address", nil, nil, true},
		{"given: sorted, without duplicates, loopback kept", addrs("198.51.100.2", "127.0.0.1", "198.51.100.2"),
			addrs("127.0.0.1", "198.51.100.2"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := backends.State{NodePortAddresses: tc.given}
			got, all := s.NodePortAddrs()
			if !slices.Equal(got, tc.want) || all != tc.wantAll {
				t.Errorf("got %v all %v, want %v all %v", got, all, tc.want, tc.wantAll)
			}
		})
	}
}
