package nftables

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// TestElemTable: a table grown over several thousand keys, some claimed
// by several fragments, finds every key with its owner (the first
// fragment to claim it) and the others in order, finds no other key, and
// visits each key once.
func TestElemTable(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	type want struct {
		owner  *Fragment
		elem   int
		others []claimant
	}
	wants := map[elemID]*want{}
	var tb elemTable
	for i := range 300 {
		f := &Fragment{Key: fmt.Sprintf("f%03d", i)}
		for range 20 {
			// Few distinct addresses and ports: keys repeat across
			// fragments, and within one.
			a := netip.AddrFrom4([4]byte{10, 96, byte(r.IntN(20)), byte(r.IntN(256))})
			f.addElement(Element{Set: clusterIPsSet, Key: ElemKey{Addr: a, Proto: protoTCP, Port: uint16(r.IntN(2))}})
		}
		for k := range f.elems {
			tb.add(f, k)
			id := f.elems[k].id
			switch w := wants[id]; {
			case w == nil:
				wants[id] = &want{owner: f, elem: k}
			case w.owner != f && !claims(w.others, f):
				w.others = append(w.others, claimant{f, k})
			}
		}
	}
	if tb.n != len(wants) {
		t.Fatalf("%d keys, want %d", tb.n, len(wants))
	}
	shared := 0
	for id, w := range wants {
		c, ok := tb.get(id)
		if !ok || c.owner != w.owner || c.elem != w.elem || !slices.Equal(c.others(), w.others) {
			t.Fatalf("key %+v: got %v %+v, want %+v", id.key(), ok, c, w)
		}
		if len(w.others) > 0 {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("no key claimed by several fragments")
	}
	if _, ok := tb.get(packID(internSet(clusterIPsSet), ElemKey{Addr: netip.MustParseAddr("10.97.0.1")})); ok {
		t.Error("found a key never added")
	}
	seen := map[elemID]bool{}
	tb.each(func(id *elemID, c claim) {
		if seen[*id] || c.ref().id != *id {
			t.Fatalf("key %+v visited twice, or with another's claim", id.key())
		}
		seen[*id] = true
	})
	if len(seen) != len(wants) {
		t.Errorf("visited %d keys, want %d", len(seen), len(wants))
	}
}
