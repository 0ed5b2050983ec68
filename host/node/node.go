// Package node resolves this node's addresses: its primary IP of each
// family (a nodeIPOverride, else its Node object's), the IP families it
// proxies, and the addresses its NodePorts answer on (nodePortAddresses:
// the primary IPs, or the local addresses in CIDRs).
package node

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/state"
)

// Config says how this node's addresses are chosen.
type Config struct {
	// Name is the Node object's name, for errors. Required.
	Name string
	// Override are the primary IPs that win over the Node's, at most one
	// per family (nodeIPOverride). Optional.
	Override []netip.Addr
	// Policy picks the families from the node's primary IPs when
	// IPFamilies is empty. Optional; default PreferDualStack.
	Policy v1alpha1.IPFamilyPolicy
	// IPFamilies are the families to proxy, whatever the node's IPs
	// (--ip-families). Optional.
	IPFamilies []backends.Family
	// NodePortPrimary: NodePorts answer on the node's primary IPs
	// (nodePortAddresses ["primary"]); otherwise on the local addresses
	// in NodePortCIDRs.
	NodePortPrimary bool
	// NodePortCIDRs are the nodePortAddresses CIDRs when not
	// NodePortPrimary; a /0 of a family means every local address.
	NodePortCIDRs []netip.Prefix
}

// InterfaceAddrs lists the addresses of this network namespace.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}

// Get returns the Node called name, waiting up to wait for it to
// appear; nil if it does not.
func Get(ctx context.Context, client kubernetes.Interface, name string, wait time.Duration) (*v1.Node, error) {
	logger := klog.FromContext(ctx)
	deadline := time.Now().Add(wait)
	for {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return node, nil
		}
		if !time.Now().Before(deadline) {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("get node %q: %w", name, err)
		}
		logger.Info("Waiting for the Node object", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// IPs returns the node's primary IP of each family, as upstream: the
// override of the family (nodeIPOverride), else the Node's first InternalIP
// of the family, else its first ExternalIP; and the family of the first of
// them (the first override's, else the Node's first such address's).
func IPs(node *v1.Node, override []netip.Addr) (map[backends.Family]netip.Addr, backends.Family) {
	out := map[backends.Family]netip.Addr{}
	var first backends.Family
	add := func(ip netip.Addr) {
		f := backends.IPv6
		if ip.Unmap().Is4() {
			f, ip = backends.IPv4, ip.Unmap()
		}
		if _, ok := out[f]; !ok {
			out[f] = ip
		}
		if first == 0 {
			first = f
		}
	}
	for _, ip := range override {
		add(ip)
	}
	if node == nil {
		return out, first
	}
	for _, typ := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); a.Type == typ && err == nil {
				add(ip)
			}
		}
	}
	return out, first
}

// PrimaryIPs returns the node's primary IP of each proxied family that
// has one, for state.Options.NodeIPs: upstream allows a Service's
// load-balancer VIPs as sources when the node's IP of the family is in its
// loadBalancerSourceRanges.
func (c *Config) PrimaryIPs(node *v1.Node, families []backends.Family) []netip.Addr {
	ips, _ := IPs(node, c.Override)
	var out []netip.Addr
	for _, f := range families {
		if ip, ok := ips[f]; ok {
			out = append(out, ip)
		}
	}
	return out
}

// Families returns the families to proxy: c.IPFamilies, or those c.Policy
// picks from the node's primary IPs.
func (c *Config) Families(node *v1.Node) ([]backends.Family, error) {
	if len(c.IPFamilies) > 0 {
		return c.IPFamilies, nil
	}
	ips, first := IPs(node, c.Override)
	fams, err := familiesOf(c.Policy, ips, first)
	if err != nil {
		return nil, fmt.Errorf("node %q: %w (or set --ip-families)", c.Name, err)
	}
	if len(fams) == 0 {
		if node == nil {
			return nil, fmt.Errorf("node %q not found, so its IP families are unknown: set --ip-families (or --hostname-override to the right name)", c.Name)
		}
		return nil, fmt.Errorf("node %q has no InternalIP or ExternalIP address, so its IP families are unknown: set --ip-families", c.Name)
	}
	return fams, nil
}

// familiesOf returns the families to proxy under policy, from the node's
// primary IPs (ips) and the family of its first one.
func familiesOf(policy v1alpha1.IPFamilyPolicy, ips map[backends.Family]netip.Addr, first backends.Family) ([]backends.Family, error) {
	switch policy {
	case v1alpha1.SingleStack:
		if _, ok := ips[first]; ok {
			return []backends.Family{first}, nil
		}
		return nil, nil
	case v1alpha1.RequireDualStack:
		for _, f := range []backends.Family{backends.IPv4, backends.IPv6} {
			if _, ok := ips[f]; !ok {
				return nil, fmt.Errorf("ipFamilyPolicy RequireDualStack: the node has no primary %s", familyName(f))
			}
		}
		return []backends.Family{backends.IPv4, backends.IPv6}, nil
	}
	var fams []backends.Family
	for _, f := range []backends.Family{backends.IPv4, backends.IPv6} {
		if _, ok := ips[f]; ok {
			fams = append(fams, f)
		}
	}
	return fams, nil
}

// NodePortAddresses resolves nodePortAddresses to the addresses of
// state.Options (none for a family means every local address); ifAddrs
// lists the local addresses.
func (c *Config) NodePortAddresses(node *v1.Node, families []backends.Family, ifAddrs func() ([]netip.Addr, error)) ([]netip.Addr, error) {
	var out []netip.Addr
	if c.NodePortPrimary {
		ips, _ := IPs(node, c.Override)
		for _, f := range families {
			ip, ok := ips[f]
			if !ok {
				what := "has no " + familyName(f) + " address"
				if node == nil {
					what = "does not exist"
				}
				return nil, fmt.Errorf("--nodeport-addresses primary: node %q %s: give CIDRs instead", c.Name, what)
			}
			out = append(out, ip)
		}
		return out, nil
	}
	local, err := ifAddrs()
	if err != nil {
		return nil, fmt.Errorf("--nodeport-addresses: list local addresses: %w", err)
	}
	for _, f := range families {
		var cidrs []netip.Prefix
		all := false
		for _, p := range c.NodePortCIDRs {
			if is6 := p.Addr().Is6(); is6 == (f == backends.IPv6) {
				cidrs = append(cidrs, p)
				all = all || p.Bits() == 0
			}
		}
		switch {
		case all:
			continue // no address of f: every local one
		case len(cidrs) == 0:
			// The State cannot say "no NodePort for this family".
			return nil, fmt.Errorf("--nodeport-addresses: no %s CIDR, but %s is proxied: add one (%s for every address)",
				familyName(f), familyName(f), map[bool]string{false: "0.0.0.0/0", true: "::/0"}[f == backends.IPv6])
		}
		n := len(out)
		for _, a := range local {
			for _, p := range cidrs {
				if p.Contains(a.Unmap()) || p.Contains(a) {
					out = append(out, a.Unmap())
					break
				}
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("--nodeport-addresses: no local address in %v", cidrs)
		}
	}
	return out, nil
}

// Resolver returns the resolver of the node's addresses for the proxied
// families (proxy.Opts.NodeAddresses): its PrimaryIPs, and its
// NodePortAddresses over the local addresses ifAddrs lists.
func (c *Config) Resolver(families []backends.Family, ifAddrs func() ([]netip.Addr, error)) func(*v1.Node) (nodeIPs, nodePortAddresses []netip.Addr, err error) {
	return func(n *v1.Node) ([]netip.Addr, []netip.Addr, error) {
		nps, err := c.NodePortAddresses(n, families, ifAddrs)
		return c.PrimaryIPs(n, families), nps, err
	}
}

// ReadsLocalAddresses reports whether NodePortAddresses depends on the
// local addresses, which change without the Node: CIDRs other than /0.
func (c *Config) ReadsLocalAddresses() bool {
	if c.NodePortPrimary {
		return false
	}
	for _, p := range c.NodePortCIDRs {
		if p.Bits() > 0 {
			return true
		}
	}
	return false
}

func familyName(f backends.Family) string {
	if kf, ok := state.KubernetesFamily(f); ok {
		return string(kf)
	}
	return fmt.Sprintf("family %d", f)
}
