package conntrack

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/wasp-proxy/wasp/backends"
)

// protoUDP is IPPROTO_UDP, the protocol number of the flows the
// reconciler considers.
const protoUDP = backends.ProtoNumberUDP

// flow is the part of a conntrack entry the reconciler looks at: the
// original (client to frontend) and reply (backend to client) tuples.
type flow struct {
	proto                      uint8
	origSrc, origDst           netip.Addr
	origSrcPort, origDstPort   uint16
	replySrc, replyDst         netip.Addr
	replySrcPort, replyDstPort uint16
}

// String renders f as `conntrack -L` does, without counters.
func (f *flow) String() string {
	proto := fmt.Sprint(f.proto)
	switch f.proto {
	case protoUDP:
		proto = "udp"
	case 6:
		proto = "tcp"
	case 132:
		proto = "sctp"
	}
	return fmt.Sprintf("%s src=%s dst=%s sport=%d dport=%d src=%s dst=%s sport=%d dport=%d",
		proto, f.origSrc, f.origDst, f.origSrcPort, f.origDstPort,
		f.replySrc, f.replyDst, f.replySrcPort, f.replyDstPort)
}

// frontend is a service address and port a client sends to.
type frontend struct {
	addr netip.Addr
	port uint16
}

// plan is the desired conntrack state of one family: for each UDP frontend
// and NodePort, the serving endpoint addresses a flow to it may be
// answered by. Each address list is sorted and distinct.
type plan struct {
	frontends map[frontend][]netip.Addr
	nodePorts map[uint16][]netip.Addr
}

// planFor computes the plan of a State. It is pure: the same State gives
// the same plan.
//
// Like upstream, a frontend is the service IP *and* port (a Service with
// two UDP ports backed by different pods keeps each port's flows apart),
// while a NodePort matches on the destination port alone, whatever
// address the flow was sent to. A service port with no serving endpoint
// is not planned at all: its entries are left alone (upstream: "a Service
// without endpoints does not require to clean the conntrack entries").
// Should two service ports claim one frontend or NodePort (the apiserver
// prevents it), the union of their serving addresses is kept, so no flow
// either of them considers live is deleted.
func planFor(s *backends.State) plan {
	p := plan{frontends: map[frontend][]netip.Addr{}, nodePorts: map[uint16][]netip.Addr{}}
	for i := range s.Services {
		svc := &s.Services[i]
		if svc.Protocol != backends.UDP || len(svc.Serving) == 0 {
			continue
		}
		add := func(m map[frontend][]netip.Addr, a netip.Addr) {
			if a.IsValid() {
				k := frontend{a, svc.Port}
				m[k] = union(m[k], svc.Serving)
			}
		}
		add(p.frontends, svc.ClusterIP)
		for _, a := range svc.ExternalIPs {
			add(p.frontends, a)
		}
		for _, a := range svc.LoadBalancerVIPs {
			add(p.frontends, a)
		}
		if svc.NodePort != 0 {
			p.nodePorts[svc.NodePort] = union(p.nodePorts[svc.NodePort], svc.Serving)
		}
	}
	return p
}

// stale reports whether f should be deleted: a UDP flow to a planned
// frontend or NodePort whose reply comes from an address that is not
// serving it. This covers flows DNATed to an endpoint that is gone or no
// longer serving, and flows that were never DNATed (reply source = the
// service address itself) because the kernel cached a reject or a drop
// while the service had no endpoint.
func (p plan) stale(f *flow) bool {
	if f.proto != protoUDP {
		return false
	}
	if serving, ok := p.frontends[frontend{f.origDst, f.origDstPort}]; ok && !contains(serving, f.replySrc) {
		return true
	}
	if serving, ok := p.nodePorts[f.origDstPort]; ok && !contains(serving, f.replySrc) {
		return true
	}
	return false
}

// empty reports whether the plan can delete nothing, so the table need not
// be scanned.
func (p plan) empty() bool { return len(p.frontends) == 0 && len(p.nodePorts) == 0 }

// union returns the sorted, distinct addresses of a and b.
func union(a, b []netip.Addr) []netip.Addr {
	out := append(slices.Clone(a), b...)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// contains reports whether the sorted list as holds a.
func contains(as []netip.Addr, a netip.Addr) bool {
	_, ok := slices.BinarySearchFunc(as, a, netip.Addr.Compare)
	return ok
}
