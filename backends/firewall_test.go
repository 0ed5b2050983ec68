package backends_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestFirewallSources(t *testing.T) {
	tests := []struct {
		name    string
		vips    []netip.Addr
		ranges  []netip.Prefix
		nodeIPs []netip.Addr
		want    []netip.Prefix // nil: no firewall
	}{
		{name: "no range: no firewall", vips: addrs("203.0.113.1"), nodeIPs: addrs("198.51.100.1")},
		{name: "no VIP: no firewall", ranges: prefixes("198.51.100.0/24")},
		{name: "the ranges, normalised", vips: addrs("203.0.113.1"),
			ranges: prefixes("192.0.2.7/24", "198.51.100.0/24", "198.51.100.128/25", "192.0.2.0/24"),
			want:   prefixes("192.0.2.0/24", "198.51.100.0/24")},
		{name: "node outside the ranges: no VIP as source", vips: addrs("203.0.113.1"),
			ranges: prefixes("192.0.2.0/24"), nodeIPs: addrs("198.51.100.1"),
			want: prefixes("192.0.2.0/24")},
		{name: "node inside the ranges: the VIPs too", vips: addrs("203.0.113.2", "203.0.113.1", "203.0.113.2"),
			ranges: prefixes("198.51.100.0/24"), nodeIPs: addrs("198.51.100.1"),
			want: prefixes("198.51.100.0/24", "203.0.113.1/32", "203.0.113.2/32")},
		{name: "a VIP already inside the ranges", vips: addrs("198.51.100.9"),
			ranges: prefixes("198.51.100.0/24"), nodeIPs: addrs("198.51.100.1"),
			want: prefixes("198.51.100.0/24")},
		{name: "IPv6", vips: addrs("2001:db8:113::1"),
			ranges: prefixes("2001:db8:100::/64"), nodeIPs: addrs("2001:db8:100::1"),
			want: prefixes("2001:db8:100::/64", "2001:db8:113::1/128")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := backends.Service{LoadBalancerVIPs: tc.vips, LoadBalancerSourceRanges: tc.ranges}
			got := svc.FirewallSources(tc.nodeIPs)
			if !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSortedAddrs(t *testing.T) {
	if got, want := backends.SortedAddrs(addrs("10.0.0.2", "10.0.0.1", "10.0.0.2")), addrs("10.0.0.1", "10.0.0.2"); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := backends.SortedAddrs([]netip.Addr{}); got != nil {
		t.Errorf("got %v for none, want nil", got)
	}
}
