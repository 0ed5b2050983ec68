package nftables

import (
	"context"
	"fmt"
	"syscall"

	"github.com/wasp-proxy/wasp/backends"
)

// What a drift check reads from the Fake, and how tests change a table
// behind its Backend's back, as an operator's nft command would. The
// changes are not validated as a transaction is, and each counts as a
// commit (the ruleset generation moves).

func (f *Fake) generation(ctx context.Context) (uint32, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, nil
}

func (f *Fake) rules(ctx context.Context, family backends.Family, table string, fn func(chain string, tag uint64)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tables[tableID{family, table}]
	if !ok {
		return fmt.Errorf("table %s %s: %w", ipKeyword(family), table, syscall.ENOENT)
	}
	for _, name := range sortedKeys(t.chains) {
		for i := range t.chains[name].rules {
			fn(name, ruleTag(&t.chains[name].rules[i]))
		}
	}
	return nil
}

func (f *Fake) elements(ctx context.Context, family backends.Family, table string, s *Set, fn func(Element)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.set(family, table, s.Name)
	if err != nil {
		return err
	}
	for k, v := range fs.elems {
		fn(Element{Set: s.Name, Key: k, Value: v.verdict, To: v.to})
	}
	return nil
}

func (f *Fake) set(family backends.Family, table, name string) (*fakeSet, error) {
	t, ok := f.tables[tableID{family, table}]
	if !ok {
		return nil, fmt.Errorf("table %s %s: %w", ipKeyword(family), table, syscall.ENOENT)
	}
	s, ok := t.sets[name]
	if !ok {
		return nil, fmt.Errorf("set %q: %w", name, syscall.ENOENT)
	}
	return s, nil
}

// tamper runs fn on a table, outside any transaction, as one commit.
func (f *Fake) tamper(family backends.Family, table string, fn func(a *fakeApply, t *fakeTable) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := tableID{family, table}
	t, ok := f.tables[id]
	if !ok {
		return fmt.Errorf("table %s %s: %w", ipKeyword(family), table, syscall.ENOENT)
	}
	a := &fakeApply{f: f, id: id}
	if err := fn(a, t); err != nil {
		a.rollback()
		return err
	}
	f.gen++
	return nil
}

// FlushChain deletes every rule of a chain, as `nft flush chain` does.
func (f *Fake) FlushChain(family backends.Family, table, chain string) error {
	return f.tamper(family, table, func(a *fakeApply, t *fakeTable) error {
		return a.op(&op{kind: opFlushChain, name: chain})
	})
}

// DeleteRule deletes a chain's i-th rule (from 0), as `nft delete rule`
// does.
func (f *Fake) DeleteRule(family backends.Family, table, chain string, i int) error {
	return f.tamper(family, table, func(a *fakeApply, t *fakeTable) error {
		c, err := ruleAt(t, chain, i)
		if err != nil {
			return err
		}
		a.refRule(t, &c.rules[i], -1)
		c.rules = append(c.rules[:i:i], c.rules[i+1:]...)
		return nil
	})
}

// ruleAt returns chain, which has an i-th rule.
func ruleAt(t *fakeTable, chain string, i int) (*fakeChain, error) {
	c, ok := t.chains[chain]
	if !ok {
		return nil, fmt.Errorf("chain %q: %w", chain, syscall.ENOENT)
	}
	if i < 0 || i >= len(c.rules) {
		return nil, fmt.Errorf("chain %q: rule %d of %d: %w", chain, i, len(c.rules), syscall.ENOENT)
	}
	return c, nil
}

// ReplaceRule replaces a chain's i-th rule (from 0) with "accept", as
// `nft replace rule` does.
func (f *Fake) ReplaceRule(family backends.Family, table, chain string, i int) error {
	return f.tamper(family, table, func(a *fakeApply, t *fakeTable) error {
		c, err := ruleAt(t, chain, i)
		if err != nil {
			return err
		}
		a.refRule(t, &c.rules[i], -1)
		rules := append([]Rule(nil), c.rules...)
		rules[i] = Rule{Exprs: []Expr{Verdict{Kind: Accept}}}
		c.rules = rules
		return nil
	})
}

// AddChain adds an empty regular chain, as `nft add chain` does.
func (f *Fake) AddChain(family backends.Family, table, chain string) error {
	return f.tamper(family, table, func(a *fakeApply, t *fakeTable) error {
		return a.addChain(t, &Chain{Name: chain})
	})
}

// DeleteElement deletes the element of a set or map whose key prints as
// key in Dump (such as "10.96.0.10 . tcp . 80"), as `nft delete element`
// does.
func (f *Fake) DeleteElement(family backends.Family, table, set, key string) error {
	return f.tamper(family, table, func(a *fakeApply, t *fakeTable) error {
		s, ok := t.sets[set]
		if !ok {
			return fmt.Errorf("set %q: %w", set, syscall.ENOENT)
		}
		for k, v := range s.elems {
			if k.string(s.spec.Key) == key {
				return a.op(&op{kind: opDeleteElements, set: &s.spec, elems: packElems(Element{Set: set, Key: k, Value: v.verdict, To: v.to})})
			}
		}
		return fmt.Errorf("set %q: element %s: %w", set, key, syscall.ENOENT)
	})
}
