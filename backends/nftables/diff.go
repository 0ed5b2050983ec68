package nftables

import (
	"cmp"
	"slices"
	"strings"
)

// Diff returns the transaction that turns a table programmed as old into
// new. A nil old is a table that does not exist yet. Fragments shared by
// old and new (the same pointer: the planner reused them) are skipped
// without a look, so a change to one service port costs in proportion to
// that port's objects, plus a walk over the fragment lists.
//
// Chains whose rules changed are flushed and rewritten, new ones added,
// stale ones flushed and deleted; sets and maps are added, deleted, or
// deleted and added again when their definition changed; elements are
// added and deleted one by one. The operations go in up to five commits,
// the empty ones left out, so that nothing is referenced before it exists
// or deleted while referenced, and a packet whose evaluation straddles a
// commit still finds a whole path to an endpoint (see phaseSwitch):
//
//  1. new chains with their rules, and new sets, unreferenced, when the
//     change is more than additions
//  2. the switch: chains to rewrite flushed, replaced elements and
//     lifted denials deleted, sets whose definition changed deleted and
//     added, elements added, rules of new and rewritten chains added
//  3. deleted service entries (service-ips, service-nodeports,
//     simple-services) of entries still served
//  4. deleted bucket classes (bucket-classes-*, simple-<kind>-<W>) of
//     entries still served
//  5. deleted bucket elements, then stale chains flushed, stale sets and
//     chains deleted
//
// A change that only adds (a new service port) is one commit; one that
// only deletes what no longer serves (a service port gone) is one commit
// too, and one stale-chain commit if it had chains.
//
// Stale chains are deleted in the commit that removes the last reference
// to them, or in a later one of the same Sync. Upstream waits a second
// first because kernels before 6.2 released a verdict-map element's
// reference to its chain only after the transaction; wasp requires a
// kernel where the same-transaction delete works
// (TestKernelStaleChainsDeletedAtOnce checks it on this one).
func Diff(old, new *Ruleset) *Transaction {
	if old == nil {
		return rebuild(&inventory{}, new)
	}
	tx := &Transaction{Family: new.Family, Table: new.Table}

	// The fragments that differ.
	oldF, newF := changedFragments(old, new)

	oldChains, oldSets := objects(oldF)
	newChains, newSets := objects(newF)

	var delSets, addSets []*Set
	deleted := map[string]bool{}
	recreated := map[string]bool{}
	for name, s := range oldSets {
		if n, ok := newSets[name]; !ok || !s.equal(n) {
			delSets = append(delSets, s)
			deleted[name] = true
		}
	}
	for name, s := range newSets {
		if o, ok := oldSets[name]; !ok || !s.equal(o) {
			addSets = append(addSets, s)
			if ok {
				recreated[name] = true
			}
		}
	}

	var addChains, rewrite, delChains []*Chain
	for name, c := range newChains {
		o, ok := oldChains[name]
		switch {
		case !ok:
			addChains = append(addChains, c)
		case !rulesEqual(o.Rules, c.Rules) || refersTo(o, deleted):
			rewrite = append(rewrite, c)
		}
	}
	for name, c := range oldChains {
		if _, ok := newChains[name]; !ok {
			delChains = append(delChains, c)
		}
	}

	// Elements: those of the changed fragments, compared as the whole
	// rulesets resolve them (another fragment may own the same key).
	touched := map[elemID]bool{}
	for _, fs := range [][]*Fragment{oldF, newF} {
		for _, f := range fs {
			for i := range f.elems {
				touched[f.elems[i].id] = true
			}
		}
	}
	if len(recreated) > 0 {
		new.elems.each(func(e *elem) {
			if recreated[e.id.setName()] {
				touched[e.id] = true
			}
		})
	}
	// Deletions wait, when the key they served stays served, until
	// what led to them is gone (see phase).
	served := func(k ElemKey) bool { return servedIn(new, k) }
	var delElems [phases][]*elem
	var addElems []*elem
	for id := range touched {
		oe, oldHas := old.elems.ref(id)
		ne, newHas := new.elems.ref(id)
		gone := deleted[id.setName()]
		changed := oldHas && newHas && oe.value() != ne.value()
		if oldHas && !gone && (!newHas || changed) {
			ph := phaseSwitch
			if !newHas {
				ph = phaseOf(oe, served)
			}
			delElems[ph] = append(delElems[ph], oe)
		}
		if newHas && (!oldHas || gone || changed) {
			addElems = append(addElems, ne)
		}
	}

	sortChains(addChains)
	sortChains(rewrite)
	sortChains(delChains)
	var recreate, addNew, delStale []*Set
	for _, s := range addSets {
		if recreated[s.Name] {
			recreate = append(recreate, s)
		} else {
			addNew = append(addNew, s)
		}
	}
	for _, s := range delSets {
		if !recreated[s.Name] {
			delStale = append(delStale, s)
		}
	}
	sortSets(recreate)
	sortSets(addNew)
	sortSets(delStale)

	specOf := func(name string) *Set {
		if s, ok := newSets[name]; ok {
			return s
		}
		if s, ok := oldSets[name]; ok {
			return s
		}
		for _, s := range new.Global.Sets {
			if s.Name == name {
				return s
			}
		}
		for _, s := range old.Global.Sets {
			if s.Name == name {
				return s
			}
		}
		return nil
	}

	// New chains get their rules in a commit of their own when the
	// switch does more than add: a packet whose evaluation began before
	// a commit runs the rules of before, and a chain new in that commit
	// has none then.
	pureAdd := len(rewrite) == 0 && len(recreate) == 0
	for _, d := range delElems {
		pureAdd = pureAdd && len(d) == 0
	}
	chainsFirst := func() {
		for _, c := range addChains {
			tx.add(op{kind: opAddChain, chain: c})
		}
		for _, s := range addNew {
			tx.add(op{kind: opAddSet, set: s})
		}
		for _, c := range addChains {
			addRuleOps(tx, c)
		}
	}
	if !pureAdd {
		chainsFirst()
		tx.commit()
	}
	// The switch.
	if pureAdd {
		for _, c := range addChains {
			tx.add(op{kind: opAddChain, chain: c})
		}
	}
	for _, c := range rewrite {
		tx.add(op{kind: opFlushChain, name: c.Name})
	}
	addElementOps(tx, opDeleteElements, delElems[phaseSwitch], specOf)
	for _, s := range recreate {
		tx.add(op{kind: opDeleteSet, name: s.Name, set: s})
	}
	if pureAdd {
		for _, s := range addNew {
			tx.add(op{kind: opAddSet, set: s})
		}
	}
	for _, s := range recreate {
		tx.add(op{kind: opAddSet, set: s})
	}
	addElementOps(tx, opAddElements, addElems, specOf)
	rules := slices.Clone(rewrite)
	if pureAdd {
		rules = append(rules, addChains...)
		sortChains(rules)
	}
	for _, c := range rules {
		addRuleOps(tx, c)
	}
	// Then what led to the old targets, level by level, and the stale
	// chains and sets last.
	for ph := phaseSwitch + 1; ph < phases; ph++ {
		tx.commit()
		if ph == phaseData {
			for _, c := range delChains {
				tx.add(op{kind: opFlushChain, name: c.Name})
			}
		}
		addElementOps(tx, opDeleteElements, delElems[ph], specOf)
		if ph == phaseData {
			for _, s := range delStale {
				tx.add(op{kind: opDeleteSet, name: s.Name, set: s})
			}
			for _, c := range delChains {
				tx.add(op{kind: opDeleteChain, name: c.Name})
			}
		}
	}
	if n := len(tx.commits); n > 0 && tx.commits[n-1] == len(tx.ops) {
		tx.commits = tx.commits[:n-1]
	}
	return tx
}

// The commits of a Diff, in order. A packet's path to an endpoint is a
// series of lookups (service-ips or simple-services, then bucket-classes
// or a simple class set, then a bucket map), and a packet whose
// evaluation began before a commit may make its first lookups before it
// and the next after it. So a change that moves a service entry from one
// path to another adds the new path first (with the entry in both
// places, the first lookup picks one whole path), and deletes the old
// one from its first lookup to its last, one commit each: every packet
// then finds a whole path, old or new. Each commit waits for the
// kernel's acknowledgement of the one before; a packet's evaluation takes
// microseconds. A deletion whose service entry no longer exists at all
// goes with the switch: there is nothing left to reach.
const (
	phaseSwitch  = iota // additions, replacements, rewrites; denials lifted
	phaseEntries        // service-ips, service-nodeports, simple-services
	phaseClasses        // bucket-classes-*, simple-<kind>-<W>
	phaseData           // bucket maps; then stale chains and sets
	phases
)

// phaseOf returns the commit of the deletion of e, an element that is no
// longer planned.
func phaseOf(e *elem, served func(ElemKey) bool) int {
	set, key := e.id.setName(), e.id.key()
	entry := ElemKey{Addr: key.Addr, Proto: key.Proto, Port: key.Port}
	switch {
	case set == noEndpointServicesMap || set == noEndpointNodePortsMap || set == firewallIPsMap ||
		set == hairpinSet || set == clusterIPsSet || set == nodePortIPsSet:
		// Denials lifted with the switch; addresses, not paths.
		return phaseSwitch
	case !served(entry):
		return phaseSwitch
	case set == serviceIPsMap || set == serviceNodePortsMap || set == simpleServicesSet:
		return phaseEntries
	case strings.HasPrefix(set, bucketClassesPrefix) || strings.HasPrefix(set, simpleSetPrefix):
		return phaseClasses
	}
	return phaseData
}

// servedIn reports whether rs forwards the service entry k: "addr .
// proto . port" in service-ips or simple-services, or with no address
// "proto . port" in service-nodeports.
func servedIn(rs *Ruleset, k ElemKey) bool {
	if !k.Addr.IsValid() {
		_, ok := rs.elems.get(packElem(Element{Set: serviceNodePortsMap, Key: k}).id)
		return ok
	}
	for _, set := range []string{serviceIPsMap, simpleServicesSet} {
		if _, ok := rs.elems.get(packElem(Element{Set: set, Key: k}).id); ok {
			return true
		}
	}
	return false
}

// rebuild returns the transaction that turns a table holding inv (from a
// previous process or a failed transaction) into rs, without deleting
// the table: connections through it keep their NAT, and affinity sets
// whose definition is unchanged keep their clients. Every existing chain
// is flushed and every wanted one rewritten; every other existing set is
// deleted and added again with its elements; stale chains are deleted; a
// base chain whose hook, type, priority or policy changed is deleted and
// added.
func rebuild(inv *inventory, rs *Ruleset) *Transaction {
	tx := &Transaction{Family: rs.Family, Table: rs.Table}
	tx.add(op{kind: opAddTable})

	var chains []*Chain
	var sets []*Set
	for _, f := range rs.fragments() {
		chains = append(chains, f.Chains...)
		sets = append(sets, f.Sets...)
	}
	sortChains(chains)
	sortSets(sets)
	wantedChain := make(map[string]bool, len(chains))
	var recreate []*Chain
	for _, c := range chains {
		wantedChain[c.Name] = true
		base, ok := inv.chains[c.Name]
		switch {
		case !ok:
			tx.add(op{kind: opAddChain, chain: c})
		case !baseEqual(base, c.Base) || inv.notAccept[c.Name]:
			recreate = append(recreate, c)
		}
	}
	existing := sortedKeys(inv.chains)
	for _, name := range existing {
		tx.add(op{kind: opFlushChain, name: name})
	}
	kept := map[string]bool{}
	for _, s := range sets {
		if have, ok := inv.sets[s.Name]; ok && s.Dynamic && sameAffinitySet(have, s) {
			kept[s.Name] = true
		}
	}
	for _, name := range sortedKeys(inv.sets) {
		if !kept[name] {
			tx.add(op{kind: opDeleteSet, name: name, set: inv.sets[name]})
		}
	}
	for _, name := range existing {
		if !wantedChain[name] {
			tx.add(op{kind: opDeleteChain, name: name})
		}
	}
	for _, c := range recreate {
		tx.add(op{kind: opDeleteChain, name: c.Name})
		tx.add(op{kind: opAddChain, chain: c})
	}
	for _, s := range sets {
		if !kept[s.Name] {
			tx.add(op{kind: opAddSet, set: s})
		}
	}
	// References to the elements in their fragments: a copy of each
	// would be the largest object of a full sync.
	elems := make([]*elem, 0, rs.elems.len())
	rs.elems.each(func(e *elem) { elems = append(elems, e) })
	specs := make(map[string]*Set, len(sets))
	for _, s := range sets {
		specs[s.Name] = s
	}
	addElementOps(tx, opAddElements, elems, func(name string) *Set { return specs[name] })
	for _, c := range chains {
		addRuleOps(tx, c)
	}
	return tx
}

// sameAffinitySet reports whether an existing set can be kept for want:
// the same key, flags and timeout (its comment does not matter).
func sameAffinitySet(have, want *Set) bool {
	h, w := *have, *want
	h.Comment, w.Comment = "", ""
	return h.equal(&w)
}

func baseEqual(a, b *BaseChain) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func addRuleOps(tx *Transaction, c *Chain) {
	for i := range c.Rules {
		tx.add(op{kind: opAddRule, name: c.Name, rule: &c.Rules[i]})
	}
}

// addElementOps adds one operation per set, elements sorted by key.
func addElementOps(tx *Transaction, kind opKind, elems []*elem, spec func(string) *Set) {
	sortElems(elems)
	for len(elems) > 0 {
		n := 1
		for n < len(elems) && elems[n].id.set == elems[0].id.set {
			n++
		}
		tx.add(op{kind: kind, set: spec(elems[0].id.setName()), elems: elems[:n:n]})
		elems = elems[n:]
	}
}

// objects returns the chains and sets of fs by name.
func objects(fs []*Fragment) (map[string]*Chain, map[string]*Set) {
	chains, sets := map[string]*Chain{}, map[string]*Set{}
	for _, f := range fs {
		for _, c := range f.Chains {
			chains[c.Name] = c
		}
		for _, s := range f.Sets {
			sets[s.Name] = s
		}
	}
	return chains, sets
}

// refersTo reports whether a rule of c refers to one of the sets.
func refersTo(c *Chain, sets map[string]bool) bool {
	if len(sets) == 0 {
		return false
	}
	found := false
	for i := range c.Rules {
		c.Rules[i].refs(func(string) {}, func(s string) { found = found || sets[s] })
	}
	return found
}

func sortChains(cs []*Chain) {
	slices.SortFunc(cs, func(a, b *Chain) int { return cmp.Compare(a.Name, b.Name) })
}

func sortSets(ss []*Set) {
	slices.SortFunc(ss, func(a, b *Set) int { return cmp.Compare(a.Name, b.Name) })
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
