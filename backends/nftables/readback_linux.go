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

// dump runs a dump request and calls fn with an attribute decoder over
// each reply. A missing table or set is ENOENT.
func (k *netlinkKernel) dump(ctx context.Context, typ int, family backends.Family, attrs []netlink.Attribute, fn func(ad *netlink.AttributeDecoder) error) error {
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
	msgs, err := conn.Execute(req)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
			return errDumpInterrupted
		}
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return err
		}
		ad.ByteOrder = binary.BigEndian
		if err := fn(ad); err != nil {
			return err
		}
		if err := ad.Err(); err != nil {
			return err
		}
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
	return k.dump(ctx, unix.NFT_MSG_GETRULE, family, attrs, func(ad *netlink.AttributeDecoder) error {
		var chain string
		var tag uint64
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_CHAIN:
				chain = cstring(ad.Bytes())
			case unix.NFTA_RULE_USERDATA:
				tag = ruleTagOf(ad.Bytes())
			}
		}
		fn(chain, tag)
		return nil
	})
}

// sets returns the named sets and maps of a table.
func (k *netlinkKernel) sets(ctx context.Context, family backends.Family, table string) (map[string]*Set, error) {
	out := map[string]*Set{}
	attrs := []netlink.Attribute{{Type: unix.NFTA_SET_TABLE, Data: []byte(table + "\x00")}}
	err := k.dump(ctx, unix.NFT_MSG_GETSET, family, attrs, func(ad *netlink.AttributeDecoder) error {
		s := &Set{}
		var flags, dataType uint32
		var keyType uint32
		var timeoutMS uint64
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_SET_NAME:
				s.Name = cstring(ad.Bytes())
			case unix.NFTA_SET_FLAGS:
				flags = ad.Uint32()
			case unix.NFTA_SET_KEY_TYPE:
				keyType = ad.Uint32()
			case unix.NFTA_SET_DATA_TYPE:
				dataType = ad.Uint32()
			case unix.NFTA_SET_TIMEOUT:
				timeoutMS = ad.Uint64()
			}
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
	return k.dump(ctx, unix.NFT_MSG_GETSETELEM, family, attrs, func(ad *netlink.AttributeDecoder) error {
		for ad.Next() {
			if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					if list.Type() != unix.NFTA_LIST_ELEM {
						continue
					}
					var err error
					list.Nested(func(el *netlink.AttributeDecoder) error {
						var e Element
						e, err = decodeElement(el, family, s)
						if err == nil {
							fn(e)
						}
						return nil
					})
					if err != nil {
						return err
					}
				}
				return nil
			})
		}
		return nil
	})
}

// decodeElement decodes one element of set s.
func decodeElement(ad *netlink.AttributeDecoder, family backends.Family, s *Set) (Element, error) {
	e := Element{Set: s.Name}
	var keyErr error
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			ad.Nested(func(d *netlink.AttributeDecoder) error {
				for d.Next() {
					if d.Type() == unix.NFTA_DATA_VALUE {
						e.Key, keyErr = decodeKey(s.Key, d.Bytes())
					}
				}
				return nil
			})
		case unix.NFTA_SET_ELEM_DATA:
			ad.Nested(func(d *netlink.AttributeDecoder) error {
				for d.Next() {
					switch d.Type() {
					case unix.NFTA_DATA_VALUE:
						k, err := decodeKey(s.Data, d.Bytes())
						if err != nil {
							keyErr = err
						}
						e.To = netip.AddrPortFrom(k.Addr, k.Port)
					case unix.NFTA_DATA_VERDICT:
						d.Nested(func(v *netlink.AttributeDecoder) error {
							for v.Next() {
								switch v.Type() {
								case unix.NFTA_VERDICT_CODE:
									e.Value.Kind = verdictKindOf(int32(v.Uint32()))
								case unix.NFTA_VERDICT_CHAIN:
									e.Value.Chain = cstring(v.Bytes())
								}
							}
							return nil
						})
					}
				}
				return nil
			})
		}
	}
	if keyErr != nil {
		return e, fmt.Errorf("element of %s: %w", s.Name, keyErr)
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
