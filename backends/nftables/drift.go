package nftables

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
)

var _ backends.DriftChecker = (*Backend)(nil)

// errDumpInterrupted is returned by a read of the kernel's objects that a
// commit interrupted: the result is not consistent, and the check is
// retried later.
var errDumpInterrupted = errors.New("dump interrupted by a concurrent change of the ruleset")

// CheckDrift compares the table with what the last successful Sync
// programmed (backends.DriftChecker).
//
// It first asks the kernel for its ruleset generation, a counter every
// commit of any table in the network namespace changes. When it is the one
// this Backend saw after its last verified state (a clean check, then only
// its own commits), nothing can have changed, and the check ends there:
// one netlink round trip. Otherwise it reads the table back (chains with
// their hooks, the rules of each chain by the tag each carries, the named
// sets and maps with their elements) and compares it with the planned
// ruleset: element by element, each looked up in the plan's index, with a
// second pass over a set only to name the elements it lacks. The elements
// of affinity sets, which packets add, are not compared.
//
// On a difference the Backend forgets what it programmed, so the next Sync
// rewrites the whole table in one transaction (as after a failed Sync).
// The read-back runs without the Backend's lock, so Syncs are not held up
// by it; a check that a Sync overlapped reports nothing, and the next one
// reads the table back again, holding the lock.
func (b *Backend) CheckDrift(ctx context.Context) (*backends.Drift, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	if b.programmed == nil {
		return nil, nil // the next Sync rebuilds
	}
	b.stats.driftChecks++
	gen, err := b.k.generation(ctx)
	if err != nil {
		return nil, fmt.Errorf("nftables: drift check of table %s %s: ruleset generation: %w", ipKeyword(b.cfg.family), b.cfg.table, err)
	}
	if b.verified && gen == b.verifiedGen {
		return nil, nil
	}
	b.stats.driftReadbacks++
	// The read-back takes a second or two at 10k service ports: Syncs
	// go on meanwhile, and a check that overlapped one concludes nothing
	// (it may have read some sets before the Sync's transaction and some
	// after). The next check then holds the lock, so that constant churn
	// delays a repair by one period at most.
	rs, epoch := b.programmed, b.epoch
	locked := b.readbackLocked
	b.readbackLocked = false
	if !locked {
		b.mu.Unlock()
	}
	d, err := b.compare(ctx, rs)
	if !locked {
		b.mu.Lock()
	}
	switch {
	case b.closed:
		return nil, errClosed
	case b.epoch != epoch:
		b.readbackLocked = true
		return nil, nil // not verified: the next check reads back again
	case err != nil:
		return nil, fmt.Errorf("nftables: drift check of table %s %s: %w", ipKeyword(b.cfg.family), b.cfg.table, err)
	case !d.Empty():
		b.programmed, b.verified = nil, false
		return d, nil
	}
	// The table matched from gen on: a later generation means a commit
	// since, which the next check reads back.
	b.verified, b.verifiedGen = true, gen
	klog.FromContext(ctx).V(4).Info("Drift check: the table matches", "ipFamily", b.cfg.family.String(), "table", b.cfg.table, "generation", gen)
	return nil, nil
}

// ruleTag identifies a rule as the Backend programmed it. The netlink
// kernel stores it in the rule's user data beside the comment (nft shows
// only the comment), and reads it back to compare rules without decoding
// their expressions: a rule deleted, added or replaced behind the
// Backend's back has no tag or another one at its position. It is the
// 64-bit FNV-1a hash of the rule in nft syntax; never 0.
func ruleTag(r *Rule) uint64 {
	h := fnv.New64a()
	h.Write([]byte(r.String()))
	return h.Sum64() | 1
}

// compare reads the table back and returns how it differs from rs.
func (b *Backend) compare(ctx context.Context, rs *Ruleset) (*backends.Drift, error) {
	d := &backends.Drift{}
	family, table := b.cfg.family, b.cfg.table
	inv, err := b.k.load(ctx, family, table)
	if err != nil {
		return nil, fmt.Errorf("load table: %w", err)
	}
	if !inv.exists {
		d.Add(backends.DriftTable, 1, fmt.Sprintf("table %s %s missing", ipKeyword(family), table))
		return d, nil
	}

	chains := map[string]*Chain{}
	sets := map[string]*Set{}
	for _, f := range rs.fragments() {
		for _, c := range f.Chains {
			chains[c.Name] = c
		}
		for _, s := range f.Sets {
			sets[s.Name] = s
		}
	}

	// Chains, by name, with their hooks and policy.
	for _, name := range sortedKeys(chains) {
		c := chains[name]
		base, ok := inv.chains[name]
		switch {
		case !ok:
			d.Add(backends.DriftChain, 1, fmt.Sprintf("chain %s missing", name))
		case !baseEqual(base, c.Base):
			d.Add(backends.DriftChain, 1, fmt.Sprintf("chain %s: hook, type or priority changed", name))
		case inv.notAccept[name]:
			d.Add(backends.DriftChain, 1, fmt.Sprintf("chain %s: policy is not accept", name))
		}
	}
	for _, name := range sortedKeys(inv.chains) {
		if _, ok := chains[name]; !ok {
			d.Add(backends.DriftChain, 1, fmt.Sprintf("chain %s not programmed by wasp", name))
		}
	}

	// Rules, by their tags in each chain's order.
	tags := make(map[string][]uint64, len(chains))
	if err := b.k.rules(ctx, family, table, func(chain string, tag uint64) {
		tags[chain] = append(tags[chain], tag)
	}); err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	for _, name := range sortedKeys(chains) {
		if _, ok := inv.chains[name]; !ok {
			continue // counted as a chain
		}
		c, got := chains[name], tags[name]
		differ := max(len(c.Rules), len(got)) - min(len(c.Rules), len(got))
		first := -1
		for i := range min(len(c.Rules), len(got)) {
			if got[i] != ruleTag(&c.Rules[i]) {
				differ++
				if first < 0 {
					first = i
				}
			}
		}
		switch {
		case differ == 0:
		case len(got) != len(c.Rules):
			d.Add(backends.DriftRule, differ, fmt.Sprintf("chain %s: %d rules, want %d", name, len(got), len(c.Rules)))
		default:
			d.Add(backends.DriftRule, differ, fmt.Sprintf("chain %s: rule %d changed: want %q", name, first+1, c.Rules[first].String()))
		}
	}

	// Sets and maps, by name and definition; then the elements of those
	// that match.
	var compareElems []*Set
	for _, name := range sortedKeys(sets) {
		s := sets[name]
		have, ok := inv.sets[name]
		switch {
		case !ok:
			d.Add(backends.DriftSet, 1, fmt.Sprintf("%s %s missing", setKind(s), name))
		case !sameDefinition(have, s):
			d.Add(backends.DriftSet, 1, fmt.Sprintf("%s %s: definition changed", setKind(s), name))
		case !s.Dynamic:
			compareElems = append(compareElems, s)
		}
	}
	for _, name := range sortedKeys(inv.sets) {
		if _, ok := sets[name]; !ok {
			d.Add(backends.DriftSet, 1, fmt.Sprintf("%s %s not programmed by wasp", setKind(inv.sets[name]), name))
		}
	}
	want := map[setID]int{}
	rs.elems.each(func(e *elem) { want[e.id.set]++ })
	for _, s := range compareElems {
		if err := b.compareElements(ctx, rs, s, want[internSet(s.Name)], d); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// compareElements compares the elements of set s in the kernel with the
// planned ones, of which there are want, and records the differences in d.
func (b *Backend) compareElements(ctx context.Context, rs *Ruleset, s *Set, want int, d *backends.Drift) error {
	sid := internSet(s.Name)
	matched, changed := 0, 0
	err := b.k.elements(ctx, b.cfg.family, b.cfg.table, s, func(e Element) {
		v, ok := rs.elems.value(packID(sid, e.Key))
		switch {
		case !ok:
			d.Add(backends.DriftElement, 1, fmt.Sprintf("%s %s: element %s not programmed by wasp", setKind(s), s.Name, e.Key.string(s.Key)))
		case v != e.value():
			changed++
			d.Add(backends.DriftElement, 1, fmt.Sprintf("%s %s: element %s changed: want %s", setKind(s), s.Name, e.Key.string(s.Key), v.string(s)))
		default:
			matched++
		}
	})
	if err != nil {
		return fmt.Errorf("list elements of %s %s: %w", setKind(s), s.Name, err)
	}
	missing := want - matched - changed
	if missing <= 0 {
		return nil
	}
	// Name the missing elements: read the set again, keeping its keys.
	seen := make(map[ElemKey]bool, matched+changed)
	if err := b.k.elements(ctx, b.cfg.family, b.cfg.table, s, func(e Element) { seen[e.Key] = true }); err != nil {
		return fmt.Errorf("list elements of %s %s: %w", setKind(s), s.Name, err)
	}
	var gone []ElemKey
	rs.elems.each(func(e *elem) {
		if e.id.set == sid && !seen[e.id.key()] {
			gone = append(gone, e.id.key())
		}
	})
	slices.SortFunc(gone, ElemKey.compare)
	// The count is the first pass's: a change between the passes shows in
	// the next check.
	example := fmt.Sprintf("%s %s: %d elements missing", setKind(s), s.Name, missing)
	if len(gone) > 0 {
		example = fmt.Sprintf("%s %s: element %s missing", setKind(s), s.Name, gone[0].string(s.Key))
		if missing > 1 {
			example += fmt.Sprintf(" (and %d more)", missing-1)
		}
	}
	d.Add(backends.DriftElement, missing, example)
	return nil
}

// sameDefinition reports whether a set read back from the kernel has the
// definition of want, as far as the kernel describes it (its comment is
// not compared).
func sameDefinition(have, want *Set) bool {
	return slices.Equal(have.Key, want.Key) && have.Map == want.Map && slices.Equal(have.Data, want.Data) &&
		have.Dynamic == want.Dynamic && have.Timeout == want.Timeout
}

func setKind(s *Set) string {
	if s.isMap() {
		return "map"
	}
	return "set"
}
