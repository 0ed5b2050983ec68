package nftables

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/wasp-proxy/wasp/backends"
)

// Fake is an in-memory nftables kernel: the tables of one network
// namespace. A Backend made with NewWithFake programs it instead of the
// kernel, so the sync loop and golden tests run without root.
//
// It validates each transaction as the kernel does and applies it
// atomically: an operation on a missing table, chain, set or element
// fails with ENOENT; deleting a chain or set that a rule or map element
// still refers to fails with EBUSY; redefining an existing chain or set
// differently, or adding an existing element with another value, fails
// with EEXIST; a rule or element that jumps to a base chain fails with
// EOPNOTSUPP; a key or lookup whose type does not match the set fails with
// EINVAL. After the operations it checks what the kernel checks at commit:
// no loop through jumps, dnat reached only from nat prerouting or output,
// masquerade only from nat postrouting, reject only from the input,
// forward and output hooks. Errors wrap the syscall.Errno the kernel
// would return.
//
// It is safe for concurrent use.
type Fake struct {
	mu       sync.Mutex
	tables   map[tableID]*fakeTable
	failNext error
	applied  int    // transactions applied
	gen      uint32 // ruleset generation: commits, tampering included
	noCommit bool   // skip the commit-time graph check (benchmarks)
}

var _ kernel = (*Fake)(nil)

type tableID struct {
	family backends.Family
	name   string
}

type fakeTable struct {
	chains map[string]*fakeChain
	sets   map[string]*fakeSet
}

type fakeChain struct {
	base  *BaseChain
	rules []Rule
	refs  int // rules and map elements that jump or go to it
}

type fakeSet struct {
	spec  Set
	elems map[ElemKey]elemValue
	refs  int // rules that use it
}

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{tables: map[tableID]*fakeTable{}}
}

// FailNext makes the next transaction fail with err, changing nothing. A
// nil err cancels a pending failure.
func (f *Fake) FailNext(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = err
}

// Dump renders every table in nft syntax, ip before ip6 and by name; in a
// table, sets and maps by name with their elements sorted, then chains by
// name with their rules in order. It is "" when there is no table.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]tableID, 0, len(f.tables))
	for id := range f.tables {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b tableID) int {
		if a.family != b.family {
			return cmp.Compare(a.family, b.family)
		}
		return cmp.Compare(a.name, b.name)
	})
	var b strings.Builder
	for _, id := range ids {
		t := f.tables[id]
		v := tableView{family: id.family, name: id.name, elems: map[string][]Element{}}
		for name, c := range t.chains {
			v.chains = append(v.chains, &Chain{Name: name, Base: c.base, Rules: c.rules})
		}
		for _, s := range t.sets {
			v.sets = append(v.sets, &s.spec)
			for k, val := range s.elems {
				v.elems[s.spec.Name] = append(v.elems[s.spec.Name], Element{Set: s.spec.Name, Key: k, Value: val.verdict, To: val.to})
			}
		}
		v.render(&b)
	}
	return b.String()
}

func (f *Fake) close() error { return nil }

func (f *Fake) load(ctx context.Context, family backends.Family, table string) (*inventory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tables[tableID{family, table}]
	if !ok {
		return &inventory{}, nil
	}
	inv := &inventory{exists: true, chains: map[string]*BaseChain{}, notAccept: map[string]bool{}, sets: map[string]*Set{}}
	for name, c := range t.chains {
		var base *BaseChain
		if c.base != nil {
			b := *c.base
			base = &b
		}
		inv.chains[name] = base
	}
	for name, s := range t.sets {
		spec := s.spec
		inv.sets[name] = &spec
	}
	return inv, nil
}

// update adds addr to a dynamic set as a packet would through "update
// @set { ip saddr }", for tests of what survives a restart.
func (f *Fake) update(family backends.Family, table, set string, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tables[tableID{family, table}]
	if !ok {
		return syscall.ENOENT
	}
	s, ok := t.sets[set]
	if !ok || !s.spec.Dynamic {
		return syscall.ENOENT
	}
	s.elems[ElemKey{Addr: addr}] = elemValue{}
	return nil
}

// apply applies each commit of tx in turn, as the kernel does: a failed
// one changes nothing and ends tx, the ones before it stay applied.
func (f *Fake) apply(ctx context.Context, tx *Transaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	parts := tx.parts()
	for i, part := range parts {
		if err := f.commit(part); err != nil {
			if len(parts) > 1 {
				return fmt.Errorf("commit %d of %d: %w", i+1, len(parts), err)
			}
			return err
		}
	}
	return nil
}

// commit applies one commit, all or nothing.
func (f *Fake) commit(tx *Transaction) error {
	a := &fakeApply{f: f, id: tableID{tx.Family, tx.Table}}
	for i := range tx.ops {
		if err := a.op(&tx.ops[i]); err != nil {
			a.rollback()
			return fmt.Errorf("transaction operation %d: %w", i, err)
		}
	}
	if t, ok := f.tables[a.id]; ok && !f.noCommit {
		if err := t.validate(tx.Family); err != nil {
			a.rollback()
			return fmt.Errorf("transaction commit: %w", err)
		}
	}
	f.applied++
	f.gen++
	return nil
}

// fakeApply applies the operations of one transaction in place, recording
// how to undo each change.
type fakeApply struct {
	f    *Fake
	id   tableID
	undo []func()
}

func (a *fakeApply) rollback() {
	for i := len(a.undo) - 1; i >= 0; i-- {
		a.undo[i]()
	}
}

func (a *fakeApply) op(o *op) error {
	f := a.f
	t := f.tables[a.id]
	if o.kind == opAddTable {
		if t == nil {
			f.tables[a.id] = &fakeTable{chains: map[string]*fakeChain{}, sets: map[string]*fakeSet{}}
			a.undo = append(a.undo, func() { delete(f.tables, a.id) })
		}
		return nil
	}
	if t == nil {
		return fmt.Errorf("table %s %s: %w", ipKeyword(a.id.family), a.id.name, syscall.ENOENT)
	}
	switch o.kind {
	case opDeleteTable:
		delete(f.tables, a.id)
		a.undo = append(a.undo, func() { f.tables[a.id] = t })
	case opAddChain:
		return a.addChain(t, o.chain)
	case opFlushChain, opDeleteChain:
		c, ok := t.chains[o.name]
		if !ok {
			return fmt.Errorf("chain %q: %w", o.name, syscall.ENOENT)
		}
		if o.kind == opDeleteChain && c.refs > 0 {
			return fmt.Errorf("delete chain %q: %d references: %w", o.name, c.refs, syscall.EBUSY)
		}
		a.flush(t, c)
		if o.kind == opDeleteChain {
			delete(t.chains, o.name)
			a.undo = append(a.undo, func() { t.chains[o.name] = c })
		}
	case opAddRule:
		return a.addRule(t, o.name, o.rule)
	case opAddSet:
		return a.addSet(t, o.set)
	case opDeleteSet:
		s, ok := t.sets[o.name]
		if !ok {
			return fmt.Errorf("set %q: %w", o.name, syscall.ENOENT)
		}
		if s.refs > 0 {
			return fmt.Errorf("delete set %q: %d references: %w", o.name, s.refs, syscall.EBUSY)
		}
		for _, v := range s.elems {
			a.unref(t, v.verdict)
		}
		delete(t.sets, o.name)
		a.undo = append(a.undo, func() { t.sets[o.name] = s })
	case opAddElements:
		return a.addElements(t, o)
	case opDeleteElements:
		s, ok := t.sets[o.set.Name]
		if !ok {
			return fmt.Errorf("set %q: %w", o.set.Name, syscall.ENOENT)
		}
		for _, p := range o.elems {
			e := p.element()
			v, ok := s.elems[e.Key]
			if !ok {
				return fmt.Errorf("set %q: element %s: %w", s.spec.Name, e.Key.string(s.spec.Key), syscall.ENOENT)
			}
			delete(s.elems, e.Key)
			a.unref(t, v.verdict)
			a.undo = append(a.undo, func() { s.elems[e.Key] = v })
		}
	default:
		return fmt.Errorf("operation %d: %w", o.kind, syscall.EINVAL)
	}
	return nil
}

func checkName(kind, name string) error {
	if name == "" || len(name) > nameMax {
		return fmt.Errorf("%s name %q: length %d, want 1 to %d: %w", kind, name, len(name), nameMax, syscall.ENAMETOOLONG)
	}
	return nil
}

func (a *fakeApply) addChain(t *fakeTable, c *Chain) error {
	if err := checkName("chain", c.Name); err != nil {
		return err
	}
	if have, ok := t.chains[c.Name]; ok {
		if !baseEqual(have.base, c.Base) {
			return fmt.Errorf("chain %q exists with another hook: %w", c.Name, syscall.EEXIST)
		}
		return nil
	}
	var base *BaseChain
	if c.Base != nil {
		b := *c.Base
		base = &b
	}
	t.chains[c.Name] = &fakeChain{base: base}
	a.undo = append(a.undo, func() { delete(t.chains, c.Name) })
	return nil
}

// flush removes c's rules, releasing their references.
func (a *fakeApply) flush(t *fakeTable, c *fakeChain) {
	rules := c.rules
	for i := range rules {
		a.refRule(t, &rules[i], -1)
	}
	c.rules = nil
	a.undo = append(a.undo, func() { c.rules = rules })
}

// refRule adds d to the reference counts of what r refers to, which the
// caller has checked exists.
func (a *fakeApply) refRule(t *fakeTable, r *Rule, d int) {
	r.refs(func(name string) {
		c := t.chains[name]
		c.refs += d
		a.undo = append(a.undo, func() { c.refs -= d })
	}, func(name string) {
		s := t.sets[name]
		s.refs += d
		a.undo = append(a.undo, func() { s.refs -= d })
	})
}

func (a *fakeApply) unref(t *fakeTable, v Verdict) {
	if v.Kind == Jump || v.Kind == Goto {
		c := t.chains[v.Chain]
		c.refs--
		a.undo = append(a.undo, func() { c.refs++ })
	}
}

func (a *fakeApply) addRule(t *fakeTable, chain string, r *Rule) error {
	c, ok := t.chains[chain]
	if !ok {
		return fmt.Errorf("add rule to chain %q: %w", chain, syscall.ENOENT)
	}
	if err := checkRule(t, a.id.family, r); err != nil {
		return fmt.Errorf("add rule to chain %q: %q: %w", chain, r, err)
	}
	c.rules = append(c.rules, *r)
	a.undo = append(a.undo, func() { c.rules = c.rules[:len(c.rules)-1] })
	a.refRule(t, r, +1)
	return nil
}

// checkRule validates r's references and types against table t of family.
func checkRule(t *fakeTable, family backends.Family, r *Rule) error {
	var err error
	r.refs(func(name string) {
		switch c, ok := t.chains[name]; {
		case err != nil:
		case !ok:
			err = fmt.Errorf("chain %q: %w", name, syscall.ENOENT)
		case c.base != nil:
			err = fmt.Errorf("jump to base chain %q: %w", name, syscall.EOPNOTSUPP)
		}
	}, func(name string) {
		if _, ok := t.sets[name]; !ok && err == nil {
			err = fmt.Errorf("set %q: %w", name, syscall.ENOENT)
		}
	})
	if err != nil {
		return err
	}
	addr := addrKey(family)
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case AddrMatch:
			if e.Family != family || len(e.Prefixes) == 0 {
				return fmt.Errorf("address match %q: %w", e, syscall.EINVAL)
			}
			for _, p := range e.Prefixes {
				if !p.IsValid() || p.Addr().Is4() != (family == backends.IPv4) {
					return fmt.Errorf("address %s: %w", p, syscall.EINVAL)
				}
			}
		case SetMatch:
			s := t.sets[e.Set]
			if e.Family != family || s.spec.isMap() || !slices.Equal(s.spec.Key, []KeyType{addr}) {
				return fmt.Errorf("lookup in @%s of type %s: %w", e.Set, s.spec.typeString(), syscall.EINVAL)
			}
		case SetUpdate:
			s := t.sets[e.Set]
			if e.Family != family || !s.spec.Dynamic || !slices.Equal(s.spec.Key, []KeyType{addr}) {
				return fmt.Errorf("update of @%s: %w", e.Set, syscall.EINVAL)
			}
		case VMap:
			s := t.sets[e.Map]
			if e.Family != family || !s.spec.Map || !slices.Equal(s.spec.Key, keyTypes(addr, e.Key)) ||
				(slices.Contains(e.Key, KeyNumgen) && e.Mod == 0) {
				return fmt.Errorf("vmap lookup in @%s of type %s: %w", e.Map, s.spec.typeString(), syscall.EINVAL)
			}
		case KeySetMatch:
			s := t.sets[e.Set]
			if e.Family != family || s.spec.isMap() || len(e.Key) == 0 || slices.Contains(e.Key, KeyNumgen) ||
				!slices.Equal(s.spec.Key, keyTypes(addr, e.Key)) {
				return fmt.Errorf("lookup in @%s of type %s: %w", e.Set, s.spec.typeString(), syscall.EINVAL)
			}
		case DNATMap:
			s := t.sets[e.Map]
			if e.Family != family || !slices.Equal(s.spec.Data, []KeyType{addr, KeyInetService}) ||
				!slices.Equal(s.spec.Key, keyTypes(addr, e.Key)) || (slices.Contains(e.Key, KeyNumgen) && e.Mod == 0) {
				return fmt.Errorf("dnat map lookup in @%s of type %s: %w", e.Map, s.spec.typeString(), syscall.EINVAL)
			}
		case AddrPairMatch:
			s := t.sets[e.Set]
			if e.Family != family || s.spec.isMap() || !slices.Equal(s.spec.Key, []KeyType{addr, addr}) {
				return fmt.Errorf("lookup in @%s of type %s: %w", e.Set, s.spec.typeString(), syscall.EINVAL)
			}
		case Numgen:
			next := uint32(0)
			for _, tg := range e.Targets {
				if tg.Lo != next || tg.Hi < tg.Lo {
					return fmt.Errorf("%q: targets do not cover 0-%d in order: %w", e, e.Mod-1, syscall.EINVAL)
				}
				next = tg.Hi + 1
			}
			if e.Mod == 0 || next != e.Mod {
				return fmt.Errorf("%q: targets do not cover 0-%d: %w", e, e.Mod-1, syscall.EINVAL)
			}
		case DNAT:
			if e.Family != family || !e.To.IsValid() || e.To.Addr().Is4() != (family == backends.IPv4) {
				return fmt.Errorf("%q: %w", e, syscall.EINVAL)
			}
		case Verdict:
			if e.Kind == VerdictNone {
				return fmt.Errorf("empty verdict: %w", syscall.EINVAL)
			}
		}
	}
	return nil
}

func (a *fakeApply) addSet(t *fakeTable, s *Set) error {
	if err := checkName("set", s.Name); err != nil {
		return err
	}
	if len(s.Key) == 0 {
		return fmt.Errorf("set %q: no key type: %w", s.Name, syscall.EINVAL)
	}
	if have, ok := t.sets[s.Name]; ok {
		h, w := have.spec, *s
		h.Comment, w.Comment = "", ""
		if !h.equal(&w) {
			return fmt.Errorf("set %q exists with another definition: %w", s.Name, syscall.EEXIST)
		}
		return nil
	}
	t.sets[s.Name] = &fakeSet{spec: *s, elems: map[ElemKey]elemValue{}}
	a.undo = append(a.undo, func() { delete(t.sets, s.Name) })
	return nil
}

func (a *fakeApply) addElements(t *fakeTable, o *op) error {
	s, ok := t.sets[o.set.Name]
	if !ok {
		return fmt.Errorf("set %q: %w", o.set.Name, syscall.ENOENT)
	}
	for _, p := range o.elems {
		e := p.element()
		if err := checkKey(a.id.family, &s.spec, e.Key); err != nil {
			return fmt.Errorf("set %q: %w", s.spec.Name, err)
		}
		switch {
		case !s.spec.Map && e.Value.Kind != VerdictNone:
			return fmt.Errorf("set %q: element with a verdict: %w", s.spec.Name, syscall.EINVAL)
		case s.spec.Map && e.Value.Kind == VerdictNone:
			return fmt.Errorf("map %q: element without a verdict: %w", s.spec.Name, syscall.EINVAL)
		case len(s.spec.Data) == 0 && e.To.IsValid():
			return fmt.Errorf("set %q: element with data: %w", s.spec.Name, syscall.EINVAL)
		case len(s.spec.Data) > 0 && (!e.To.IsValid() || e.To.Addr().Is4() != (a.id.family == backends.IPv4)):
			return fmt.Errorf("map %q: element without an %s address and port: %w", s.spec.Name, a.id.family.String(), syscall.EINVAL)
		}
		if e.Value.Kind == Jump || e.Value.Kind == Goto {
			c, ok := t.chains[e.Value.Chain]
			switch {
			case !ok:
				return fmt.Errorf("map %q: chain %q: %w", s.spec.Name, e.Value.Chain, syscall.ENOENT)
			case c.base != nil:
				return fmt.Errorf("map %q: base chain %q: %w", s.spec.Name, e.Value.Chain, syscall.EOPNOTSUPP)
			}
		}
		if v, ok := s.elems[e.Key]; ok {
			if v != e.value() {
				return fmt.Errorf("set %q: element %s exists: %w", s.spec.Name, e.Key.string(s.spec.Key), syscall.EEXIST)
			}
			continue
		}
		s.elems[e.Key] = e.value()
		a.undo = append(a.undo, func() { delete(s.elems, e.Key) })
		if e.Value.Kind == Jump || e.Value.Kind == Goto {
			c := t.chains[e.Value.Chain]
			c.refs++
			a.undo = append(a.undo, func() { c.refs-- })
		}
	}
	return nil
}

// keyTypes returns the key type of a lookup of the fields key.
func keyTypes(addr KeyType, key []KeyField) []KeyType {
	want := make([]KeyType, len(key))
	for i, k := range key {
		switch k {
		case KeyDAddr:
			want[i] = addr
		case KeyL4Proto:
			want[i] = KeyInetProto
		case KeyTHDPort:
			want[i] = KeyInetService
		case KeyNumgen:
			want[i] = KeyBucket
		}
	}
	return want
}

// checkKey checks that k has the fields of the set's key type, and only
// those.
func checkKey(family backends.Family, s *Set, k ElemKey) error {
	var want ElemKey
	addrs := 0
	for _, t := range s.Key {
		switch t {
		case KeyIPv4Addr, KeyIPv6Addr:
			a := k.Addr
			if addrs++; addrs == 2 {
				a = k.Addr2
			}
			if !a.IsValid() || a.Is4() != (t == KeyIPv4Addr) {
				return fmt.Errorf("key %s: not %s: %w", k.string(s.Key), t, syscall.EINVAL)
			}
			if addrs == 2 {
				want.Addr2 = a
			} else {
				want.Addr = a
			}
		case KeyInetProto:
			want.Proto = k.Proto
		case KeyInetService:
			want.Port = k.Port
		case KeyBucket:
			want.Bucket = k.Bucket
		}
	}
	if want != k {
		return fmt.Errorf("key %+v has fields outside %s: %w", k, s.typeString(), syscall.EINVAL)
	}
	return nil
}

// validate checks what the kernel checks when a transaction commits: from
// every base chain, the chains it reaches form no loop and hold only
// statements allowed at its hook and type.
func (t *fakeTable) validate(family backends.Family) error {
	for name, c := range t.chains {
		if c.base == nil {
			continue
		}
		if err := t.walk(name, c.base, map[string]bool{}, map[string]bool{}); err != nil {
			return fmt.Errorf("from base chain %q: %w", name, err)
		}
	}
	return nil
}

// walk visits chain name, reached from a base chain with spec base;
// onPath holds the chains of the current path, done those checked.
func (t *fakeTable) walk(name string, base *BaseChain, onPath, done map[string]bool) error {
	if onPath[name] {
		return fmt.Errorf("chain %q: loop: %w", name, syscall.ELOOP)
	}
	if done[name] {
		return nil
	}
	onPath[name] = true
	defer delete(onPath, name)
	c := t.chains[name]
	for i := range c.rules {
		r := &c.rules[i]
		for _, e := range r.Exprs {
			var ok bool
			switch e.(type) {
			case DNAT, DNATMap:
				ok = base.Type == ChainNAT && (base.Hook == HookPrerouting || base.Hook == HookOutput)
			case Masquerade:
				ok = base.Type == ChainNAT && base.Hook == HookPostrouting
			case Reject:
				ok = base.Hook == HookInput || base.Hook == HookForward || base.Hook == HookOutput
			default:
				ok = true
			}
			if !ok {
				return fmt.Errorf("chain %q: %q not allowed from a %s %s chain: %w", name, r, base.Type, base.Hook, syscall.EOPNOTSUPP)
			}
		}
		var err error
		r.refs(func(next string) {
			if err == nil {
				err = t.walk(next, base, onPath, done)
			}
		}, func(set string) {
			s := t.sets[set]
			if !s.spec.Map || err != nil {
				return
			}
			for _, v := range s.elems {
				if err == nil && (v.verdict.Kind == Jump || v.verdict.Kind == Goto) {
					err = t.walk(v.verdict.Chain, base, onPath, done)
				}
			}
		})
		if err != nil {
			return err
		}
	}
	done[name] = true
	return nil
}
