package nftables

import (
	"fmt"
	"slices"
	"strings"

	"github.com/wasp-proxy/wasp/backends"
)

// Transaction is a batch of operations on one table that the kernel
// applies atomically: all or nothing. A Transaction from Diff may be
// several commits in a row (see Diff), each atomic: a failed one leaves
// the commits before it applied.
type Transaction struct {
	Family backends.Family
	Table  string
	ops    []op
	// commits are the indices of ops where a new commit starts, after
	// the first; empty: one commit.
	commits []int
}

// parts returns tx's commits, one Transaction each.
func (tx *Transaction) parts() []*Transaction {
	if len(tx.commits) == 0 {
		return []*Transaction{tx}
	}
	out := make([]*Transaction, 0, len(tx.commits)+1)
	from := 0
	for _, to := range append(slices.Clone(tx.commits), len(tx.ops)) {
		out = append(out, &Transaction{Family: tx.Family, Table: tx.Table, ops: tx.ops[from:to:to]})
		from = to
	}
	return out
}

// commit starts a new commit at the next operation, unless the current
// one is empty.
func (tx *Transaction) commit() {
	last := 0
	if n := len(tx.commits); n > 0 {
		last = tx.commits[n-1]
	}
	if len(tx.ops) > last {
		tx.commits = append(tx.commits, len(tx.ops))
	}
}

type opKind uint8

const (
	opAddTable opKind = iota + 1
	opDeleteTable
	opAddChain
	opFlushChain
	opDeleteChain
	opAddRule
	opAddSet
	opDeleteSet
	opAddElements
	opDeleteElements
)

// op is one operation. Which fields are set depends on kind: chain for
// opAddChain; name (the chain) and rule for opAddRule; name for the flush
// and delete of chains and sets; set for opAddSet and the element
// operations, with elems: the elements in their fragments (a Ruleset's
// are never modified), or packed for the operation.
type op struct {
	kind  opKind
	name  string
	chain *Chain
	rule  *Rule
	set   *Set
	elems []*elem
}

// Len returns the number of operations.
func (tx *Transaction) Len() int { return len(tx.ops) }

// String renders the transaction as nft commands, one per line, in order.
func (tx *Transaction) String() string {
	var b strings.Builder
	t := ipKeyword(tx.Family) + " " + tx.Table
	for i, o := range tx.ops {
		if slices.Contains(tx.commits, i) {
			b.WriteString("# commit\n")
		}
		switch o.kind {
		case opAddTable:
			fmt.Fprintf(&b, "add table %s\n", t)
		case opDeleteTable:
			fmt.Fprintf(&b, "delete table %s\n", t)
		case opAddChain:
			if o.chain.Base != nil {
				fmt.Fprintf(&b, "add chain %s %s { %s }\n", t, o.chain.Name, o.chain.Base)
			} else {
				fmt.Fprintf(&b, "add chain %s %s\n", t, o.chain.Name)
			}
		case opFlushChain:
			fmt.Fprintf(&b, "flush chain %s %s\n", t, o.name)
		case opDeleteChain:
			fmt.Fprintf(&b, "delete chain %s %s\n", t, o.name)
		case opAddRule:
			fmt.Fprintf(&b, "add rule %s %s %s\n", t, o.name, o.rule)
		case opAddSet:
			kind := "set"
			if o.set.isMap() {
				kind = "map"
			}
			fmt.Fprintf(&b, "add %s %s %s { type %s;", kind, t, o.set.Name, o.set.typeString())
			switch {
			case o.set.Dynamic && o.set.Timeout > 0:
				b.WriteString(" flags dynamic,timeout;")
			case o.set.Dynamic:
				b.WriteString(" flags dynamic;")
			case o.set.Timeout > 0:
				b.WriteString(" flags timeout;")
			}
			if o.set.Timeout > 0 {
				fmt.Fprintf(&b, " timeout %ds;", o.set.Timeout)
			}
			if o.set.Comment != "" {
				fmt.Fprintf(&b, " comment %q;", o.set.Comment)
			}
			b.WriteString(" }\n")
		case opDeleteSet:
			kind := "set"
			if o.set != nil && o.set.isMap() {
				kind = "map"
			}
			fmt.Fprintf(&b, "delete %s %s %s\n", kind, t, o.name)
		case opAddElements, opDeleteElements:
			verb := "add"
			if o.kind == opDeleteElements {
				verb = "delete"
			}
			fmt.Fprintf(&b, "%s element %s %s { ", verb, t, o.set.Name)
			for i, p := range o.elems {
				e := p.element()
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(e.Key.string(o.set.Key))
				if o.set.isMap() && o.kind == opAddElements {
					b.WriteString(" : " + e.value().string(o.set))
				}
			}
			b.WriteString(" }\n")
		}
	}
	return b.String()
}

func (tx *Transaction) add(o op) { tx.ops = append(tx.ops, o) }
