package nftables

import "hash/maphash"

// elemTable is the base of an element index (see elemIndex): the claims
// of every element key of a Ruleset, built once and then only read. At
// 10k service ports it holds 170k keys. A Go map from elemID to claim
// takes 72 bytes a slot (the 44-byte key, the 24-byte claim) and grows
// to about 18 MiB, with as much again garbage from its growth; a slot of
// this table holds a reference to the element that owns the key, which
// holds the key, in 16 bytes: 4 MiB. The other claimants of keys several
// fragments claim (a multi-port Service's ClusterIP) are in a map.
type elemTable struct {
	slots  []elemSlot // open addressing, linear probing; a power of two
	n      int        // keys
	others map[elemID]*[]claimant
}

type elemSlot struct {
	owner *Fragment // nil: empty
	elem  uint32    // the element's index in owner.elems, and hasOthers
	hash  uint32    // the key's hash
}

// hasOthers marks, in elemSlot.elem, a key that others holds claimants of.
const hasOthers = 1 << 31

// elemSeed seeds the hash of element keys, which come from the cluster.
var elemSeed = maphash.MakeSeed()

func hashID(id *elemID) uint32 { return uint32(maphash.Comparable(elemSeed, *id)) }

// find returns the slot of id, or the empty one where it goes.
func (t *elemTable) find(id *elemID, h uint32) (int, bool) {
	mask := len(t.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.owner == nil {
			return i, false
		}
		if s.hash == h && s.owner.elems[s.elem&^hasOthers].id == *id {
			return i, true
		}
	}
}

func (t *elemTable) get(id elemID) (claim, bool) {
	if t.n == 0 {
		return claim{}, false
	}
	i, ok := t.find(&id, hashID(&id))
	if !ok {
		return claim{}, false
	}
	return t.claim(&t.slots[i]), true
}

// claim returns the claim of the key in s.
func (t *elemTable) claim(s *elemSlot) claim {
	c := claim{owner: s.owner, elem: int(s.elem &^ hasOthers)}
	if s.elem&hasOthers != 0 {
		c.more = t.others[s.owner.elems[c.elem].id]
	}
	return c
}

// each calls fn for every key's claim, in no order.
func (t *elemTable) each(fn func(id *elemID, c claim)) {
	for i := range t.slots {
		if s := &t.slots[i]; s.owner != nil {
			c := t.claim(s)
			fn(&c.ref().id, c)
		}
	}
}

// add records f's claim of its element k, after those of the fragments
// added before.
func (t *elemTable) add(f *Fragment, k int) {
	id := &f.elems[k].id
	h := hashID(id)
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	i, ok := t.find(id, h)
	s := &t.slots[i]
	switch {
	case !ok:
		*s = elemSlot{owner: f, elem: uint32(k), hash: h}
		t.n++
		return
	case s.owner == f:
		return
	}
	if s.elem&hasOthers == 0 {
		if t.others == nil {
			t.others = map[elemID]*[]claimant{}
		}
		t.others[*id] = &[]claimant{{f, k}}
		s.elem |= hasOthers
		return
	}
	more := t.others[*id]
	if !claims(*more, f) {
		*more = append(*more, claimant{f, k})
	}
}

// grow doubles the slots.
func (t *elemTable) grow() {
	old := t.slots
	t.slots = make([]elemSlot, max(2*len(old), 1024))
	mask := len(t.slots) - 1
	for _, s := range old {
		if s.owner == nil {
			continue
		}
		i := int(s.hash) & mask
		for t.slots[i].owner != nil {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
