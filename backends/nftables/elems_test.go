package nftables

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestSortElems: packed elements sort as their unpacked Elements do, by
// set name and then ElemKey.compare.
func TestSortElems(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	addrs := []netip.Addr{{}, ip("10.0.0.1"), ip("10.0.0.2"), ip("192.168.1.1"), ip("::1"), ip("fd00::1"), ip("fd00::2"), ip("::ffff:10.0.0.1")}
	sets := []string{"b-set", "a-set", "service-ips", "bucket-classes-2"}
	var es []Element
	for range 2000 {
		es = append(es, Element{
			Set: sets[r.IntN(len(sets))],
			Key: ElemKey{
				Addr:   addrs[r.IntN(len(addrs))],
				Addr2:  addrs[r.IntN(len(addrs))],
				Proto:  uint8(r.IntN(3)),
				Port:   uint16(r.IntN(3) * 1000),
				Bucket: uint32(r.IntN(3)),
			},
		})
	}
	packed := packElems(es...)
	sortElems(packed)
	slices.SortStableFunc(es, func(a, b Element) int {
		if a.Set != b.Set {
			return strings.Compare(a.Set, b.Set)
		}
		return a.Key.compare(b.Key)
	})
	for i := range es {
		if got := packed[i].element(); got.Set != es[i].Set || got.Key.compare(es[i].Key) != 0 {
			t.Fatalf("element %d: got %s %+v, want %s %+v", i, got.Set, got.Key, es[i].Set, es[i].Key)
		}
	}
}
