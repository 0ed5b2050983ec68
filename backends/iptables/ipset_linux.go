//go:build linux

package iptables

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
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
// from the set after the listing, so that a full sync, which adds what
// the plan lacks, leaves nothing else.
//
// The dump is read one netlink message at a time, each parsed straight
// into HairpinEntry values: netlink's IpsetList holds every message of
// the dump and then an IPSetEntry, with its pointer fields, per entry,
// tens of MiB at once for 100k entries.
func (n netnsSets) listSet(ctx context.Context, name string) ([]HairpinEntry, error) {
	var d setDump
	err := n.withSocket(func(sh *nl.SocketHandle) error {
		req := ipsetRequest(sh, nl.IPSET_CMD_LIST, name)
		var perr error
		err := req.ExecuteIter(unix.NETLINK_NETFILTER, 0, func(msg []byte) bool {
			perr = d.message(msg)
			return perr == nil
		})
		if perr != nil {
			return perr
		}
		return ipsetErrno(err)
	})
	if err == nil {
		err = n.change(ctx, nl.IPSET_CMD_DEL, name, len(d.foreign), func(i int) setEntry { return d.foreign[i] })
	}
	if err != nil {
		return nil, fmt.Errorf("list ipset %s: %w", name, err)
	}
	return d.entries, nil
}

// withSocket runs f with a netfilter netlink socket of the namespace,
// closed afterwards; a panic of netlink's is returned as an error.
func (n netnsSets) withSocket(f func(sh *nl.SocketHandle) error) (err error) {
	var s *nl.NetlinkSocket
	err = n.do(func() (err error) {
		// Neither namespace open: the socket is made in the thread's.
		s, err = nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_NETFILTER)
		return err
	})
	if err != nil {
		return err
	}
	defer s.Close()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("netlink: %v", r)
		}
	}()
	return f(&nl.SocketHandle{Socket: s})
}

// ipsetRequest starts an ipset command cmd on set name, to be sent on sh.
func ipsetRequest(sh *nl.SocketHandle, cmd int, name string) *nl.NetlinkRequest {
	req := &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{
			Type:  uint16(cmd | unix.NFNL_SUBSYS_IPSET<<8),
			Flags: uint16(unix.NLM_F_REQUEST | nl.GetIpsetFlags(cmd)),
		},
		Sockets: map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: sh},
	}
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_NETLINK, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(name)))
	return req
}

// ipsetErrno names ipset's own error numbers, as netlink's calls do.
func ipsetErrno(err error) error {
	if errno, ok := err.(syscall.Errno); ok && errno >= nl.IPSET_ERR_PRIVATE {
		return nl.IPSetError(errno)
	}
	return err
}

// setDump gathers the entries of one set from the messages of an ipset
// list dump: the first names the set's family and size (IPSET_ATTR_FAMILY,
// IPSET_ATTR_DATA), each holds entries (IPSET_ATTR_ADT, one IPSET_ATTR_DATA
// each).
type setDump struct {
	family  uint8          // of the set, AF_INET or AF_INET6; 0 until known
	entries []HairpinEntry // those wasp writes
	foreign []setEntry     // the others
}

// attrTypeMask clears the nested and byte order flags off an attribute's
// type.
const attrTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

// message reads one message of the dump: a netfilter header, then
// attributes.
func (d *setDump) message(msg []byte) error {
	if len(msg) < nl.SizeofNfgenmsg {
		return fmt.Errorf("ipset message of %d bytes: %w", len(msg), errMalformed)
	}
	r := attrReader{b: msg[nl.SizeofNfgenmsg:]}
	for typ, v := range r.all() {
		switch typ {
		case nl.IPSET_ATTR_FAMILY:
			if len(v) != 1 || v[0] != unix.AF_INET && v[0] != unix.AF_INET6 {
				return fmt.Errorf("ipset family %v: %w", v, errMalformed)
			}
			d.family = v[0]
		case nl.IPSET_ATTR_DATA:
			if err := d.header(v); err != nil {
				return err
			}
		case nl.IPSET_ATTR_ADT:
			if err := d.adt(v); err != nil {
				return err
			}
		}
	}
	return r.err
}

// header reads the set's header data, for the number of entries to
// expect.
func (d *setDump) header(b []byte) error {
	r := attrReader{b: b}
	for typ, v := range r.all() {
		if typ != nl.IPSET_ATTR_ELEMENTS || d.entries != nil {
			continue
		}
		if len(v) != 4 {
			return fmt.Errorf("ipset element count of %d bytes: %w", len(v), errMalformed)
		}
		d.entries = make([]HairpinEntry, 0, min(binary.BigEndian.Uint32(v), setMaxElements))
	}
	return r.err
}

// adt reads a message's entries.
func (d *setDump) adt(b []byte) error {
	r := attrReader{b: b}
	for typ, v := range r.all() {
		if typ != nl.IPSET_ATTR_DATA {
			continue
		}
		e, err := parseSetEntry(v, d.family)
		if err != nil {
			return err
		}
		if h, ok := e.hairpin(); ok {
			d.entries = append(d.entries, h)
		} else {
			d.foreign = append(d.foreign, e)
		}
	}
	return r.err
}

// setEntry is an entry of a hash:ip,port,ip set as the kernel lists it;
// a zero field is one it left out.
type setEntry struct {
	ip, ip2           netip.Addr
	proto             uint8
	port              uint16
	hasProto, hasPort bool
}

// parseSetEntry reads the attributes of an entry (IPSET_ATTR_DATA) of a
// set of family (0: either). Those of extensions (timeout, counters,
// comment) are skipped.
func parseSetEntry(b []byte, family uint8) (setEntry, error) {
	var e setEntry
	r := attrReader{b: b}
	for typ, v := range r.all() {
		var err error
		switch typ {
		case nl.IPSET_ATTR_IP:
			e.ip, err = parseSetAddr(v, family)
		case nl.IPSET_ATTR_IP2:
			e.ip2, err = parseSetAddr(v, family)
		case nl.IPSET_ATTR_PORT:
			if len(v) != 2 {
				return e, fmt.Errorf("ipset port of %d bytes: %w", len(v), errMalformed)
			}
			e.port, e.hasPort = binary.BigEndian.Uint16(v), true
		case nl.IPSET_ATTR_PROTO:
			if len(v) != 1 {
				return e, fmt.Errorf("ipset protocol of %d bytes: %w", len(v), errMalformed)
			}
			e.proto, e.hasProto = v[0], true
		}
		if err != nil {
			return e, err
		}
	}
	return e, r.err
}

// parseSetAddr reads an address attribute (IPSET_ATTR_IP, IPSET_ATTR_IP2),
// which nests one IPSET_ATTR_IPADDR_IPV4 or IPSET_ATTR_IPADDR_IPV6.
func parseSetAddr(b []byte, family uint8) (netip.Addr, error) {
	var a netip.Addr
	r := attrReader{b: b}
	for typ, v := range r.all() {
		switch {
		case a.IsValid():
			return a, fmt.Errorf("ipset address with more than one value: %w", errMalformed)
		case typ == nl.IPSET_ATTR_IPADDR_IPV4 && len(v) == 4 && family != unix.AF_INET6:
			a = netip.AddrFrom4([4]byte(v))
		case typ == nl.IPSET_ATTR_IPADDR_IPV6 && len(v) == 16 && family != unix.AF_INET:
			a = netip.AddrFrom16([16]byte(v))
		default:
			return a, fmt.Errorf("ipset address attribute %d of %d bytes in a set of family %d: %w", typ, len(v), family, errMalformed)
		}
	}
	if r.err == nil && !a.IsValid() {
		return a, fmt.Errorf("ipset address without a value: %w", errMalformed)
	}
	return a, r.err
}

// hairpin is e as a HairpinEntry; false when it is not one wasp writes.
func (e setEntry) hairpin() (HairpinEntry, bool) {
	a := e.ip.Unmap()
	if !e.ip.IsValid() || a != e.ip2.Unmap() || !e.hasPort || !e.hasProto {
		return HairpinEntry{}, false
	}
	p := backends.ProtocolOf(e.proto)
	if p == "" {
		return HairpinEntry{}, false
	}
	return HairpinEntry{Addr: a, Protocol: p, Port: e.port}, true
}

// String is e in ipset(8)'s spelling, by protocol number unless wasp
// writes it.
func (e setEntry) String() string {
	if h, ok := e.hairpin(); ok {
		return h.String()
	}
	return fmt.Sprintf("%v,%d:%d,%v", e.ip, e.proto, e.port, e.ip2)
}

// errMalformed is the error of a message the kernel would not send.
var errMalformed = errors.New("malformed netlink message")

// attrReader walks the netlink attributes of b; after the walk, err
// says whether b ended in the middle of one.
type attrReader struct {
	b   []byte
	err error
}

// all yields each attribute's type, without flags, and value.
func (r *attrReader) all() iter.Seq2[uint16, []byte] {
	return func(yield func(uint16, []byte) bool) {
		for len(r.b) > 0 {
			if len(r.b) < unix.SizeofNlAttr {
				r.err = fmt.Errorf("netlink attribute header of %d bytes: %w", len(r.b), errMalformed)
				return
			}
			n := int(binary.NativeEndian.Uint16(r.b))
			typ := binary.NativeEndian.Uint16(r.b[2:]) & attrTypeMask
			if n < unix.SizeofNlAttr || n > len(r.b) {
				r.err = fmt.Errorf("netlink attribute %d of length %d in %d bytes: %w", typ, n, len(r.b), errMalformed)
				return
			}
			v := r.b[unix.SizeofNlAttr:n]
			// The next attribute starts 4-byte aligned; the last
			// one's padding may be missing.
			r.b = r.b[min((n+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1), len(r.b)):]
			if !yield(typ, v) {
				return
			}
		}
	}
}

func (n netnsSets) addToSet(ctx context.Context, name string, entries []HairpinEntry) error {
	return n.change(ctx, nl.IPSET_CMD_ADD, name, len(entries), func(i int) setEntry { return hairpinSetEntry(entries[i]) })
}

func (n netnsSets) delFromSet(ctx context.Context, name string, entries []HairpinEntry) error {
	return n.change(ctx, nl.IPSET_CMD_DEL, name, len(entries), func(i int) setEntry { return hairpinSetEntry(entries[i]) })
}

// setBatchBytes bounds the entries of one add or delete message: they
// are held in one attribute (IPSET_ATTR_ADT), whose length has 16 bits,
// and each takes at most 68 bytes (IPv6).
const setBatchBytes = 32 << 10

// change adds (cmd IPSET_CMD_ADD) or deletes (IPSET_CMD_DEL) count
// entries, entry(i), many in each message, as ipset's restore does: one
// request per entry made 100k round trips at 10k service ports. Without
// NLM_F_EXCL a present entry on add, and a missing one on delete, is no
// error (ipset's -exist). The kernel stops a message at its first
// failing entry, the earlier ones done; that message's entries are then
// sent one at a time, to name the one that fails.
func (n netnsSets) change(ctx context.Context, cmd int, name string, count int, entry func(i int) setEntry) error {
	if count == 0 {
		return nil
	}
	what := "add to"
	if cmd == nl.IPSET_CMD_DEL {
		what = "delete from"
	}
	return n.withSocket(func(sh *nl.SocketHandle) error {
		var buf []byte
		for i := 0; i < count; {
			if err := ctx.Err(); err != nil {
				return err
			}
			first, adt := i, 0
			buf, adt = beginNested(buf[:0], nl.IPSET_ATTR_ADT) // the last message's room, reused
			for ; i < count && len(buf) < setBatchBytes; i++ {
				buf = appendSetEntry(buf, entry(i))
			}
			endNested(buf, adt)
			if sendSetEntries(sh, cmd, name, buf) == nil {
				continue
			}
			for j := first; j < i; j++ {
				buf, adt = beginNested(buf[:0], nl.IPSET_ATTR_ADT)
				buf = appendSetEntry(buf, entry(j))
				endNested(buf, adt)
				if err := sendSetEntries(sh, cmd, name, buf); err != nil {
					return fmt.Errorf("%s ipset %s entry %s: %w", what, name, entry(j), err)
				}
			}
			// Each entry went in alone: the set is as asked.
		}
		return nil
	})
}

// sendSetEntries sends command cmd on set name with the entries of adt
// (IPSET_ATTR_ADT), and waits for the kernel's answer.
func sendSetEntries(sh *nl.SocketHandle, cmd int, name string, adt []byte) error {
	req := ipsetRequest(sh, cmd, name)
	// The kernel takes IPSET_ATTR_ADT only beside a line number (which
	// entries without one of their own never report).
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_LINENO, nl.Uint32Attr(0)))
	req.RawData = adt
	return ipsetErrno(req.ExecuteIter(unix.NETLINK_NETFILTER, 0, func([]byte) bool { return true }))
}

// hairpinSetEntry is e as the set holds it: its address twice.
func hairpinSetEntry(e HairpinEntry) setEntry {
	return setEntry{ip: e.Addr, ip2: e.Addr, proto: e.Protocol.Number(), port: e.Port, hasProto: true, hasPort: true}
}

// appendSetEntry appends e as an entry of an add or delete
// (IPSET_ATTR_DATA), with the fields it has.
func appendSetEntry(b []byte, e setEntry) []byte {
	b, data := beginNested(b, nl.IPSET_ATTR_DATA)
	for _, a := range []struct {
		typ  uint16
		addr netip.Addr
	}{{nl.IPSET_ATTR_IP, e.ip}, {nl.IPSET_ATTR_IP2, e.ip2}} {
		if !a.addr.IsValid() {
			continue
		}
		var ip int
		b, ip = beginNested(b, a.typ)
		if a.addr.Is4() {
			v := a.addr.As4()
			b = appendAttr(b, nl.IPSET_ATTR_IPADDR_IPV4|unix.NLA_F_NET_BYTEORDER, v[:]...)
		} else {
			v := a.addr.As16()
			b = appendAttr(b, nl.IPSET_ATTR_IPADDR_IPV6|unix.NLA_F_NET_BYTEORDER, v[:]...)
		}
		endNested(b, ip)
	}
	if e.hasProto {
		b = appendAttr(b, nl.IPSET_ATTR_PROTO, e.proto)
	}
	if e.hasPort {
		b = appendAttr(b, nl.IPSET_ATTR_PORT|unix.NLA_F_NET_BYTEORDER, byte(e.port>>8), byte(e.port))
	}
	endNested(b, data)
	return b
}

// appendAttr appends a netlink attribute of type typ holding v, padded
// to 4 bytes.
func appendAttr(b []byte, typ uint16, v ...byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofNlAttr+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%unix.NLA_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

// beginNested appends the header of a nested attribute of type typ and
// returns where it starts; endNested sets its length once its attributes
// follow.
func beginNested(b []byte, typ uint16) ([]byte, int) {
	at := len(b)
	return appendAttr(b, typ|unix.NLA_F_NESTED), at
}

func endNested(b []byte, at int) {
	binary.NativeEndian.PutUint16(b[at:], uint16(len(b)-at))
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
