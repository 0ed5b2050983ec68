//go:build linux

package netlab

import (
	"fmt"
	"net/netip"
)

// Address plan of a Cluster (documentation and private ranges only):
//
//	LAN                   198.51.100.0/24        2001:db8:100::/64
//	node i (1-based)      198.51.100.<10+i>      2001:db8:100::<10+i>
//	client                198.51.100.200         2001:db8:100::200
//	pods of node i        10.244.<i>.0/24        fd00:10:244:<i>::/64
//	  gateway (cbr0)      10.244.<i>.1           fd00:10:244:<i>::1
//	  pod j (1-based)     10.244.<i>.<10+j>      fd00:10:244:<i>::<10+j>
//
// Every node routes the other nodes' pod ranges through their LAN address,
// and everything else out of eth0 on-link, as to an absent default gateway:
// packets to addresses no one has (an unallocated ClusterIP, say) still
// reach the node's forward and output hooks instead of failing routing.
// The client's default route goes through node 1, so traffic to ClusterIPs,
// external IPs and load-balancer VIPs reaches node 1's dataplane, as from a
// router in front of it. Node 1 is where a test runs its proxy.
var (
	lan4 = netip.MustParsePrefix("198.51.100.0/24")
	lan6 = netip.MustParsePrefix("2001:db8:100::/64")
)

// ClusterSpec describes a Cluster to build.
type ClusterSpec struct {
	// Nodes, in order; node i+1 of the address plan is Nodes[i].
	// Required: at least one.
	Nodes []NodeSpec
	// EchoPorts are the ports every pod's TCP and UDP echo servers listen
	// on, for both families. Optional; default 8080.
	EchoPorts []uint16
}

// NodeSpec describes one node of a Cluster.
type NodeSpec struct {
	Name string   // required
	Pods []string // optional: pod names, which are also their echo identities
}

// Cluster is a small routed network of nodes with pods, and a client.
type Cluster struct {
	Lab    *Lab
	LAN    *NS // holds the bridge br0 joining nodes and client
	Nodes  []*Node
	Client *Host
}

// Host is a namespace with one address per family.
type Host struct {
	NS         *NS
	IPv4, IPv6 netip.Addr
}

// Node is a node's namespace: eth0 on the LAN, cbr0 bridging its pods.
type Node struct {
	Host
	Name               string
	PodCIDR4, PodCIDR6 netip.Prefix
	Pods               []*Pod
}

// Pod is a pod's namespace, eth0 attached to its node's cbr0.
type Pod struct {
	Host
	Name string
	Node *Node
}

// Node returns the node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Pod returns the pod called name, or nil.
func (c *Cluster) Pod(name string) *Pod {
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			if p.Name == name {
				return p
			}
		}
	}
	return nil
}

// BuildCluster builds spec in lab.
func BuildCluster(lab *Lab, spec ClusterSpec) (*Cluster, error) {
	if len(spec.Nodes) == 0 || len(spec.Nodes) > 200 {
		return nil, fmt.Errorf("netlab: cluster needs 1 to 200 nodes, got %d", len(spec.Nodes))
	}
	ports := spec.EchoPorts
	if len(ports) == 0 {
		ports = []uint16{8080}
	}
	lanNS, err := lab.AddNS("lan")
	if err != nil {
		return nil, err
	}
	if err := lanNS.AddBridge("br0"); err != nil {
		return nil, err
	}
	c := &Cluster{Lab: lab, LAN: lanNS}

	for i, ns := range spec.Nodes {
		idx := i + 1
		n := &Node{
			Name:     ns.Name,
			PodCIDR4: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(idx), 0}), 24),
			PodCIDR6: netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%x::/64", idx)),
		}
		n.IPv4 = nth(lan4, 10+idx)
		n.IPv6 = nth(lan6, 10+idx)
		if n.NS, err = lab.AddNS(ns.Name); err != nil {
			return nil, err
		}
		if err := attach(lanNS, fmt.Sprintf("n%d", idx), &n.Host); err != nil {
			return nil, err
		}
		if err := n.NS.AddBridge("cbr0",
			netip.PrefixFrom(nth(n.PodCIDR4, 1), 24), netip.PrefixFrom(nth(n.PodCIDR6, 1), 64)); err != nil {
			return nil, err
		}
		for j, name := range ns.Pods {
			p := &Pod{Name: name, Node: n}
			p.IPv4, p.IPv6 = nth(n.PodCIDR4, 10+j+1), nth(n.PodCIDR6, 10+j+1)
			if p.NS, err = lab.AddNS(name); err != nil {
				return nil, err
			}
			hostIf := fmt.Sprintf("vp%d", j+1)
			if err := Link(n.NS, hostIf, nil, p.NS, "eth0",
				[]netip.Prefix{netip.PrefixFrom(p.IPv4, 24), netip.PrefixFrom(p.IPv6, 64)}); err != nil {
				return nil, err
			}
			if err := n.NS.SetMaster(hostIf, "cbr0"); err != nil {
				return nil, err
			}
			if err := p.NS.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), nth(n.PodCIDR4, 1), ""); err != nil {
				return nil, err
			}
			if err := p.NS.AddRoute(netip.MustParsePrefix("::/0"), nth(n.PodCIDR6, 1), ""); err != nil {
				return nil, err
			}
			var aps []netip.AddrPort
			for _, port := range ports {
				aps = append(aps, netip.AddrPortFrom(p.IPv4, port), netip.AddrPortFrom(p.IPv6, port))
			}
			if err := p.NS.ServeEcho(name, aps...); err != nil {
				return nil, err
			}
			n.Pods = append(n.Pods, p)
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		for _, def := range []string{"0.0.0.0/0", "::/0"} {
			if err := n.NS.AddRoute(netip.MustParsePrefix(def), netip.Addr{}, "eth0"); err != nil {
				return nil, err
			}
		}
		for _, o := range c.Nodes {
			if o == n {
				continue
			}
			if err := n.NS.AddRoute(o.PodCIDR4, o.IPv4, ""); err != nil {
				return nil, err
			}
			if err := n.NS.AddRoute(o.PodCIDR6, o.IPv6, ""); err != nil {
				return nil, err
			}
		}
	}

	client := &Host{IPv4: nth(lan4, 200), IPv6: netip.MustParseAddr("2001:db8:100::200")}
	if client.NS, err = lab.AddNS("client"); err != nil {
		return nil, err
	}
	if err := attach(lanNS, "cl", client); err != nil {
		return nil, err
	}
	first := c.Nodes[0]
	if err := client.NS.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), first.IPv4, ""); err != nil {
		return nil, err
	}
	if err := client.NS.AddRoute(netip.MustParsePrefix("::/0"), first.IPv6, ""); err != nil {
		return nil, err
	}
	c.Client = client
	return c, nil
}

// attach links h's namespace to the LAN bridge: eth0 in h, lanIf on br0.
func attach(lanNS *NS, lanIf string, h *Host) error {
	if err := Link(lanNS, lanIf, nil, h.NS, "eth0",
		[]netip.Prefix{netip.PrefixFrom(h.IPv4, lan4.Bits()), netip.PrefixFrom(h.IPv6, lan6.Bits())}); err != nil {
		return err
	}
	return lanNS.SetMaster(lanIf, "br0")
}

// nth returns the address n after p's network address. For IPv6 the low
// bits are written in hex digits that read like n's decimal ones
// (nth(fd00::/64, 11) = fd00::11), so the plan reads the same in both
// families.
func nth(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr().As16()
	if p.Addr().Is4() {
		a4 := p.Masked().Addr().As4()
		a4[3] += byte(n)
		return netip.AddrFrom4(a4)
	}
	var v uint16
	fmt.Sscanf(fmt.Sprint(n), "%x", &v)
	a[14], a[15] = byte(v>>8), byte(v)
	return netip.AddrFrom16(a)
}
