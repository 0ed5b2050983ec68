//go:build linux

package conntrack

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/wasp-proxy/wasp/backends"
)

// netlinkTable is the kernel's conntrack table, through ctnetlink.
type netlinkTable struct {
	h *netlink.Handle
}

// openTable opens a netfilter netlink socket in the namespace at path, or
// in the current one if path is empty. The socket stays in its namespace
// whatever thread uses it later, so the namespace handle is closed at once.
func openTable(path string) (table, error) {
	if path == "" {
		h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
		if err != nil {
			return nil, fmt.Errorf("open netfilter netlink socket: %w", err)
		}
		return &netlinkTable{h: h}, nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %q: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("open netfilter netlink socket in %q: %w", path, err)
	}
	return &netlinkTable{h: h}, nil
}

// deleteFlows hands the whole decision to one custom filter, so the
// library dumps the table once and deletes each matching entry by its
// exact tuple as it goes, rather than listing, building a filter per stale
// entry and dumping again to apply them (upstream's way, two dumps). An
// interrupted dump (netlink.ErrDumpInterrupted) still deletes what it saw
// and is reported; the next sync rescans.
func (t *netlinkTable) deleteFlows(family backends.Family, stale func(*flow) bool) (uint, error) {
	n, err := t.h.ConntrackDeleteFilters(netlink.ConntrackTable, inetFamily(family), &matcher{family: family, stale: stale})
	if err != nil {
		return n, fmt.Errorf("delete conntrack entries: %w", err)
	}
	return n, nil
}

func (t *netlinkTable) close() error {
	t.h.Close()
	return nil
}

// matcher adapts a stale predicate to netlink.CustomConntrackFilter.
type matcher struct {
	family backends.Family
	stale  func(*flow) bool
}

var _ netlink.CustomConntrackFilter = (*matcher)(nil)

func (m *matcher) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	fl := flowOf(m.family, f)
	return m.stale(&fl)
}

// flowOf converts a netlink flow. IPv4 addresses may come as 16-byte
// slices, so they are unmapped in the IPv4 table only.
func flowOf(family backends.Family, f *netlink.ConntrackFlow) flow {
	addr := func(ip net.IP) netip.Addr {
		a, _ := netip.AddrFromSlice(ip)
		if family == backends.IPv4 {
			a = a.Unmap()
		}
		return a
	}
	return flow{
		proto:        f.Forward.Protocol,
		origSrc:      addr(f.Forward.SrcIP),
		origDst:      addr(f.Forward.DstIP),
		origSrcPort:  f.Forward.SrcPort,
		origDstPort:  f.Forward.DstPort,
		replySrc:     addr(f.Reverse.SrcIP),
		replyDst:     addr(f.Reverse.DstIP),
		replySrcPort: f.Reverse.SrcPort,
		replyDstPort: f.Reverse.DstPort,
	}
}

// inetFamily returns the address family number of f.
func inetFamily(f backends.Family) netlink.InetFamily {
	if f == backends.IPv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}
