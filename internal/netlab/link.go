//go:build linux

package netlab

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// handle returns a netlink handle working in the namespace.
func (ns *NS) handle() (*netlink.Handle, error) {
	h, err := netns.GetFromPath(ns.Path())
	if err != nil {
		return nil, fmt.Errorf("netlab: namespace %q: %w", ns.name, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlab: netlink in namespace %q: %w", ns.name, err)
	}
	return nh, nil
}

// withHandle runs f with a netlink handle in the namespace.
func (ns *NS) withHandle(f func(h *netlink.Handle) error) error {
	h, err := ns.handle()
	if err != nil {
		return err
	}
	defer h.Close()
	return f(h)
}

func (ns *NS) linkUp(name string) error {
	return ns.withHandle(func(h *netlink.Handle) error {
		l, err := h.LinkByName(name)
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("netlab: namespace %q: link %q up: %w", ns.name, name, err)
		}
		return nil
	})
}

// Link connects namespace a and b with a veth pair, aIf in a and bIf in b
// (names of at most 15 bytes), gives each end its addresses and brings both
// up.
func Link(a *NS, aIf string, aAddrs []netip.Prefix, b *NS, bIf string, bAddrs []netip.Prefix) error {
	hb, err := netns.GetFromPath(b.Path())
	if err != nil {
		return fmt.Errorf("netlab: namespace %q: %w", b.name, err)
	}
	defer hb.Close()
	err = a.withHandle(func(h *netlink.Handle) error {
		return h.LinkAdd(&netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: aIf},
			PeerName:      bIf,
			PeerNamespace: netlink.NsFd(int(hb)),
		})
	})
	if err != nil {
		return fmt.Errorf("netlab: veth %s/%s - %s/%s: %w", a.name, aIf, b.name, bIf, err)
	}
	if err := a.AddAddrs(aIf, aAddrs...); err != nil {
		return err
	}
	if err := b.AddAddrs(bIf, bAddrs...); err != nil {
		return err
	}
	if err := a.linkUp(aIf); err != nil {
		return err
	}
	return b.linkUp(bIf)
}

// AddBridge creates a bridge with the given addresses and brings it up.
func (ns *NS) AddBridge(name string, addrs ...netip.Prefix) error {
	err := ns.withHandle(func(h *netlink.Handle) error {
		return h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}})
	})
	if err != nil {
		return fmt.Errorf("netlab: namespace %q: bridge %q: %w", ns.name, name, err)
	}
	if err := ns.AddAddrs(name, addrs...); err != nil {
		return err
	}
	return ns.linkUp(name)
}

// SetMaster enslaves link to bridge.
func (ns *NS) SetMaster(link, bridge string) error {
	return ns.withHandle(func(h *netlink.Handle) error {
		l, err := h.LinkByName(link)
		if err != nil {
			return fmt.Errorf("netlab: namespace %q: %w", ns.name, err)
		}
		br, err := h.LinkByName(bridge)
		if err != nil {
			return fmt.Errorf("netlab: namespace %q: %w", ns.name, err)
		}
		if err := h.LinkSetMaster(l, br); err != nil {
			return fmt.Errorf("netlab: namespace %q: %s master %s: %w", ns.name, link, bridge, err)
		}
		return nil
	})
}

// AddAddrs adds addresses to a link. IPv6 addresses skip duplicate address
// detection.
func (ns *NS) AddAddrs(link string, addrs ...netip.Prefix) error {
	if len(addrs) == 0 {
		return nil
	}
	return ns.withHandle(func(h *netlink.Handle) error {
		l, err := h.LinkByName(link)
		if err != nil {
			return fmt.Errorf("netlab: namespace %q: %w", ns.name, err)
		}
		for _, p := range addrs {
			a := &netlink.Addr{IPNet: ipNet(p)}
			if p.Addr().Is6() {
				a.Flags = unix.IFA_F_NODAD
			}
			if err := h.AddrAdd(l, a); err != nil {
				return fmt.Errorf("netlab: namespace %q: address %s on %s: %w", ns.name, p, link, err)
			}
		}
		return nil
	})
}

// AddRoute routes dst through gw. An invalid gw makes dst on-link through
// dev; dev may be empty when gw is given.
func (ns *NS) AddRoute(dst netip.Prefix, gw netip.Addr, dev string) error {
	return ns.withHandle(func(h *netlink.Handle) error {
		r := &netlink.Route{Dst: ipNet(dst)}
		if gw.IsValid() {
			r.Gw = net.IP(gw.AsSlice())
		}
		if dev != "" {
			l, err := h.LinkByName(dev)
			if err != nil {
				return fmt.Errorf("netlab: namespace %q: %w", ns.name, err)
			}
			r.LinkIndex = l.Attrs().Index
		}
		if !gw.IsValid() {
			r.Scope = netlink.SCOPE_LINK
		}
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("netlab: namespace %q: route %s via %s: %w", ns.name, dst, gw, err)
		}
		return nil
	})
}

// Addrs returns the namespace's global unicast addresses of every link.
func (ns *NS) Addrs() ([]netip.Addr, error) {
	var out []netip.Addr
	err := ns.withHandle(func(h *netlink.Handle) error {
		as, err := h.AddrList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("netlab: namespace %q: %w", ns.name, err)
		}
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
				out = append(out, ip.Unmap())
			}
		}
		return nil
	})
	return out, err
}

func ipNet(p netip.Prefix) *net.IPNet {
	a := p.Addr()
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(p.Bits(), a.BitLen())}
}
