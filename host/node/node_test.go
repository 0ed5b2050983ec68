package node

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
)

// Test address plan: node-a at 198.51.100.1 and 2001:db8:100::1, with
// 10.244.1.1 on a pod bridge and the loopback addresses.

// ifAddrs lists the test node's local addresses.
func ifAddrs() ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.51.100.1"),
		netip.MustParseAddr("10.244.1.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("2001:db8:100::1")}, nil
}

func TestNodePortAddresses(t *testing.T) {
	node := &v1.Node{Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
		{Type: v1.NodeHostName, Address: "node-a"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.1"},
		{Type: v1.NodeInternalIP, Address: "198.51.100.1"},
		{Type: v1.NodeInternalIP, Address: "198.51.100.9"},
		{Type: v1.NodeExternalIP, Address: "2001:db8:100::1"},
	}}}
	both := []backends.Family{backends.IPv4, backends.IPv6}
	tests := []struct {
		name     string
		primary  bool
		cidrs    []string
		families []backends.Family
		want     []string
	}{
		{"primary: first InternalIP, else ExternalIP", true, nil, both, []string{"198.51.100.1", "2001:db8:100::1"}},
		{"cidrs", false, []string{"198.51.100.0/24", "10.0.0.0/8", "2001:db8::/32"}, both, []string{"198.51.100.1", "10.244.1.1", "2001:db8:100::1"}},
		{"every address of a family", false, []string{"0.0.0.0/0", "2001:db8::/32"}, both, []string{"2001:db8:100::1"}},
		{"other family ignored", false, []string{"127.0.0.0/8", "2001:db8::/32"}, []backends.Family{backends.IPv4}, []string{"127.0.0.1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Name: "node-a", NodePortPrimary: tc.primary}
			for _, s := range tc.cidrs {
				c.NodePortCIDRs = append(c.NodePortCIDRs, netip.MustParsePrefix(s))
			}
			got, err := c.NodePortAddresses(node, tc.families, ifAddrs)
			if err != nil {
				t.Fatal(err)
			}
			var gotS []string
			for _, a := range got {
				gotS = append(gotS, a.String())
			}
			if !reflect.DeepEqual(gotS, tc.want) {
				t.Errorf("got %q, want %q", gotS, tc.want)
			}
		})
	}
}

// TestFamilies: Config.IPFamilies, else the policy over the node's primary
// IPs (the override's first), decide the families.
func TestFamilies(t *testing.T) {
	n := func(addrs ...string) *v1.Node {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		for _, a := range addrs {
			node.Status.Addresses = append(node.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
		}
		return node
	}
	v4, v6, both := []backends.Family{backends.IPv4}, []backends.Family{backends.IPv6}, []backends.Family{backends.IPv4, backends.IPv6}
	tests := []struct {
		name     string
		flags    []backends.Family
		policy   v1alpha1.IPFamilyPolicy
		override []string
		node     *v1.Node
		want     []backends.Family
		wantErr  string
	}{
		{"flag wins", v6, v1alpha1.RequireDualStack, nil, n("10.0.0.1"), v6, ""},
		{"single stack", nil, "", nil, n("10.0.0.1", "10.0.0.2"), v4, ""},
		{"dual stack, IPv6 primary", nil, v1alpha1.PreferDualStack, nil, n("fd00::1", "10.0.0.1"), both, ""},
		{"SingleStack: the first IP's family", nil, v1alpha1.SingleStack, nil, n("fd00::1", "10.0.0.1"), v6, ""},
		{"SingleStack: the override's family", nil, v1alpha1.SingleStack, []string{"10.0.0.9"}, n("fd00::1", "10.0.0.1"), v4, ""},
		{"RequireDualStack", nil, v1alpha1.RequireDualStack, nil, n("fd00::1", "10.0.0.1"), both, ""},
		{"RequireDualStack, one family", nil, v1alpha1.RequireDualStack, nil, n("10.0.0.1"), nil, "ipFamilyPolicy RequireDualStack: the node has no primary IPv6"},
		{"override adds a family", nil, v1alpha1.PreferDualStack, []string{"fd00::9"}, n("10.0.0.1"), both, ""},
		{"no address", nil, "", nil, n(), nil, "has no InternalIP or ExternalIP address"},
		{"no node", nil, "", nil, nil, nil, "not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Name: "n", IPFamilies: tc.flags, Policy: tc.policy}
			for _, s := range tc.override {
				c.Override = append(c.Override, netip.MustParseAddr(s))
			}
			got, err := c.Families(tc.node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReadsLocalAddresses(t *testing.T) {
	tests := []struct {
		name  string
		c     Config
		wants bool
	}{
		{"primary", Config{NodePortPrimary: true}, false},
		{"every address", Config{NodePortCIDRs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}}, false},
		{"a CIDR", Config{NodePortCIDRs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("2001:db8::/32")}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.ReadsLocalAddresses(); got != tc.wants {
				t.Errorf("got %v, want %v", got, tc.wants)
			}
		})
	}
}
