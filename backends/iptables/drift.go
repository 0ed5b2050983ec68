package iptables

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
)

// CheckDrift reads both tables back with iptables-save and compares them
// with what the last successful Sync programmed (backends.DriftChecker),
// rule by rule, as a full sync does (readback.go): a chain of wasp's
// missing; one whose rules differ, as when a rule was deleted, changed or
// added, or the chain flushed; a chain of wasp's the plan lacks; a jump
// from a built-in chain missing. So a hand-deleted DNAT rule of one
// service port is found, not only a firewall reload that took the canary
// chain (ChainCanary) with the rest. Entries of the hairpin set are not
// compared; each full sync reconciles them.
//
// On a difference the Backend forgets what it programmed, so the next
// Sync is a full one, which writes only the chains that differ. It costs
// two iptables-save calls and a comparison of every rule: a rule line
// the same as one a check found equal to the same planned rule is
// compared by hash (verifiedChain), the others parsed and put in
// canonical form as a full sync does. Nothing is
// checked before the first Sync or after a failed one, whose next Sync is
// full anyway. The read-back runs without the Backend's lock, so Syncs
// are not held up by it; a check that a Sync overlapped concludes nothing,
// and the next one holds the lock, so that constant churn delays a repair
// by one check at most.
func (b *Backend) CheckDrift(ctx context.Context) (*backends.Drift, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	if b.last == nil {
		return nil, nil
	}
	b.stats.driftReadbacks++
	rs, known := b.last, b.verified // a Sync replaces them, never modifies them
	locked := b.readbackLocked
	b.readbackLocked = false
	if !locked {
		b.mu.Unlock()
	}
	d, verified, err := b.compare(ctx, rs, known)
	if !locked {
		b.mu.Lock()
	}
	if err == nil {
		// True whatever happened since: a line the same as a rule
		// stays so.
		b.verified = verified
	}
	switch {
	case b.closed:
		return nil, errClosed
	case b.last != rs:
		// A Sync (or a failure, or Cleanup) came between: what was
		// read may be from before or after it.
		b.readbackLocked = b.last != nil
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("iptables %s: drift check: %w", b.cfg.family.String(), err)
	case !d.Empty():
		b.last, b.hairpin = nil, nil
		return d, nil
	}
	klog.FromContext(ctx).V(4).Info("Drift check: the tables match", "ipFamily", b.cfg.family.String())
	return nil, nil
}

// compare reads both tables back and returns how they differ from rs,
// and the chains it found the same (verifiedChain). known are those of
// the last check, whose lines it compares by hash.
func (b *Backend) compare(ctx context.Context, rs *Ruleset, known map[string]verifiedChain) (*backends.Drift, map[string]verifiedChain, error) {
	all := fullInput(rs)
	wanted := map[string]bool{}
	for _, cs := range [][]*Chain{all.nat, all.filter} {
		for _, c := range cs {
			wanted[c.Name] = true
		}
	}
	d := &backends.Drift{}
	verified := make(map[string]verifiedChain, len(known))
	for _, t := range []struct {
		table string
		plan  []*Chain
	}{{TableNAT, all.nat}, {TableFilter, all.filter}} {
		saved := newSavedTable(t.plan, wanted)
		saved.recordLines(known)
		if err := saveLines(ctx, b.k, t.table, saved.line); err != nil {
			return nil, nil, fmt.Errorf("save table %s: %w", t.table, err)
		}
		if saved.err != nil {
			return nil, nil, fmt.Errorf("table %s: %w", t.table, saved.err)
		}
		saved.verified(verified)
		for _, c := range t.plan {
			if !saved.same(c) {
				saved.plan[c.Name].drift(d, t.table)
			}
		}
		for _, name := range saved.stale {
			d.Add(backends.DriftChain, 1, fmt.Sprintf("table %s: chain %s not programmed by wasp", t.table, name))
		}
		for _, j := range b.cfg.jumps() {
			if j.table == t.table && !saved.hasJump(j) {
				d.Add(backends.DriftRule, 1, fmt.Sprintf("table %s: chain %s: jump to %s missing", t.table, j.from, j.to))
			}
		}
	}
	return d, verified, nil
}

// drift adds to d how the table's chain differs from the plan's: missing,
// or its rules, counted as the difference in their number (at least one:
// a rule changed in place).
func (c *savedChain) drift(d *backends.Drift, table string) {
	name, want := c.want.Name, len(c.want.Rules)
	if !c.declared {
		d.Add(backends.DriftChain, 1, fmt.Sprintf("table %s: chain %s missing", table, name))
		return
	}
	n := max(want-c.saved, c.saved-want, 1)
	example := fmt.Sprintf("table %s: chain %s: %d rules, want %d", table, name, c.saved, want)
	if c.rules < want {
		// The first rule that differs, or the first one missing.
		example += fmt.Sprintf("; rule %d differs, want: -A %s %s", c.rules+1, name, c.want.Rules[c.rules])
	}
	d.Add(backends.DriftRule, n, example)
}
