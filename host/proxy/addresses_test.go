package proxy

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	hostnode "github.com/wasp-proxy/wasp/host/node"
)

// Test address plan: node-a's InternalIPs are in 198.51.100.0/24 and
// 2001:db8:100::/64; 192.0.2.0/24 is a second local network.

// addressed returns the test node with InternalIPs ips.
func addressed(ips ...string) *v1.Node {
	n := node()
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	return n
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// TestNodeAddressesFollowTheNode: the Node's addresses reach every State
// (NodeIPs, and NodePortAddresses ["primary"]), and a change of them
// reaches the backends without a restart; a Node that loses its address
// keeps the addresses in use.
func TestNodeAddressesFollowTheNode(t *testing.T) {
	client := fake.NewClientset(addressed("198.51.100.1", "2001:db8:100::1"), service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"))
	families := []backends.Family{backends.IPv4, backends.IPv6}
	nc := &hostnode.Config{Name: testNode, NodePortPrimary: true, IPFamilies: families}
	be := backendfake.New()
	p := startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be, backends.IPv6: be},
		NodeAddresses: nc.Resolver(families, nil)})
	programmed := func(f backends.Family, want ...string) func() bool {
		return func() bool {
			s := be.State(f)
			return s != nil && slices.Equal(s.NodeIPs, addrs(want...)) && slices.Equal(s.NodePortAddresses, addrs(want...))
		}
	}
	waitFor(t, "the Node's addresses", programmed(backends.IPv4, "198.51.100.1"))
	waitFor(t, "the Node's IPv6 addresses", programmed(backends.IPv6, "2001:db8:100::1"))

	ctx := context.Background()
	if _, err := client.CoreV1().Nodes().Update(ctx, addressed("198.51.100.2", "2001:db8:100::2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Node's new address", programmed(backends.IPv4, "198.51.100.2"))
	waitFor(t, "the Node's new IPv6 address", programmed(backends.IPv6, "2001:db8:100::2"))
	if s := be.State(backends.IPv4); len(s.Services) != 1 {
		t.Errorf("the resync with the new addresses programmed %d services, want the 1 cached", len(s.Services))
	}

	// No IPv6 address: "primary" cannot resolve, the addresses in use stay.
	before := p.events.Load()
	if _, err := client.CoreV1().Nodes().Update(ctx, addressed("198.51.100.3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The handler resolves before it counts the event.
	waitFor(t, "the Node event", func() bool { return p.events.Load() > before })
	if a := p.nodeAddresses(); !slices.Equal(a.nodeIPs, addrs("198.51.100.2", "2001:db8:100::2")) {
		t.Errorf("a Node without an IPv6 address replaced the addresses in use: %v", a.nodeIPs)
	}
}

// TestNodeAddressesFollowLocalAddresses: with nodePortAddresses CIDRs, a
// local address that appears in them reaches the States at the next
// check, without an event of the Node.
func TestNodeAddressesFollowLocalAddresses(t *testing.T) {
	var (
		mu    sync.Mutex
		local = addrs("127.0.0.1", "198.51.100.1")
	)
	ifAddrs := func() ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(local), nil
	}
	families := []backends.Family{backends.IPv4}
	nc := &hostnode.Config{Name: testNode, IPFamilies: families,
		NodePortCIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("192.0.2.0/24")}}
	be := backendfake.New()
	startWith(t, Opts{Client: fake.NewClientset(addressed("198.51.100.1")), Backends: map[backends.Family]backends.Backend{backends.IPv4: be},
		AddressCheckPeriod: 10 * time.Millisecond,
		NodeAddresses:      nc.Resolver(families, ifAddrs)})
	programmed := func(want ...string) func() bool {
		return func() bool {
			s := be.State(backends.IPv4)
			return s != nil && slices.Equal(s.NodePortAddresses, addrs(want...))
		}
	}
	waitFor(t, "the local address in the CIDRs", programmed("198.51.100.1"))
	mu.Lock()
	local = append(local, netip.MustParseAddr("192.0.2.7"))
	mu.Unlock()
	waitFor(t, "the new local address", programmed("198.51.100.1", "192.0.2.7"))
}
