package proxy

import (
	"context"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// NodeAddresses resolves the node's addresses that every State carries
// from its Node object (nil when there is none): the node's own IPs
// (State.NodeIPs) and the addresses NodePorts answer on
// (State.NodePortAddresses; none of a family: every local address).
type NodeAddresses func(node *v1.Node) (nodeIPs, nodePortAddresses []netip.Addr, err error)

// addresses are the node addresses in use, as Opts.NodeAddresses last
// resolved them.
type addresses struct {
	nodeIPs, nodePorts []netip.Addr
}

// readdress resolves the node's addresses from n with Opts.NodeAddresses
// and, when they changed, keeps them and asks for a sync, which programs
// them. An error keeps the addresses in use.
func (p *Proxy) readdress(logger klog.Logger, n *v1.Node) {
	if p.opts.NodeAddresses == nil {
		return
	}
	ips, nps, err := p.opts.NodeAddresses(n)
	if err != nil {
		logger.Error(err, "Resolving the node's addresses failed; the addresses in use stay")
		return
	}
	p.addrMu.Lock()
	old := p.addrs
	changed := old == nil || !slices.Equal(old.nodeIPs, ips) || !slices.Equal(old.nodePorts, nps)
	if changed {
		p.addrs = &addresses{nodeIPs: slices.Clone(ips), nodePorts: slices.Clone(nps)}
	}
	p.addrMu.Unlock()
	if !changed {
		return
	}
	logger.Info("Node addresses", "nodeIPs", ips, "nodePortAddresses", nps)
	p.queue()
}

// nodeAddresses returns the addresses in use; nil: Opts.State's.
func (p *Proxy) nodeAddresses() *addresses {
	p.addrMu.Lock()
	defer p.addrMu.Unlock()
	return p.addrs
}

// addressLoop resolves the node's addresses every Opts.AddressCheckPeriod
// until ctx is done: the local addresses may change without the Node.
func (p *Proxy) addressLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	p.every(ctx, p.opts.AddressCheckPeriod, func() { p.readdress(logger, p.localNode()) })
}

// localNode returns the local Node from the lister; nil if there is none.
func (p *Proxy) localNode() *v1.Node {
	n, err := p.nodes.Get(p.opts.NodeName)
	if err != nil {
		return nil // not found: the lister has no other error
	}
	return n
}
