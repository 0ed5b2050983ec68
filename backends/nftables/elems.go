package nftables

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// The planned elements are most of a backend's memory: at 10k Services of
// ten endpoints a table has about 250k of them, each held by its fragment
// and indexed once. They are therefore stored packed, without pointers
// but for a verdict's chain name, and turned into Elements only where a
// transaction or a dump needs them. A packed elemID takes 44 bytes against
// 72 for a set name and an ElemKey, and a map keyed by it is not scanned
// by the garbage collector.

// setID stands for a set's name in packed elements. IDs are handed out
// once per name for the life of the process; the names of sets that have
// planned elements are a bounded family (the table-wide sets and the
// bucket maps, a few thousand at most), so the registry stays small.
type setID uint32

var setNames struct {
	mu    sync.Mutex
	ids   map[string]setID
	names atomic.Pointer[[]string] // by ID; replaced, never modified
}

// internSet returns name's ID.
func internSet(name string) setID {
	setNames.mu.Lock()
	defer setNames.mu.Unlock()
	if id, ok := setNames.ids[name]; ok {
		return id
	}
	if setNames.ids == nil {
		setNames.ids = map[string]setID{}
	}
	var names []string
	if p := setNames.names.Load(); p != nil {
		names = *p
	}
	id := setID(len(names))
	names = append(names[:len(names):len(names)], name)
	setNames.ids[name] = id
	setNames.names.Store(&names)
	return id
}

// name returns the set name id stands for. It does not lock.
func (id setID) name() string { return (*setNames.names.Load())[id] }

// Kinds of a packed address.
const (
	addrNone uint8 = iota
	addrV4
	addrV6
)

func packAddr(a netip.Addr) (b [16]byte, kind uint8) {
	switch {
	case !a.IsValid():
		return b, addrNone
	case a.Is4():
		return a.As16(), addrV4
	}
	return a.As16(), addrV6
}

func unpackAddr(b [16]byte, kind uint8) netip.Addr {
	switch kind {
	case addrV4:
		return netip.AddrFrom16(b).Unmap()
	case addrV6:
		return netip.AddrFrom16(b)
	}
	return netip.Addr{}
}

// elemID is an element's set and key, packed. Addresses carry no zone:
// no planned element has one.
type elemID struct {
	addr, addr2 [16]byte
	bucket      uint32
	set         setID
	port        uint16
	proto       uint8
	kinds       uint8 // addr's kind, and addr2's shifted left by 2
}

func packID(set setID, k ElemKey) elemID {
	id := elemID{set: set, bucket: k.Bucket, port: k.Port, proto: k.Proto}
	var k1, k2 uint8
	id.addr, k1 = packAddr(k.Addr)
	id.addr2, k2 = packAddr(k.Addr2)
	id.kinds = k1 | k2<<2
	return id
}

func (id elemID) setName() string { return id.set.name() }

func (id elemID) key() ElemKey {
	return ElemKey{
		Addr:   unpackAddr(id.addr, id.kinds&3),
		Addr2:  unpackAddr(id.addr2, id.kinds>>2),
		Proto:  id.proto,
		Port:   id.port,
		Bucket: id.bucket,
	}
}

// element returns the Element of id with value v.
func (id elemID) element(v elemValue) Element {
	return Element{Set: id.setName(), Key: id.key(), Value: v.verdict, To: v.to}
}

// elem is a planned Element, packed: 80 bytes against 128.
type elem struct {
	id     elemID
	toPort uint16
	toKind uint8
	kind   VerdictKind
	to     [16]byte
	chain  string
}

func packElem(e Element) elem {
	p := elem{id: packID(internSet(e.Set), e.Key), kind: e.Value.Kind, chain: e.Value.Chain}
	p.to, p.toKind = packAddr(e.To.Addr())
	p.toPort = e.To.Port()
	return p
}

func (e *elem) value() elemValue {
	v := elemValue{verdict: Verdict{Kind: e.kind, Chain: e.chain}}
	if e.toKind != addrNone {
		v.to = netip.AddrPortFrom(unpackAddr(e.to, e.toKind), e.toPort)
	}
	return v
}

// packElems returns es packed, for an operation.
func packElems(es ...Element) []*elem {
	out := make([]*elem, len(es))
	for i := range es {
		p := packElem(es[i])
		out[i] = &p
	}
	return out
}

// element returns e unpacked.
func (e *elem) element() Element { return e.id.element(e.value()) }

// compareAddr orders packed addresses as netip.Addr.Compare orders them
// unpacked: by kind (none, IPv4, IPv6: their bit lengths' order), then
// by bytes (an IPv4 address is packed IPv4-mapped, a common prefix).
func compareAddr(a, b *[16]byte, ka, kb uint8) int {
	if ka != kb {
		return cmp.Compare(ka, kb)
	}
	if c := cmp.Compare(binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])); c != 0 {
		return c
	}
	return cmp.Compare(binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:]))
}

// compareKey orders ids by key, as ElemKey.compare orders them unpacked.
func (id *elemID) compareKey(o *elemID) int {
	if c := compareAddr(&id.addr, &o.addr, id.kinds&3, o.kinds&3); c != 0 {
		return c
	}
	if c := compareAddr(&id.addr2, &o.addr2, id.kinds>>2, o.kinds>>2); c != 0 {
		return c
	}
	if id.proto != o.proto {
		return cmp.Compare(id.proto, o.proto)
	}
	if id.port != o.port {
		return cmp.Compare(id.port, o.port)
	}
	return cmp.Compare(id.bucket, o.bucket)
}

// sortElems sorts es by set name, then by key. The sets are ranked by
// name once, so that comparing two elements compares no strings.
func sortElems(es []*elem) {
	if len(es) < 2 {
		return
	}
	names := *setNames.names.Load() // holds every ID es refers to
	rank := make([]int32, len(names))
	var ids []setID
	for _, e := range es {
		if rank[e.id.set] == 0 {
			rank[e.id.set] = -1
			ids = append(ids, e.id.set)
		}
	}
	slices.SortFunc(ids, func(a, b setID) int { return strings.Compare(names[a], names[b]) })
	for i, id := range ids {
		rank[id] = int32(i)
	}
	slices.SortFunc(es, func(a, b *elem) int {
		if a.id.set != b.id.set {
			return cmp.Compare(rank[a.id.set], rank[b.id.set])
		}
		return a.id.compareKey(&b.id)
	})
}
