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
	elems map[elemID]elemOwner
}

// Fragment is a group of objects planned together: the table-wide ones,
// or one service port's chains, affinity sets and map elements.
type Fragment struct {
	Key      string // service port key; "" for the global fragment
	Chains   []*Chain
	Sets     []*Set
	Elements []Element

	classes []bucketClass // the bucket chains the fragment's policy chains go to
}

type elemID struct {
	set string
	key ElemKey
}

type elemOwner struct {
	value Verdict
	owner *Fragment
}

// index builds rs.elems from the fragments.
func (rs *Ruleset) index() {
	n := len(rs.Global.Elements)
	for _, f := range rs.Services {
		n += len(f.Elements)
	}
	rs.elems = make(map[elemID]elemOwner, n)
	add := func(f *Fragment) {
		for _, e := range f.Elements {
			id := elemID{e.Set, e.Key}
			if _, taken := rs.elems[id]; !taken {
				rs.elems[id] = elemOwner{e.Value, f}
			}
		}
	}
	add(rs.Global)
	for _, f := range rs.Services {
		add(f)
	}
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
	for id, o := range rs.elems {
		v.elems[id.set] = append(v.elems[id.set], Element{Set: id.set, Key: id.key, Value: o.value})
	}
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
		if s.Map {
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
				if s.Map {
					b.WriteString(" : ")
					b.WriteString(e.Value.String())
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
