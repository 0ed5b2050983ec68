package nftables

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
)

// ErrInvalidState is wrapped by the error Sync returns for a State the
// Backend cannot program; the dataplane is left as it was.
var ErrInvalidState = backends.ErrInvalidState

// errClosed is returned by Sync, Cleanup and CheckDrift after Close.
var errClosed = fmt.Errorf("nftables: %w", backends.ErrClosed)

// errNotSupported is returned by New where nftables cannot be programmed
// (not Linux).
var errNotSupported = fmt.Errorf("nftables: %w on %s", backends.ErrNotSupported, runtime.GOOS)

// Opts configures a Backend.
type Opts struct {
	// Family is the IP family whose table the Backend owns: "ip" for
	// IPv4, "ip6" for IPv6. Required.
	Family backends.Family
	// NetNS is the path of a network namespace to program instead of the
	// current one, such as /run/netns/foo. Optional.
	NetNS string
	// MasqueradeBit is the bit of the packet mark that asks for
	// masquerading, 1 to 31. Optional: 0 means backends.DefaultMasqueradeBit (14,
	// mark 0x4000), as upstream.
	MasqueradeBit int
	// Table is the name of the table. Optional: DefaultTable ("wasp").
	Table string
}

// Backend programs one IP family's nftables table. It keeps the ruleset
// it last programmed and sends each Sync's difference, in one transaction
// or a few commits in a row;
// see the package documentation. It is safe for concurrent use.
type Backend struct {
	mu         sync.Mutex
	cfg        config
	k          kernel
	planner    *planner
	validator  validator
	programmed *Ruleset // nil: not known, the next Sync rebuilds
	closed     bool
	stats      stats

	// verified: the table held programmed at ruleset generation
	// verifiedGen, and no commit happened since (CheckDrift).
	verified    bool
	verifiedGen uint32
	// epoch counts the Syncs and Cleanups, so that a drift check that
	// read the table without the lock knows whether one ran meanwhile;
	// readbackLocked: one did, and the next check holds the lock.
	epoch          uint64
	readbackLocked bool
}

var _ backends.Backend = (*Backend)(nil)

// stats count what the Backend did, for tests.
type stats struct {
	syncs, rebuilds, failures int
	lastOps                   int // operations of the last transaction sent
	driftChecks               int // CheckDrift calls that had a table to check
	driftReadbacks            int // of them, those that read the table back
}

// New returns a Backend that programs the kernel over netlink. It touches
// nothing until the first Sync, which reconciles an existing table (left
// by a previous process) without deleting it.
func New(o Opts) (*Backend, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	k, err := newNetlinkKernel(o.NetNS)
	if err != nil {
		return nil, fmt.Errorf("nftables %s: %w", o.Family.String(), err)
	}
	return newBackend(cfg, k), nil
}

// NewWithFake returns a Backend that programs f, an in-memory kernel,
// instead of the kernel: for tests of code that uses a Backend, and to see
// with f.Dump what it would program. Opts.NetNS is ignored. Several
// Backends may share f, as several processes share a kernel.
func NewWithFake(o Opts, f *Fake) (*Backend, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	return newBackend(cfg, f), nil
}

func newBackend(cfg config, k kernel) *Backend {
	return &Backend{cfg: cfg, k: k, planner: newPlanner(cfg), validator: validator{family: cfg.family}}
}

func (o Opts) config() (config, error) {
	cfg := config{family: o.Family, table: o.Table}
	if o.Family != backends.IPv4 && o.Family != backends.IPv6 {
		return cfg, fmt.Errorf("nftables: family %d, want 4 or 6", o.Family)
	}
	if cfg.table == "" {
		cfg.table = DefaultTable
	}
	if err := checkName("table", cfg.table); err != nil {
		return cfg, fmt.Errorf("nftables: %w", err)
	}
	bit := o.MasqueradeBit
	if bit == 0 {
		bit = backends.DefaultMasqueradeBit
	}
	if bit < 1 || bit > 31 {
		return cfg, fmt.Errorf("nftables: masquerade bit %d, want 1 to 31", o.MasqueradeBit)
	}
	cfg.mark = 1 << uint(bit)
	return cfg, nil
}

// Sync makes the table match s. It plans the ruleset, reusing the plan of
// every unchanged service port, and sends the difference from what it
// programmed last in one transaction, or a few commits in a row (see
// Diff). When that is not known (the first
// Sync, or after a failure) it loads the names of what the table holds
// and, in one transaction, rewrites everything wanted and deletes the
// rest, keeping the table and unchanged affinity sets. On error the
// kernel is left as it was, or as one of the commits of the difference
// left it, and the next Sync rebuilds. Its SyncResult says nothing yet:
// the proxy's own full or partial kind stands for it in the metrics.
func (b *Backend) Sync(ctx context.Context, s *backends.State) (backends.SyncResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return backends.SyncResult{}, b.sync(ctx, s)
}

// sync is Sync, with mu held.
func (b *Backend) sync(ctx context.Context, s *backends.State) error {
	if b.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.validator.validate(s); err != nil {
		return err
	}
	b.stats.syncs++
	b.epoch++
	rs := b.planner.plan(s)
	log := klog.FromContext(ctx).WithValues("ipFamily", b.cfg.family.String(), "table", b.cfg.table)

	var tx *Transaction
	if b.programmed == nil {
		inv, err := b.k.load(ctx, b.cfg.family, b.cfg.table)
		if err != nil {
			b.stats.failures++
			return fmt.Errorf("nftables: load table %s %s: %w", ipKeyword(b.cfg.family), b.cfg.table, err)
		}
		tx = rebuild(inv, rs)
		b.stats.rebuilds++
		log.V(2).Info("Rebuilding nftables table", "existed", inv.exists, "chains", len(inv.chains), "sets", len(inv.sets))
	} else {
		tx = Diff(b.programmed, rs)
	}
	b.stats.lastOps = len(tx.ops)
	if len(tx.ops) > 0 {
		if err := b.apply(ctx, tx); err != nil {
			b.programmed = nil
			b.stats.failures++
			return fmt.Errorf("nftables: sync table %s %s (%d operations): %w", ipKeyword(b.cfg.family), b.cfg.table, len(tx.ops), err)
		}
	}
	b.programmed = rs
	log.V(4).Info("Synced nftables table", "services", len(s.Services), "operations", len(tx.ops))
	return nil
}

// apply applies tx and keeps the table verified (see CheckDrift) if it
// was, and tx's commits were the only ones since: the ruleset generation
// moved by at most their number (a commit that changed nothing does not
// move it). Two generation round trips cost little beside a transaction.
func (b *Backend) apply(ctx context.Context, tx *Transaction) error {
	before, err := b.k.generation(ctx)
	keep := err == nil && b.verified && before == b.verifiedGen
	b.verified = false
	if err := b.k.apply(ctx, tx); err != nil {
		return err
	}
	if !keep {
		return nil
	}
	if after, err := b.k.generation(ctx); err == nil && after-before <= uint32(len(tx.commits)+1) {
		b.verified, b.verifiedGen = true, after
	}
	return nil
}

// Cleanup deletes the Backend's table; a missing table is not an error.
// A later Sync programs it again from scratch.
func (b *Backend) Cleanup(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	b.programmed, b.verified = nil, false
	b.epoch++
	tx := &Transaction{Family: b.cfg.family, Table: b.cfg.table, ops: []op{{kind: opDeleteTable}}}
	err := b.k.apply(ctx, tx)
	switch {
	case errors.Is(err, syscall.ENOENT):
		klog.FromContext(ctx).V(2).Info("No nftables table to delete", "table", ipKeyword(b.cfg.family)+" "+b.cfg.table)
	case err != nil:
		return fmt.Errorf("nftables: delete table %s %s: %w", ipKeyword(b.cfg.family), b.cfg.table, err)
	default:
		klog.FromContext(ctx).Info("Deleted wasp's nftables table", "table", ipKeyword(b.cfg.family)+" "+b.cfg.table)
	}
	return nil
}

// Close releases the Backend's resources and leaves the table as it is.
// Closing twice is not an error.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.k.close()
}
