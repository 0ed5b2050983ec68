package iptables

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
)

// ErrInvalidState is wrapped by the error Sync returns for a State the
// Backend cannot program; the dataplane is left as it was.
var ErrInvalidState = backends.ErrInvalidState

// errClosed is returned by Sync, Cleanup and CheckDrift after Close.
var errClosed = fmt.Errorf("iptables: %w", backends.ErrClosed)

// ErrRestore is wrapped by the error of a Sync whose iptables-restore
// failed; the error names the failing line. The tables keep their
// previous rules (each table's section commits whole or not at all), and
// the next Sync is a full one.
var ErrRestore = errors.New("iptables-restore failed")

// ErrPartialRestore is wrapped, besides ErrRestore, when the failed
// restore was a partial sync (upstream counts those apart).
var ErrPartialRestore = errors.New("partial sync")

// DefaultFullSyncPeriod is how often a Sync is a full one when
// Opts.FullSyncPeriod is 0, as upstream.
const DefaultFullSyncPeriod = time.Hour

// Opts configures a Backend.
type Opts struct {
	// Family is the IP family the Backend programs (iptables for IPv4,
	// ip6tables for IPv6). Required.
	Family backends.Family
	// NetNS is the path of a network namespace to program instead of the
	// current one, such as /run/netns/foo. Optional.
	NetNS string
	// MasqueradeBit is the bit of the packet mark that asks for
	// masquerading, 0 to 31. Optional: 0 means backends.DefaultMasqueradeBit.
	MasqueradeBit int
	// LocalhostNodePorts makes IPv4 NodePorts answer on 127.0.0.0/8 too
	// (upstream's iptables.localhostNodePorts), when NodePorts answer on
	// every address or on an IPv4 loopback one; it sets route_localnet.
	// Optional.
	LocalhostNodePorts bool
	// TCPBeLiberal says that the node's nf_conntrack_tcp_be_liberal is
	// set, so conntrack INVALID packets are not dropped. Optional.
	TCPBeLiberal bool
	// Variant is the iptables variant to use, xtables.NFT or
	// xtables.Legacy. Optional: "" detects the one the node uses
	// (xtables.Detect; New only).
	Variant xtables.Variant
	// FullSyncPeriod is how often a Sync rewrites every chain rather
	// than the changed ones. Optional: 0 means DefaultFullSyncPeriod.
	FullSyncPeriod time.Duration
}

func (o Opts) config() (config, error) {
	cfg := config{family: o.Family, localhostNodePorts: o.LocalhostNodePorts, tcpBeLiberal: o.TCPBeLiberal}
	if o.Family != backends.IPv4 && o.Family != backends.IPv6 {
		return cfg, fmt.Errorf("iptables: family %d, want 4 or 6", o.Family)
	}
	bit := o.MasqueradeBit
	if bit == 0 {
		bit = backends.DefaultMasqueradeBit
	}
	if bit < 0 || bit > 31 {
		return cfg, fmt.Errorf("iptables: masquerade bit %d, want 0 to 31", o.MasqueradeBit)
	}
	if o.FullSyncPeriod < 0 {
		return cfg, fmt.Errorf("iptables: full sync period %s, want >= 0", o.FullSyncPeriod)
	}
	cfg.mark = 1 << uint(bit)
	return cfg, nil
}

// SyncInfo is what the last Sync did, for metrics.
type SyncInfo struct {
	// Full is whether it rewrote every chain.
	Full bool
	// Rules are the rules of wasp's chains in each table ("filter",
	// "nat") after the Sync.
	Rules map[string]int
	// Written are the rules the Sync's restore wrote in each table: all
	// of them in a full Sync, those of the chains whose rules changed in
	// a partial one, none when nothing changed (upstream's iptables_last
	// metric).
	Written map[string]int
}

// Backend programs one IP family's iptables filter and nat tables with
// iptables-restore. It keeps what it last programmed and rewrites only
// the chains of changed service ports; see the package documentation. It
// is safe for concurrent use.
type Backend struct {
	mu      sync.Mutex
	cfg     config
	period  time.Duration
	k       kernel
	planner *planner
	last    *Ruleset // what is programmed; nil: not known, the next Sync is full
	// hairpin are the entries of the hairpin set with last, each with
	// the number of its service ports that want it; nil with last.
	hairpin  map[entryKey]int32
	lastFull time.Time
	info     SyncInfo
	closed   bool
	// readbackLocked: the last drift check overlapped a Sync, so the
	// next one reads back holding mu (CheckDrift).
	readbackLocked bool
	// verified are the chains the last drift check found the same as
	// the plan, by name (CheckDrift).
	verified map[string]verifiedChain
	now      func() time.Time
	stats    stats
}

var (
	_ backends.Backend      = (*Backend)(nil)
	_ backends.DriftChecker = (*Backend)(nil)
)

// stats count what the Backend did, for tests.
type stats struct {
	syncs, full, failures int
	written               int // chains written by the last restore
	stale                 int // chains deleted by the last restore
	skipped               int // syncs with nothing to write, and no restore
	jumps                 int // jump rules the last full sync found missing and added
	setAdds, setDels      int // hairpin set entries the last sync added and deleted
	driftReadbacks        int // drift checks that read the tables back
}

// NewWithFake returns a Backend that programs f, an in-memory iptables of
// the Backend's family, instead of the kernel: for tests of code that
// uses a Backend, and to see with f.Dump what it would program.
// Opts.NetNS and Opts.Variant are ignored.
func NewWithFake(o Opts, f *Fake) (*Backend, error) {
	return newBackend(o, f)
}

func newBackend(o Opts, k kernel) (*Backend, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	cfg.randomFully = k.hasRandomFully()
	period := o.FullSyncPeriod
	if period == 0 {
		period = DefaultFullSyncPeriod
	}
	return &Backend{cfg: cfg, period: period, k: k, planner: newPlanner(cfg), now: time.Now}, nil
}

// LastSync returns what the last successful Sync did.
func (b *Backend) LastSync() SyncInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	info := b.info
	info.Rules, info.Written = maps.Clone(b.info.Rules), maps.Clone(b.info.Written)
	return info
}

// Sync makes the tables match s in one iptables-restore. A full sync
// (the first, after a failure, Cleanup or drift, and every
// FullSyncPeriod) ensures the jump rules of the built-in chains, writes
// every chain and deletes every chain of wasp's the plan lacks; a partial
// sync writes the fixed chains and the service chains whose rules
// changed, and deletes the chains of service ports that changed or left,
// or runs nothing when no rule changed. On error the tables keep their
// rules and the next Sync is full.
//
// Its SyncResult says whether the Sync was full or partial, the rules of
// wasp's chains by table after it and the rules its restore wrote (as
// LastSync), or, on error, whether a partial restore failed (SyncPartial)
// or anything else (SyncFull, as the next Sync is), and FailureApply
// when iptables-restore failed (ErrRestore).
func (b *Backend) Sync(ctx context.Context, s *backends.State) (backends.SyncResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.sync(ctx, s); err != nil {
		r := backends.SyncResult{Kind: backends.SyncFull}
		if errors.Is(err, ErrPartialRestore) {
			r.Kind = backends.SyncPartial
		}
		if errors.Is(err, ErrRestore) {
			r.Failure = backends.FailureApply
		}
		return r, err
	}
	r := backends.SyncResult{Kind: backends.SyncPartial, Objects: maps.Clone(b.info.Rules), Written: maps.Clone(b.info.Written)}
	if b.info.Full {
		r.Kind = backends.SyncFull
	}
	return r, nil
}

// sync is Sync, with mu held.
func (b *Backend) sync(ctx context.Context, s *backends.State) error {
	if b.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validate(b.cfg.family, s); err != nil {
		return err
	}
	b.stats.syncs++
	rs := b.planner.plan(s)
	log := klog.FromContext(ctx).WithValues("ipFamily", b.cfg.family.String())
	full := b.last == nil || b.now().Sub(b.lastFull) >= b.period

	var (
		in       *restoreInput
		jumps    []jump
		add, del []HairpinEntry
		hairpin  = b.hairpin
	)
	if full {
		var err error
		if in, jumps, err = b.prepareFull(ctx, rs, b.planner.localhostNodePorts(s)); err != nil {
			b.fail()
			return err
		}
		hairpin = rs.hairpinCounts()
		if add, del, err = b.reconcileSet(ctx, rs, hairpin); err != nil {
			b.fail()
			return err
		}
	} else {
		in = partialInput(b.last, rs)
		add, del = hairpinChanges(b.last, rs, hairpin)
	}
	// The entries of new endpoints go in before the rules that DNAT to
	// them, those of endpoints that left once no rule does any more: a
	// hairpin connection is masqueraded whichever rules it meets.
	set := hairpinSet(b.cfg.family)
	if err := b.k.addToSet(ctx, set, add); err != nil {
		b.fail()
		return fmt.Errorf("iptables %s: %w", b.cfg.family.String(), err)
	}
	written := len(in.nat) + len(in.filter)
	stale := len(in.staleNAT) + len(in.staleFilter)
	if written+stale > 0 {
		if err := b.k.restore(ctx, in.write); err != nil {
			b.fail()
			if full {
				return fmt.Errorf("iptables %s: full sync: %w: %w", b.cfg.family.String(), ErrRestore, err)
			}
			return fmt.Errorf("iptables %s: %w: %w: %w", b.cfg.family.String(), ErrPartialRestore, ErrRestore, err)
		}
	} else {
		b.stats.skipped++ // the kernel has it all
	}
	if err := b.k.delFromSet(ctx, set, del); err != nil {
		b.fail()
		return fmt.Errorf("iptables %s: %w", b.cfg.family.String(), err)
	}
	if err := b.ensureJumps(ctx, jumps); err != nil {
		b.fail()
		return err
	}
	b.last, b.hairpin = rs, hairpin
	b.stats.setAdds, b.stats.setDels = len(add), len(del)
	if full {
		b.lastFull = b.now()
		b.stats.full++
	}
	b.stats.written, b.stats.stale = written, stale
	b.info = SyncInfo{Full: full, Rules: map[string]int{TableFilter: rs.Rules(TableFilter), TableNAT: rs.Rules(TableNAT)},
		Written: map[string]int{TableFilter: countRules(in.filter), TableNAT: countRules(in.nat)}}
	log.V(4).Info("Synced iptables", "full", full, "services", len(s.Services), "chainsWritten", written,
		"staleChains", stale, "hairpinAdded", len(add), "hairpinDeleted", len(del))
	return nil
}

// countRules returns the rules of chains.
func countRules(chains []*Chain) int {
	n := 0
	for _, c := range chains {
		n += len(c.Rules)
	}
	return n
}

func (b *Backend) fail() {
	b.last, b.hairpin = nil, nil
	b.stats.failures++
}

// reconcileSet creates the hairpin set unless it exists, and returns the
// entries of rs it lacks and those it holds but rs does not want; counts
// are rs's (hairpinCounts).
func (b *Backend) reconcileSet(ctx context.Context, rs *Ruleset, counts map[entryKey]int32) (add, del []HairpinEntry, err error) {
	fam, set := b.cfg.family.String(), hairpinSet(b.cfg.family)
	if err := b.k.ensureSet(ctx, set, b.cfg.family); err != nil {
		return nil, nil, fmt.Errorf("iptables %s: %w", fam, err)
	}
	have, err := b.k.listSet(ctx, set)
	if err != nil {
		return nil, nil, fmt.Errorf("iptables %s: %w", fam, err)
	}
	// done: held, or already added.
	done := make(map[entryKey]struct{}, len(have))
	for _, e := range have {
		k := e.key()
		done[k] = struct{}{}
		if counts[k] == 0 {
			del = append(del, e)
		}
	}
	for _, f := range rs.Services {
		for _, k := range f.hairpin {
			if _, ok := done[k]; !ok {
				done[k] = struct{}{}
				add = append(add, k.entry())
			}
		}
	}
	sortEntries(add)
	sortEntries(del)
	return add, del, nil
}

// hairpinChanges updates counts, the entries of old's hairpin set with
// the number of service ports that want each, to rs's, and returns the
// entries it gained and lost. Like changedChains, it skips unseen the
// Fragments rs shares with old.
func hairpinChanges(old, rs *Ruleset, counts map[entryKey]int32) (add, del []HairpinEntry) {
	prev := make(map[string]*Fragment, len(old.Services))
	for _, f := range old.Services {
		prev[f.Key] = f
	}
	before := map[entryKey]int32{} // of the entries touched
	count := func(ks []entryKey, d int32) {
		for _, k := range ks {
			if _, ok := before[k]; !ok {
				before[k] = counts[k]
			}
			counts[k] += d
		}
	}
	for _, f := range rs.Services {
		o, ok := prev[f.Key]
		delete(prev, f.Key)
		if o == f {
			continue
		}
		if ok {
			count(o.hairpin, -1)
		}
		count(f.hairpin, 1)
	}
	for _, o := range prev { // service ports that left
		count(o.hairpin, -1)
	}
	for k, was := range before {
		now := counts[k]
		if now <= 0 {
			delete(counts, k)
		}
		switch {
		case was <= 0 && now > 0:
			add = append(add, k.entry())
		case was > 0 && now <= 0:
			del = append(del, k.entry())
		}
	}
	sortEntries(add)
	sortEntries(del)
	return add, del
}

// sortEntries sorts hairpin entries by address, protocol and port.
func sortEntries(es []HairpinEntry) {
	slices.SortFunc(es, func(a, b HairpinEntry) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	})
}

// prepareFull reads both tables back and returns the restore of a full
// sync: every chain of rs whose rules the tables do not already hold
// (readSave), and the chains of wasp's the tables hold that rs does not
// want (service chains of service ports that left; a fixed chain of
// other options, such as WASP-FIREWALL without localhost NodePorts, whose
// jumps it deletes first); and the jumps from the built-in chains the
// tables lack, to add once the restore made their chains. It sets
// route_localnet for localhost NodePorts. When the tables hold the plan,
// it costs two iptables-save calls and no other.
func (b *Backend) prepareFull(ctx context.Context, rs *Ruleset, localhostNodePorts bool) (*restoreInput, []jump, error) {
	fam := b.cfg.family.String()
	if localhostNodePorts {
		if err := b.k.routeLocalnet(ctx); err != nil {
			return nil, nil, fmt.Errorf("iptables %s: localhost NodePorts: %w", fam, err)
		}
	}
	all := fullInput(rs)
	wanted := map[string]bool{}
	for _, cs := range [][]*Chain{all.nat, all.filter} {
		for _, c := range cs {
			wanted[c.Name] = true
		}
	}
	in := &restoreInput{}
	var missing []jump
	for _, t := range []struct {
		table string
		plan  []*Chain
		write *[]*Chain
		stale *[]string
	}{{TableNAT, all.nat, &in.nat, &in.staleNAT}, {TableFilter, all.filter, &in.filter, &in.staleFilter}} {
		saved := newSavedTable(t.plan, wanted)
		if err := saveLines(ctx, b.k, t.table, saved.line); err != nil {
			return nil, nil, fmt.Errorf("iptables %s: save table %s: %w", fam, t.table, err)
		}
		if saved.err != nil {
			return nil, nil, fmt.Errorf("iptables %s: table %s: %w", fam, t.table, saved.err)
		}
		for _, c := range t.plan {
			if !saved.same(c) {
				*t.write = append(*t.write, c)
			}
		}
		*t.stale = saved.stale
		for _, j := range b.cfg.jumps() {
			if j.table == t.table && !saved.hasJump(j) {
				missing = append(missing, j)
			}
		}
		for _, j := range anyJumps() {
			if j.table != t.table || !slices.Contains(*t.stale, j.to) || !saved.hasJump(j) {
				continue
			}
			if err := b.k.deleteRule(ctx, j.table, j.from, j.args()...); err != nil {
				return nil, nil, fmt.Errorf("iptables %s: delete jump from %s to stale %s in table %s: %w", fam, j.from, j.to, j.table, err)
			}
		}
	}
	return in, missing, nil
}

// ensureJumps adds the jumps from the built-in chains, after the restore
// that made the chains they jump to.
func (b *Backend) ensureJumps(ctx context.Context, jumps []jump) error {
	b.stats.jumps = len(jumps)
	for _, j := range jumps {
		if _, err := b.k.ensureRule(ctx, j.table, j.from, j.args()...); err != nil {
			return fmt.Errorf("iptables %s: ensure jump from %s to %s in table %s: %w", b.cfg.family.String(), j.from, j.to, j.table, err)
		}
	}
	return nil
}

// anyJumps are the jumps of every configuration.
func anyJumps() []jump {
	return config{family: backends.IPv4, localhostNodePorts: true}.jumps()
}

// chainName returns the chain a line of iptables-save output declares,
// if it is a declaration.
func chainName(line string) (string, bool) {
	if !strings.HasPrefix(line, ":") {
		return "", false
	}
	name, _, _ := strings.Cut(line[1:], " ")
	return name, true
}

// changedChains returns the service chains of rs whose rules differ from
// those of old (or are new), and the service chains of old that rs no
// longer has. A Fragment rs shares with old is skipped unseen.
func changedChains(old, rs *Ruleset) (write []*Chain, stale []string) {
	prev := make(map[string]*Fragment, len(old.Services))
	for _, f := range old.Services {
		prev[f.Key] = f
	}
	gone := map[string]bool{}
	for _, f := range rs.Services {
		o := prev[f.Key]
		delete(prev, f.Key)
		if o == f {
			continue
		}
		oldRules := map[string][]string{}
		if o != nil {
			for _, c := range o.Chains {
				oldRules[c.Name] = c.Rules
				gone[c.Name] = true
			}
		}
		for _, c := range f.Chains {
			if r, ok := oldRules[c.Name]; !ok || !slices.Equal(r, c.Rules) {
				write = append(write, c)
			}
		}
		for _, c := range f.Chains {
			delete(gone, c.Name)
		}
	}
	for _, f := range old.Services { // service ports that left, in order
		if prev[f.Key] == nil {
			continue
		}
		for _, c := range f.Chains {
			gone[c.Name] = true
		}
	}
	for _, f := range rs.Services { // a chain a new port took over is not stale
		if len(gone) == 0 {
			break
		}
		for _, c := range f.Chains {
			delete(gone, c.Name)
		}
	}
	stale = make([]string, 0, len(gone))
	for name := range gone {
		stale = append(stale, name)
	}
	slices.Sort(stale)
	return write, stale
}

// Cleanup removes the jump rules to wasp's chains and every chain of
// wasp's (named with Prefix) from the filter and nat tables, then the
// family's hairpin set; what is missing is not an error. A later Sync is
// a full one.
func (b *Backend) Cleanup(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	b.last, b.hairpin = nil, nil
	fam := b.cfg.family.String()
	if err := cleanup(ctx, b.k, fam, TableNAT, TableFilter); err != nil {
		return err
	}
	if err := b.k.destroySet(ctx, hairpinSet(b.cfg.family)); err != nil {
		return fmt.Errorf("iptables %s: %w", fam, err)
	}
	return nil
}

// cleanup removes the jumps (those of every configuration) and the
// chains of wasp's from tables of k (TableNAT, TableFilter, or both; in
// one restore). A table without a chain of wasp's
// has no jump to one either, and is left untouched: not even read by a
// single-rule call, which would load a legacy table that is not there.
func cleanup(ctx context.Context, k kernel, what string, tables ...string) error {
	in := &restoreInput{}
	removed := map[string]int{} // chains, by table
	for _, table := range tables {
		var ours []string
		err := saveLines(ctx, k, table, func(line string) {
			if name, ok := chainName(line); ok && strings.HasPrefix(name, Prefix) {
				ours = append(ours, strings.Clone(name))
			}
		})
		if err != nil {
			return fmt.Errorf("iptables %s: save table %s: %w", what, table, err)
		}
		if len(ours) == 0 {
			continue
		}
		for _, j := range anyJumps() {
			if j.table != table {
				continue
			}
			if err := k.deleteRule(ctx, j.table, j.from, j.args()...); err != nil {
				return fmt.Errorf("iptables %s: delete jump from %s to %s in table %s: %w", what, j.from, j.to, j.table, err)
			}
		}
		if table == TableNAT {
			in.staleNAT = ours
		} else {
			in.staleFilter = ours
		}
		removed[table] = len(ours)
	}
	if len(removed) == 0 {
		return nil
	}
	if err := k.restore(ctx, in.write); err != nil {
		return fmt.Errorf("iptables %s: delete chains: %w: %w", what, ErrRestore, err)
	}
	klog.FromContext(ctx).Info("Removed wasp's iptables chains and the jumps to them", "iptables", what, "chains", removed)
	return nil
}

// Close releases the Backend's resources and leaves the tables as they
// are. Closing twice is not an error.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.k.close()
}
