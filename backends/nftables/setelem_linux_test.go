//go:build linux

package nftables

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	nft "github.com/google/nftables"
	"github.com/mdlayher/netlink"

	"github.com/wasp-proxy/wasp/backends"
)

// TestElementMessages: the element messages the compiler writes itself
// are the bytes google/nftables marshals for the same elements, for every
// kind of set the planner makes, in both families, added and deleted.
func TestElementMessages(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, fam := range []backends.Family{backends.IPv4, backends.IPv6} {
		a1, a2 := ip("10.96.0.10"), ip("10.244.1.2")
		if fam == backends.IPv6 {
			a1, a2 = ip("fd00:96::10"), ip("fd00:244::1:2")
		}
		addr := addrKey(fam)
		entry := []KeyType{addr, KeyInetProto, KeyInetService}
		cases := []struct {
			name  string
			set   *Set
			elems []Element
		}{
			{"set", &Set{Name: clusterIPsSet, Key: []KeyType{addr}}, []Element{{Key: ElemKey{Addr: a1}}, {Key: ElemKey{Addr: a2}}}},
			{"pair set", &Set{Name: hairpinSet, Key: []KeyType{addr, addr}}, []Element{{Key: ElemKey{Addr: a2, Addr2: a2}}}},
			{"verdict map", &Set{Name: serviceIPsMap, Key: entry, Map: true}, []Element{
				{Key: ElemKey{Addr: a1, Proto: protoTCP, Port: 80}, Value: Verdict{Goto, "service-ABCDEFGH-demo/web/tcp/http"}},
				{Key: ElemKey{Addr: a1, Proto: protoUDP, Port: 53}, Value: Verdict{Jump, "x"}},
				{Key: ElemKey{Addr: a2, Proto: protoSCTP, Port: 9}, Value: Verdict{Kind: Drop}},
				{Key: ElemKey{Addr: a2, Proto: protoTCP, Port: 1}, Value: Verdict{Kind: Accept}},
				{Key: ElemKey{Addr: a2, Proto: protoTCP, Port: 2}, Value: Verdict{Kind: Return}},
			}},
			{"node port map", &Set{Name: serviceNodePortsMap, Key: []KeyType{KeyInetProto, KeyInetService}, Map: true}, []Element{
				{Key: ElemKey{Proto: protoTCP, Port: 30080}, Value: Verdict{Goto, "external-X"}},
			}},
			{"data map", &Set{Name: "bucket-2", Key: []KeyType{addr, KeyInetProto, KeyInetService, KeyBucket}, Data: []KeyType{addr, KeyInetService}}, []Element{
				{Key: ElemKey{Addr: a1, Proto: protoTCP, Port: 80, Bucket: 1}, To: netip.AddrPortFrom(a2, 8080)},
				{Key: ElemKey{Addr: a1, Proto: protoTCP, Port: 80, Bucket: 0x01020304}, To: netip.AddrPortFrom(a2, 8081)},
			}},
			{"data map without address", &Set{Name: "bucket-2-nodeports", Key: []KeyType{KeyInetProto, KeyInetService, KeyBucket}, Data: []KeyType{addr, KeyInetService}}, []Element{
				{Key: ElemKey{Proto: protoUDP, Port: 30053, Bucket: 7}, To: netip.AddrPortFrom(a2, 53)},
			}},
		}
		if fam == backends.IPv4 {
			cases[4].elems = append(cases[4].elems, Element{Key: ElemKey{Addr: a1, Proto: protoTCP, Port: 443, Bucket: 2}, To: ap("10.244.1.3:8443")})
		}
		for _, c := range cases {
			for _, del := range []bool{false, true} {
				for _, setID := range []uint32{0, 7} {
					want := googleElementMessage(t, fam, c.set, setID, c.elems, del)
					cp := &compiler{family: fam, table: &nft.Table{Name: DefaultTable, Family: tableFamily(fam)}, w: &wireBatch{}}
					cp.elementMessage(c.set, setID, packElems(c.elems...), del)
					got := cp.w.chunks[0]
					if n := binary.NativeEndian.Uint32(got); int(n) != len(got) {
						t.Fatalf("%s %s: length %d in a chunk of %d", fam, c.name, n, len(got))
					}
					if typ := netlink.HeaderType(binary.NativeEndian.Uint16(got[4:])); typ != want.Header.Type {
						t.Errorf("%s %s del=%t: type %#x, want %#x", fam, c.name, del, typ, want.Header.Type)
					}
					if got := got[nlmsgHeaderLen:]; !bytes.Equal(got, want.Data) {
						t.Errorf("%s %s del=%t id=%d:\n got % x\nwant % x", fam, c.name, del, setID, got, want.Data)
					}
				}
			}
		}
	}
}

// googleElementMessage returns the message google/nftables marshals for
// the elements.
func googleElementMessage(t *testing.T, fam backends.Family, s *Set, setID uint32, elems []Element, del bool) netlink.Message {
	t.Helper()
	var got []netlink.Message
	c, err := nft.New(nft.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		for _, m := range req {
			if m.Header.Type&0xff != 0x10 && m.Header.Type&0xff != 0x11 { // not batch begin or end
				got = append(got, m)
			}
		}
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4+16)}}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	table := &nft.Table{Name: DefaultTable, Family: tableFamily(fam)}
	ns := &nft.Set{Table: table, Name: s.Name, ID: setID}
	vals := make([]nft.SetElement, len(elems))
	for i, e := range elems {
		vals[i].Key = appendKey(nil, s.Key, e.Key)
		switch {
		case del:
		case s.Map:
			vals[i].VerdictData = verdict(e.Value)
		case len(s.Data) > 0:
			vals[i].Val = appendKey(nil, s.Data, ElemKey{Addr: e.To.Addr(), Port: e.To.Port()})
		}
	}
	if del {
		err = c.SetDeleteElements(ns, vals)
	} else {
		err = c.SetAddElements(ns, vals)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	return got[0]
}
