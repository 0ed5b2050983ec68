package nftables

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/wasp-proxy/wasp/backends"
)

// Ruleset is the planned content of one table: the objects every State
// has (Global) and one Fragment per service port, which the planner reuses
// while the service port does not change. A Ruleset is never modified
// after Plan returns it, so Rulesets share Fragments.
type Ruleset struct {
	Family   backends.Family
	Table    string
	Global   *Fragment
	Services []*Fragment // sorted by Key

	// elems are the elements of every named set and map, each with the
	// fragment that owns it. Two service ports may claim the same key (the
	// ClusterIP of a multi-port Service in cluster-ips, or an external IP
	// two Services share): the global fragment, then the first service
	// port in Key order owns it, as with upstream's element storage where
	// one element is programmed per key.
	elems elemIndex
}

// Fragment is a group of objects planned together: the table-wide ones,
// or one service port's chains, affinity sets and map elements.
type Fragment struct {
	Key    string // service port key; "" for the global fragment
	Chains []*Chain
	Sets   []*Set

	elems   []elem        // the elements of named sets and maps, packed (see elem)
	classes []bucketClass // the bucket chains the fragment's policy chains go to
}

// addElement adds e to f.
func (f *Fragment) addElement(e Element) { f.elems = append(f.elems, packElem(e)) }

// Elements returns f's elements.
func (f *Fragment) Elements() []Element {
	out := make([]Element, len(f.elems))
	for i := range f.elems {
		out[i] = f.elems[i].element()
	}
	return out
}

// claim says which fragments claim an element's key: the first in Key
// order (the global fragment's Key, "", sorts first), whose element is
// programmed, and the others, in order. A claim refers to the elements in
// their fragments, which are never modified, rather than holding their
// values. The base of an index keeps its claims more compactly still
// (elemTable).
type claim struct {
	owner *Fragment   // nil in an overlay: deleted
	elem  int         // the element's index in owner.elems
	more  *[]claimant // nil but for a key several fragments claim
}

type claimant struct {
	f    *Fragment
	elem int
}

// ref returns the claimed element, in its owner.
func (c *claim) ref() *elem { return &c.owner.elems[c.elem] }

// others returns the fragments but the owner that claim the key.
func (c *claim) others() []claimant {
	if c.more == nil {
		return nil
	}
	return *c.more
}

// withOthers returns c claimed by cs too, which it keeps.
func (c claim) withOthers(cs []claimant) claim {
	c.more = nil
	if len(cs) > 0 {
		c.more = &cs
	}
	return c
}

// elemIndex maps element keys to their claims: a base table shared by
// the Rulesets a planner makes one after another, never modified once
// shared, and this Ruleset's changes to it (a nil owner: deleted). A
// one-service change then costs in proportion to that service's elements,
// not to the table's.
type elemIndex struct {
	base elemTable
	over map[elemID]claim
}

func (x *elemIndex) get(id elemID) (claim, bool) {
	if c, ok := x.over[id]; ok {
		return c, c.owner != nil
	}
	return x.base.get(id)
}

// ref returns the element of id, in the fragment that owns it.
func (x *elemIndex) ref(id elemID) (*elem, bool) {
	c, ok := x.get(id)
	if !ok {
		return nil, false
	}
	return c.ref(), true
}

func (x *elemIndex) value(id elemID) (elemValue, bool) {
	c, ok := x.get(id)
	if !ok {
		return elemValue{}, false
	}
	return c.ref().value(), true
}

// each calls fn for every element, in the fragment that owns it, in no
// order.
func (x *elemIndex) each(fn func(*elem)) {
	for _, c := range x.over {
		if c.owner != nil {
			fn(c.ref())
		}
	}
	x.base.each(func(id *elemID, c claim) {
		if _, ok := x.over[*id]; !ok {
			fn(c.ref())
		}
	})
}

func (x *elemIndex) len() int { return x.base.n + len(x.over) }

func claims(cs []claimant, f *Fragment) bool {
	return slices.ContainsFunc(cs, func(c claimant) bool { return c.f == f })
}

// add records f's claim of its element k in the overlay.
func (x *elemIndex) add(f *Fragment, k int) {
	id := f.elems[k].id
	old, ok := x.get(id)
	if !ok {
		x.over[id] = claim{owner: f, elem: k}
		return
	}
	if old.owner == f || claims(old.others(), f) {
		return
	}
	c, more := old, slices.Clone(old.others())
	if f.Key < c.owner.Key {
		more = slices.Insert(more, 0, claimant{c.owner, c.elem})
		c.owner, c.elem = f, k
	} else {
		i, _ := slices.BinarySearchFunc(more, f.Key, func(c claimant, k string) int { return cmp.Compare(c.f.Key, k) })
		more = slices.Insert(more, i, claimant{f, k})
	}
	x.over[id] = c.withOthers(more)
}

// remove records that f no longer claims its element id, in the overlay.
func (x *elemIndex) remove(f *Fragment, id elemID) {
	old, ok := x.get(id)
	if !ok {
		return
	}
	more := old.others()
	switch {
	case old.owner == f && len(more) == 0:
		x.over[id] = claim{}
	case old.owner == f:
		x.over[id] = claim{owner: more[0].f, elem: more[0].elem}.withOthers(slices.Clone(more[1:]))
	default:
		i := slices.IndexFunc(more, func(c claimant) bool { return c.f == f })
		if i < 0 {
			return
		}
		x.over[id] = old.withOthers(slices.Delete(slices.Clone(more), i, i+1))
	}
}

// index builds rs.elems from the fragments.
func (rs *Ruleset) index() {
	var x elemIndex
	for _, f := range rs.fragments() {
		for i := range f.elems {
			x.base.add(f, i)
		}
	}
	rs.elems = x
}

// indexFrom builds rs.elems from prev's, whose fragments rs shares but
// for the global one and those of the service ports that changed: it
// updates the claims of the elements of the fragments that differ, in an
// overlay of prev's base, and builds a new base when the overlay grows.
func (rs *Ruleset) indexFrom(prev *Ruleset) {
	x := elemIndex{base: prev.elems.base, over: make(map[elemID]claim, len(prev.elems.over)+64)}
	for id, c := range prev.elems.over {
		x.over[id] = c
	}
	gone, added := changedFragments(prev, rs)
	changed := 0
	for _, f := range gone {
		changed += len(f.elems)
	}
	for _, f := range added {
		changed += len(f.elems)
	}
	// Past this, an overlay costs more than a new index.
	if limit := 1024 + x.base.n/64; changed+len(x.over) > limit {
		rs.index()
		return
	}
	for _, f := range gone {
		for k := range f.elems {
			x.remove(f, f.elems[k].id)
		}
	}
	for _, f := range added {
		for k := range f.elems {
			x.add(f, k)
		}
	}
	rs.elems = x
}

// fragments returns the global fragment and then the service ports'.
func (rs *Ruleset) fragments() []*Fragment {
	return append([]*Fragment{rs.Global}, rs.Services...)
}

// Dump renders the ruleset in nft syntax, sorted (see Fake.Dump).
func (rs *Ruleset) Dump() string {
	v := tableView{family: rs.Family, name: rs.Table, elems: map[string][]Element{}}
	for _, f := range rs.fragments() {
		v.chains = append(v.chains, f.Chains...)
		v.sets = append(v.sets, f.Sets...)
	}
	rs.elems.each(func(p *elem) {
		e := p.element()
		v.elems[e.Set] = append(v.elems[e.Set], e)
	})
	var b strings.Builder
	v.render(&b)
	return b.String()
}

// tableView is what a table holds, for rendering.
type tableView struct {
	family backends.Family
	name   string
	chains []*Chain
	sets   []*Set
	elems  map[string][]Element // by set name
}

// render writes the table in nft syntax: sets and maps sorted by name,
// their elements sorted by key, then chains sorted by name with their
// rules in order.
func (v *tableView) render(b *strings.Builder) {
	fmt.Fprintf(b, "table %s %s {\n", ipKeyword(v.family), v.name)
	sets := slices.Clone(v.sets)
	slices.SortFunc(sets, func(a, b *Set) int { return cmp.Compare(a.Name, b.Name) })
	for _, s := range sets {
		kind := "set"
		if s.isMap() {
			kind = "map"
		}
		fmt.Fprintf(b, "\t%s %s {\n\t\ttype %s\n", kind, s.Name, s.typeString())
		switch {
		case s.Dynamic && s.Timeout > 0:
			b.WriteString("\t\tflags dynamic,timeout\n")
		case s.Dynamic:
			b.WriteString("\t\tflags dynamic\n")
		case s.Timeout > 0:
			b.WriteString("\t\tflags timeout\n")
		}
		if s.Timeout > 0 {
			fmt.Fprintf(b, "\t\ttimeout %ds\n", s.Timeout)
		}
		if s.Comment != "" {
			fmt.Fprintf(b, "\t\tcomment %q\n", s.Comment)
		}
		if es := v.elems[s.Name]; len(es) > 0 {
			es = slices.Clone(es)
			slices.SortFunc(es, func(a, b Element) int { return a.Key.compare(b.Key) })
			b.WriteString("\t\telements = {")
			for i, e := range es {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString("\n\t\t\t")
				b.WriteString(e.Key.string(s.Key))
				if s.isMap() {
					b.WriteString(" : ")
					b.WriteString(e.value().string(s))
				}
			}
			b.WriteString("\n\t\t}\n")
		}
		b.WriteString("\t}\n")
	}
	chains := slices.Clone(v.chains)
	slices.SortFunc(chains, func(a, b *Chain) int { return cmp.Compare(a.Name, b.Name) })
	for _, c := range chains {
		fmt.Fprintf(b, "\tchain %s {\n", c.Name)
		if c.Base != nil {
			fmt.Fprintf(b, "\t\t%s\n", c.Base)
		}
		for _, r := range c.Rules {
			fmt.Fprintf(b, "\t\t%s\n", r)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
}

// changedFragments returns the fragments of old and of new that differ
// between them: those of service ports only in old (gone), only in new
// (added), or in both with different fragments (one each), and the global
// fragment if it changed. Both lists keep the rulesets' key order.
// Fragments are compared by identity: the planner reuses the fragment of an
// unchanged service port.
func changedFragments(old, new *Ruleset) (gone, added []*Fragment) {
	if old.Global != new.Global {
		gone, added = append(gone, old.Global), append(added, new.Global)
	}
	i, j := 0, 0
	for i < len(old.Services) || j < len(new.Services) {
		// The same fragment (the common case): the same key, no string
		// comparison.
		if i < len(old.Services) && j < len(new.Services) && old.Services[i] == new.Services[j] {
			i++
			j++
			continue
		}
		switch {
		case j == len(new.Services) || (i < len(old.Services) && old.Services[i].Key < new.Services[j].Key):
			gone = append(gone, old.Services[i])
			i++
		case i == len(old.Services) || new.Services[j].Key < old.Services[i].Key:
			added = append(added, new.Services[j])
			j++
		default:
			if old.Services[i] != new.Services[j] {
				gone, added = append(gone, old.Services[i]), append(added, new.Services[j])
			}
			i++
			j++
		}
	}
	return gone, added
}
