//go:build linux

package iptables

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/internal/nsthread"
)

// netnsSets manages the hairpin ipsets of the network namespace at
// netns ("" for the current one) over netlink. A netlink socket belongs
// to the namespace it was made in, so each call makes one on a thread in
// the namespace (nsthread) and then uses it from the caller's goroutine:
// a goroutine locked to its thread pays a scheduler handoff whenever it
// blocks, which made listing 100k entries take 3 to 10 s instead of
// 0.4 s.
type netnsSets struct{ netns string }

// do runs f in the namespace, on a fresh thread, whose panic is returned
// as an error.
func (n netnsSets) do(f func() error) error {
	if n.netns != "" {
		return nsthread.Do(n.netns, f)
	}
	return nsthread.Fresh(f)
}

// withHandle runs f with a netfilter netlink socket of the namespace,
// closed afterwards. netlink's ipset calls assume an errno (they panic on
// another error): such a panic is returned as an error.
func (n netnsSets) withHandle(f func(h *netlink.Handle) error) (err error) {
	var h *netlink.Handle
	if err := n.do(func() (err error) { h, err = netlink.NewHandle(unix.NETLINK_NETFILTER); return err }); err != nil {
		return err
	}
	defer h.Close()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("netlink: %v", r)
		}
	}()
	return f(h)
}

func (n netnsSets) ensureSet(ctx context.Context, name string, family backends.Family) error {
	fam := uint8(unix.AF_INET)
	if family == backends.IPv6 {
		fam = unix.AF_INET6
	}
	err := n.do(func() error {
		// Replace leaves a set of the same type as it is (ipset's -exist).
		return netlink.IpsetCreate(name, setType, netlink.IpsetCreateOptions{Replace: true, Family: fam, MaxElements: setMaxElements})
	})
	if err != nil {
		return fmt.Errorf("create ipset %s of type %s: %w%s", name, setType, err, setHint(err))
	}
	return nil
}

// setHint explains the errors of a kernel without ipset support.
func setHint(err error) string {
	if errors.Is(err, syscall.EPROTONOSUPPORT) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EINVAL) || err == nl.IPSetError(nl.IPSET_ERR_FIND_TYPE) {
		return " (are the ip_set and ip_set_hash_ipportip kernel modules available?)"
	}
	return ""
}

// listSet returns the entries of set name. An entry wasp did not write
// (one whose two addresses differ, or of another protocol) is deleted
// from the set there and then, so that a full sync, which adds what the
// plan lacks, leaves nothing else.
func (n netnsSets) listSet(ctx context.Context, name string) ([]HairpinEntry, error) {
	var out []HairpinEntry
	err := n.withHandle(func(h *netlink.Handle) error {
		res, err := h.IpsetList(name)
		if err != nil {
			return err
		}
		out = make([]HairpinEntry, 0, len(res.Entries))
		for i := range res.Entries {
			raw := &res.Entries[i]
			if e, ok := fromNetlink(raw); ok {
				out = append(out, e)
				continue
			}
			raw.Replace = true
			if err := h.IpsetDel(name, raw); err != nil {
				return fmt.Errorf("delete foreign entry %v: %w", raw, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list ipset %s: %w", name, err)
	}
	return out, nil
}

// fromNetlink reads an entry of a hairpin set; false when it is not one
// wasp writes.
func fromNetlink(e *netlink.IPSetEntry) (HairpinEntry, bool) {
	a, ok := netip.AddrFromSlice(e.IP)
	a2, ok2 := netip.AddrFromSlice(e.IP2)
	if !ok || !ok2 || a.Unmap() != a2.Unmap() || e.Port == nil || e.Protocol == nil {
		return HairpinEntry{}, false
	}
	for _, p := range []backends.Protocol{backends.TCP, backends.UDP, backends.SCTP} {
		if p.Number() == *e.Protocol {
			return HairpinEntry{Addr: a.Unmap(), Protocol: p, Port: *e.Port}, true
		}
	}
	return HairpinEntry{}, false
}

// toNetlink is e as netlink adds or deletes it: Replace makes a present
// entry on add, and a missing one on delete, no error (ipset's -exist).
func toNetlink(e HairpinEntry) *netlink.IPSetEntry {
	ip := net.IP(e.Addr.AsSlice())
	proto, port := e.Protocol.Number(), e.Port
	return &netlink.IPSetEntry{IP: ip, IP2: ip, Protocol: &proto, Port: &port, Replace: true}
}

func (n netnsSets) addToSet(ctx context.Context, name string, entries []HairpinEntry) error {
	return n.change(ctx, name, "add to", entries, (*netlink.Handle).IpsetAdd)
}

func (n netnsSets) delFromSet(ctx context.Context, name string, entries []HairpinEntry) error {
	return n.change(ctx, name, "delete from", entries, (*netlink.Handle).IpsetDel)
}

func (n netnsSets) change(ctx context.Context, name, what string, entries []HairpinEntry, op func(*netlink.Handle, string, *netlink.IPSetEntry) error) error {
	if len(entries) == 0 {
		return nil
	}
	// One socket for every entry (netlink's package-level calls open one
	// per call).
	return n.withHandle(func(h *netlink.Handle) error {
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := op(h, name, toNetlink(e)); err != nil {
				return fmt.Errorf("%s ipset %s entry %s: %w", what, name, e, err)
			}
		}
		return nil
	})
}

func (n netnsSets) destroySet(ctx context.Context, name string) error {
	err := n.do(func() error { return netlink.IpsetDestroy(name) })
	switch {
	case err == nil, errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.EPROTONOSUPPORT), errors.Is(err, syscall.EINVAL):
		// No such set; or no ipset in the kernel at all (nfnetlink
		// answers EINVAL for a subsystem it does not have).
		return nil
	case err == nl.IPSetError(nl.IPSET_ERR_BUSY), err == nl.IPSetError(nl.IPSET_ERR_REFERENCED), errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("destroy ipset %s: a rule still uses it: %w", name, err)
	}
	return fmt.Errorf("destroy ipset %s: %w", name, err)
}
