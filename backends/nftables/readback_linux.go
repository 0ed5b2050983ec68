//go:build linux

package nftables

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/wasp-proxy/wasp/backends"
)

// The reads of a drift check go over raw netlink dumps rather than
// google/nftables' listing calls: those decode every expression of every
// rule into Go values (the check needs only a rule's tag), and its set
// listing loses the key type of a verdict map.

// dial opens a netfilter netlink socket in the kernel's namespace.
func (k *netlinkKernel) dial() (*netlink.Conn, error) {
	cfg := &netlink.Config{}
	if k.ns != nil {
		cfg.NetNS = int(k.ns.Fd())
	}
	return netlink.Dial(unix.NETLINK_NETFILTER, cfg)
}

// nftRequest returns a request of nftables message type typ for family,
// with attrs after the nfgenmsg header.
func nftRequest(typ int, flags netlink.HeaderFlags, family backends.Family, attrs []netlink.Attribute) (netlink.Message, error) {
	data, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return netlink.Message{}, err
	}
	hdr := []byte{byte(tableFamily(family)), unix.NFNETLINK_V0, 0, 0}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ), Flags: netlink.Request | flags},
		Data:   append(hdr, data...),
	}, nil
}

// dumpBuffer is the receive buffer of a dump. The kernel fills one
// message batch per read, of up to 32 KiB once a reader has offered that
// much, and resumes a set's or the rules' walk from its start at every
// batch, skipping what it sent: small batches make a dump quadratic.
// mdlayher/netlink reads with a page-sized buffer first, hence the reads
// here; at 100k elements in one map that is 12 s against 1.5 s.
const dumpBuffer = 64 << 10

// dump runs a dump request and calls fn with an attribute decoder over
// each reply. A missing table or set is ENOENT.
func (k *netlinkKernel) dump(ctx context.Context, typ int, family backends.Family, attrs []netlink.Attribute, fn func(attrs []byte) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req, err := nftRequest(typ, netlink.Dump, family, attrs)
	if err != nil {
		return err
	}
	conn, err := k.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := setBuffers(conn, 4<<20); err != nil {
		return err
	}
	req, err = conn.Send(req)
	if err != nil {
		return err
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, dumpBuffer)
	for {
		var n int
		var rerr error
		if err := raw.Read(func(fd uintptr) bool {
			n, _, _, _, rerr = unix.Recvmsg(int(fd), buf, nil, 0)
			return rerr != unix.EAGAIN
		}); err != nil {
			return err
		}
		if rerr != nil {
			return rerr
		}
		done, err := dumpMessages(buf[:n], req.Header.Sequence, fn)
		if err != nil || done {
			return err
		}
	}
}

// dumpMessages calls fn with the attributes of each message of one read
// of a dump with sequence number seq, and reports whether the dump ended.
func dumpMessages(b []byte, seq uint32, fn func(attrs []byte) error) (bool, error) {
	for len(b) >= nlmsgHeaderLen {
		size := int(binary.NativeEndian.Uint32(b))
		if size < nlmsgHeaderLen || size > len(b) {
			return false, fmt.Errorf("malformed netlink message of %d bytes in %d", size, len(b))
		}
		typ := binary.NativeEndian.Uint16(b[4:])
		flags := binary.NativeEndian.Uint16(b[6:])
		data := b[nlmsgHeaderLen:size]
		msgSeq := binary.NativeEndian.Uint32(b[8:])
		b = b[min(len(b), (size+3)&^3):]
		if msgSeq != seq {
			continue
		}
		switch {
		case typ == unix.NLMSG_DONE:
			return true, nil
		case typ == unix.NLMSG_ERROR:
			if len(data) < 4 {
				return false, errors.New("malformed netlink error")
			}
			if code := int32(binary.NativeEndian.Uint32(data)); code != 0 {
				return false, unix.Errno(-code)
			}
			return true, nil
		case flags&unix.NLM_F_DUMP_INTR != 0:
			return false, errDumpInterrupted
		case len(data) < 4:
			continue
		}
		if err := fn(data[4:]); err != nil {
			return false, err
		}
	}
	return false, nil
}

// nlaTypeMask clears the nested and byte order flags of an attribute type.
const nlaTypeMask = 0x3fff

// eachAttr calls fn with the type (without its flags) and payload of each
// netlink attribute in b; decoding a dump of 300k elements with
// mdlayher/netlink's decoder allocates about 100 MiB.
func eachAttr(b []byte, fn func(typ uint16, v []byte)) error {
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		if n < 4 || n > len(b) {
			return fmt.Errorf("malformed netlink attribute of %d bytes in %d", n, len(b))
		}
		fn(binary.NativeEndian.Uint16(b[2:])&nlaTypeMask, b[4:n])
		b = b[min(len(b), (n+3)&^3):]
	}
	return nil
}

func cstring(b []byte) string {
	if n := len(b); n > 0 && b[n-1] == 0 {
		b = b[:n-1]
	}
	return string(b)
}

func (k *netlinkKernel) generation(ctx context.Context) (uint32, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	req, err := nftRequest(unix.NFT_MSG_GETGEN, 0, backends.IPv4, nil)
	if err != nil {
		return 0, err
	}
	req.Data[0] = unix.NFPROTO_UNSPEC
	conn, err := k.dial()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	msgs, err := conn.Execute(req)
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, err
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
	}
	return 0, errors.New("no generation in the kernel's reply")
}

// userdataRuleTag is the type of the user-data entry that holds a rule's
// tag (ruleTag): after the types nft knows (comment 0, ebpf 1), which it
// skips when it lists a rule.
const userdataRuleTag = 0xe0

// appendRuleTag appends a rule's tag to its user data, as a TLV entry.
func appendRuleTag(ud []byte, tag uint64) []byte {
	ud = append(ud, userdataRuleTag, 8)
	return binary.BigEndian.AppendUint64(ud, tag)
}

// ruleTagOf returns the tag in a rule's user data; 0: none.
func ruleTagOf(ud []byte) uint64 {
	for len(ud) >= 2 {
		typ, n := ud[0], int(ud[1])
		if len(ud) < 2+n {
			return 0
		}
		if typ == userdataRuleTag && n == 8 {
			return binary.BigEndian.Uint64(ud[2:10])
		}
		ud = ud[2+n:]
	}
	return 0
}

func (k *netlinkKernel) rules(ctx context.Context, family backends.Family, table string, fn func(chain string, tag uint64)) error {
	attrs := []netlink.Attribute{{Type: unix.NFTA_RULE_TABLE, Data: []byte(table + "\x00")}}
	var chain []byte
	last := ""
	return k.dump(ctx, unix.NFT_MSG_GETRULE, family, attrs, func(b []byte) error {
		var tag uint64
		err := eachAttr(b, func(typ uint16, v []byte) {
			switch typ {
			case unix.NFTA_RULE_CHAIN:
				chain = v
			case unix.NFTA_RULE_USERDATA:
				tag = ruleTagOf(v)
			}
		})
		if n := len(chain); n > 0 && chain[n-1] == 0 {
			chain = chain[:n-1]
		}
		if string(chain) != last { // no allocation: one per chain
			last = string(chain)
		}
		fn(last, tag)
		return err
	})
}

// sets returns the named sets and maps of a table.
func (k *netlinkKernel) sets(ctx context.Context, family backends.Family, table string) (map[string]*Set, error) {
	out := map[string]*Set{}
	attrs := []netlink.Attribute{{Type: unix.NFTA_SET_TABLE, Data: []byte(table + "\x00")}}
	err := k.dump(ctx, unix.NFT_MSG_GETSET, family, attrs, func(b []byte) error {
		s := &Set{}
		var flags, dataType uint32
		var keyType uint32
		var timeoutMS uint64
		err := eachAttr(b, func(typ uint16, v []byte) {
			switch {
			case typ == unix.NFTA_SET_NAME:
				s.Name = cstring(v)
			case typ == unix.NFTA_SET_FLAGS && len(v) == 4:
				flags = binary.BigEndian.Uint32(v)
			case typ == unix.NFTA_SET_KEY_TYPE && len(v) == 4:
				keyType = binary.BigEndian.Uint32(v)
			case typ == unix.NFTA_SET_DATA_TYPE && len(v) == 4:
				dataType = binary.BigEndian.Uint32(v)
			case typ == unix.NFTA_SET_TIMEOUT && len(v) == 8:
				timeoutMS = binary.BigEndian.Uint64(v)
			}
		})
		if err != nil {
			return err
		}
		if flags&unix.NFT_SET_ANONYMOUS != 0 {
			return nil // bound to a rule, goes with it
		}
		s.Key = keyTypesOfMagic(keyType)
		if flags&unix.NFT_SET_MAP != 0 {
			if dataType == unix.NFT_DATA_VERDICT {
				s.Map = true
			} else {
				s.Data = keyTypesOfMagic(dataType)
			}
		}
		s.Dynamic = flags&unix.NFT_SET_EVAL != 0
		if flags&unix.NFT_SET_TIMEOUT != 0 {
			s.Timeout = uint32(timeoutMS / 1000)
		}
		out[s.Name] = s
		return nil
	})
	return out, err
}

// nft's datatype numbers of the key types (TYPE_IPADDR and so on); a
// concatenation's type is its fields' numbers, 6 bits each, the first
// field's highest.
var keyTypeNumbers = map[uint32]KeyType{7: KeyIPv4Addr, 8: KeyIPv6Addr, 12: KeyInetProto, 13: KeyInetService, 19: KeyBucket}

func keyTypesOfMagic(magic uint32) []KeyType {
	var out []KeyType
	for ; magic != 0; magic >>= 6 {
		kt, ok := keyTypeNumbers[magic&0x3f]
		if !ok {
			return nil
		}
		out = append(out, kt)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func (k *netlinkKernel) elements(ctx context.Context, family backends.Family, table string, s *Set, fn func(Element)) error {
	attrs := []netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte(table + "\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte(s.Name + "\x00")},
	}
	return k.dump(ctx, unix.NFT_MSG_GETSETELEM, family, attrs, func(b []byte) error {
		var err error
		walkErr := eachAttr(b, func(typ uint16, v []byte) {
			if typ != unix.NFTA_SET_ELEM_LIST_ELEMENTS || err != nil {
				return
			}
			err = errors.Join(err, eachAttr(v, func(typ uint16, v []byte) {
				if typ != unix.NFTA_LIST_ELEM || err != nil {
					return
				}
				e, derr := decodeElement(v, s)
				if derr != nil {
					err = derr
					return
				}
				fn(e)
			}))
		})
		return errors.Join(walkErr, err)
	})
}

// decodeElement decodes one element of set s from its attributes.
func decodeElement(b []byte, s *Set) (Element, error) {
	e := Element{Set: s.Name}
	var err error
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	keep(eachAttr(b, func(typ uint16, v []byte) {
		switch typ {
		case unix.NFTA_SET_ELEM_KEY:
			keep(eachAttr(v, func(typ uint16, v []byte) {
				if typ == unix.NFTA_DATA_VALUE {
					var kerr error
					e.Key, kerr = decodeKey(s.Key, v)
					keep(kerr)
				}
			}))
		case unix.NFTA_SET_ELEM_DATA:
			keep(eachAttr(v, func(typ uint16, v []byte) {
				switch typ {
				case unix.NFTA_DATA_VALUE:
					k, kerr := decodeKey(s.Data, v)
					keep(kerr)
					e.To = netip.AddrPortFrom(k.Addr, k.Port)
				case unix.NFTA_DATA_VERDICT:
					keep(eachAttr(v, func(typ uint16, v []byte) {
						switch {
						case typ == unix.NFTA_VERDICT_CODE && len(v) == 4:
							e.Value.Kind = verdictKindOf(int32(binary.BigEndian.Uint32(v)))
						case typ == unix.NFTA_VERDICT_CHAIN:
							e.Value.Chain = cstring(v)
						}
					}))
				}
			}))
		}
	}))
	if err != nil {
		return e, fmt.Errorf("element of %s: %w", s.Name, err)
	}
	return e, nil
}

// Netfilter's verdict codes (linux/netfilter.h).
const (
	nfDrop   = 0
	nfAccept = 1
)

func verdictKindOf(code int32) VerdictKind {
	switch code {
	case nfAccept:
		return Accept
	case nfDrop:
		return Drop
	case unix.NFT_RETURN:
		return Return
	case unix.NFT_JUMP:
		return Jump
	case unix.NFT_GOTO:
		return Goto
	}
	return VerdictNone
}

// decodeKey decodes a key (or a data map's value) of type kt, encoded as
// compiler.key encodes it.
func decodeKey(kt []KeyType, b []byte) (ElemKey, error) {
	var k ElemKey
	addrs := 0
	take := func(n int) ([]byte, error) {
		if len(b) < n {
			return nil, fmt.Errorf("key of %d bytes too short for %v", len(b), kt)
		}
		v := b[:n]
		b = b[n:]
		if len(kt) > 1 {
			pad := (4 - n%4) % 4
			b = b[min(pad, len(b)):]
		}
		return v, nil
	}
	for _, t := range kt {
		switch t {
		case KeyIPv4Addr, KeyIPv6Addr:
			n := 4
			if t == KeyIPv6Addr {
				n = 16
			}
			v, err := take(n)
			if err != nil {
				return k, err
			}
			a, _ := netip.AddrFromSlice(v)
			if addrs++; addrs == 2 {
				k.Addr2 = a
			} else {
				k.Addr = a
			}
		case KeyInetProto:
			v, err := take(1)
			if err != nil {
				return k, err
			}
			k.Proto = v[0]
		case KeyInetService:
			v, err := take(2)
			if err != nil {
				return k, err
			}
			k.Port = binary.BigEndian.Uint16(v)
		case KeyBucket:
			v, err := take(4)
			if err != nil {
				return k, err
			}
			k.Bucket = binary.NativeEndian.Uint32(v)
		}
	}
	return k, nil
}
