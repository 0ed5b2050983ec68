//go:build linux

package nftables

import (
	"encoding/binary"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The elements are most of a full sync's batch (170k at 10k service
// ports), and google/nftables builds each as a list of attributes, each
// marshalled on its own and copied into the one around it: several
// allocations per element, about half of a full sync's garbage. The
// compiler therefore writes the element messages straight into the
// batch, in the bytes google/nftables would send (TestElementMessages).

// attrs builds netlink attributes in a buffer reused from message to
// message. Attribute headers are in host byte order, the values of
// nftables' attributes in network byte order.
type attrs struct{ b []byte }

// put appends an attribute holding data, padded to 4 bytes.
func (a *attrs) put(typ uint16, data []byte) {
	a.b = binary.NativeEndian.AppendUint16(a.b, uint16(4+len(data)))
	a.b = binary.NativeEndian.AppendUint16(a.b, typ)
	a.b = append(a.b, data...)
	a.pad()
}

// putString appends an attribute holding s and a terminating zero.
func (a *attrs) putString(typ uint16, s string) {
	a.b = binary.NativeEndian.AppendUint16(a.b, uint16(4+len(s)+1))
	a.b = binary.NativeEndian.AppendUint16(a.b, typ)
	a.b = append(a.b, s...)
	a.b = append(a.b, 0)
	a.pad()
}

func (a *attrs) putBE32(typ uint16, v uint32) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	a.put(typ, b[:])
}

// nest starts a nested attribute; end closes it.
func (a *attrs) nest(typ uint16) int {
	at := len(a.b)
	a.b = binary.NativeEndian.AppendUint16(a.b, 0)
	a.b = binary.NativeEndian.AppendUint16(a.b, typ|unix.NLA_F_NESTED)
	return at
}

func (a *attrs) end(at int) {
	binary.NativeEndian.PutUint16(a.b[at:], uint16(len(a.b)-at))
}

func (a *attrs) pad() {
	for len(a.b)%4 != 0 {
		a.b = append(a.b, 0)
	}
}

// elementMessage appends to the batch the message that adds (or, with del,
// deletes) elems to the named set of table, whose ID in the batch is
// setID (0: not added in the batch); s describes its key and data.
// Its attributes are in google/nftables' order.
func (cp *compiler) elementMessage(s *Set, setID uint32, elems []*elem, del bool) {
	a := &cp.attrs
	a.b = append(a.b[:0], byte(tableFamily(cp.family)), unix.NFNETLINK_V0, 0, 0)
	a.putString(unix.NFTA_SET_ELEM_LIST_SET, s.Name)
	a.putBE32(unix.NFTA_SET_ELEM_LIST_SET_ID, setID)
	a.putString(unix.NFTA_SET_ELEM_LIST_TABLE, cp.table.Name)
	list := a.nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS)
	var key [48]byte
	for i, p := range elems {
		e := p.element()
		item := a.nest(uint16(i + 1))
		k := a.nest(unix.NFTA_SET_ELEM_KEY)
		a.put(unix.NFTA_DATA_VALUE, appendKey(key[:0], s.Key, e.Key))
		a.end(k)
		switch {
		case del:
		case s.Map:
			d := a.nest(unix.NFTA_SET_ELEM_DATA)
			v := a.nest(unix.NFTA_DATA_VERDICT)
			a.putBE32(unix.NFTA_VERDICT_CODE, uint32(verdictKind(e.Value.Kind)))
			if e.Value.Chain != "" {
				a.putString(unix.NFTA_VERDICT_CHAIN, e.Value.Chain)
			}
			a.end(v)
			a.end(d)
		case len(s.Data) > 0:
			d := a.nest(unix.NFTA_SET_ELEM_DATA)
			a.put(unix.NFTA_DATA_VALUE, appendKey(key[:0], s.Data, ElemKey{Addr: e.To.Addr(), Port: e.To.Port()}))
			a.end(d)
		}
		a.end(item)
	}
	a.end(list)
	typ := netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSETELEM)
	if del {
		typ = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_DELSETELEM)
	}
	cp.w.append(typ, netlink.Request|netlink.Create, a.b)
	cp.w.msgs++
}
