package conntrack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
)

// ErrCleanup is wrapped by the error Sync returns when the wrapped backend
// synced but the conntrack cleanup after it failed. It wraps
// backends.ErrHousekeeping.
//
// Upstream logs such a failure and carries on. wasp returns it instead (a
// library does not both log and return), but in the housekeeping category:
// the dataplane *is* programmed, so the sync loop logs and counts it, does
// not treat the dataplane as failed and does not hurry a full resync. The
// reconciler keeps no state, so the next Sync, whatever triggers it,
// retries the cleanup in full.
var ErrCleanup = fmt.Errorf("conntrack cleanup failed (%w)", backends.ErrHousekeeping)

// Opts configure a Backend.
type Opts struct {
	// Family is the IP family whose conntrack table the Backend cleans; it
	// must be the Family of every State given to Sync. Required:
	// backends.IPv4 or backends.IPv6.
	Family backends.Family
	// NetNS is the path of the network namespace whose conntrack table is
	// cleaned, such as /run/netns/x. Optional: empty means the namespace
	// the process was in when New was called.
	NetNS string
	// Observer is told about every cleanup, for metrics. Optional.
	Observer Observer
}

// Observer is told about each conntrack cleanup, for upstream's metrics
// conntrack_reconciler_sync_duration_seconds and
// conntrack_reconciler_deleted_entries_total. It is called on Sync's
// goroutine and must be quick and never block.
type Observer interface {
	// Reconciled reports one cleanup of family's table: how long it
	// took, how many entries it deleted (also when it failed: some
	// deletes may have succeeded) and its error, nil on success.
	Reconciled(family backends.Family, d time.Duration, deleted uint64, err error)
}

// Stats count a Backend's conntrack reconciliations, for the metrics
// conntrack_reconciler_sync_duration_seconds and
// conntrack_reconciler_deleted_entries_total.
type Stats struct {
	Reconciles     uint64        // cleanups run, after inner syncs that succeeded
	Failures       uint64        // cleanups that returned an error
	DeletedEntries uint64        // conntrack entries deleted, over all cleanups
	LastDuration   time.Duration // how long the last cleanup took
	TotalDuration  time.Duration // how long all cleanups took
}

// table is the conntrack table of one network namespace: the seam between
// the reconciler and the kernel.
type table interface {
	// deleteFlows scans the table of family once and deletes every flow
	// for which stale returns true. It returns how many it deleted, which
	// is meaningful even with an error (some deletes may have failed).
	deleteFlows(family backends.Family, stale func(*flow) bool) (uint, error)
	// close releases the table's resources.
	close() error
}

// Backend wraps a backends.Backend and cleans up stale UDP conntrack
// entries after each of its successful syncs. Its methods are safe for
// concurrent use; Syncs are serialized.
type Backend struct {
	inner    backends.Backend
	family   backends.Family
	table    table
	observer Observer // nil: none

	syncMu sync.Mutex // serializes Sync

	mu    sync.Mutex // guards stats
	stats Stats
}

var _ backends.Backend = (*Backend)(nil)

// New returns a Backend that syncs inner and then cleans the conntrack
// table of opts.Family: a *Backend, or a *CheckingBackend when inner is a
// backends.DriftChecker, so that the result checks for drift exactly when
// inner does (and the sync loop checks exactly the dataplanes that can be
// checked). It opens a
// netlink socket (in opts.NetNS, if given) at once, so a missing
// namespace or permission fails here rather than at the first Sync.
func New(inner backends.Backend, opts Opts) (backends.Backend, error) {
	if err := validate(inner, opts); err != nil {
		return nil, err
	}
	t, err := openTable(opts.NetNS)
	if err != nil {
		return nil, fmt.Errorf("conntrack: %w", err)
	}
	return newBackend(inner, opts, t).checking(), nil
}

func validate(inner backends.Backend, opts Opts) error {
	var errs []error
	if inner == nil {
		errs = append(errs, errors.New("inner: required"))
	}
	if _, ok := familyName(opts.Family); !ok {
		errs = append(errs, fmt.Errorf("family: %d is not backends.IPv4 or backends.IPv6", opts.Family))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("conntrack: invalid options: %w", err)
	}
	return nil
}

// newBackend returns a Backend over a given table; tests pass a fake.
func newBackend(inner backends.Backend, opts Opts, t table) *Backend {
	return &Backend{inner: inner, family: opts.Family, table: t, observer: opts.Observer}
}

// Sync syncs the wrapped backend and, only if that succeeded, deletes the
// UDP conntrack entries of s.Family that no serving endpoint answers (see
// the package documentation).
//
// An error of the wrapped backend is returned as is, and no cleanup runs.
// A cleanup failure is returned wrapping ErrCleanup; the dataplane is
// programmed all the same. The SyncResult is the wrapped backend's. A
// State of another family than Opts.Family is refused before anything is
// synced.
func (b *Backend) Sync(ctx context.Context, s *backends.State) (backends.SyncResult, error) {
	if s == nil {
		return backends.SyncResult{}, errors.New("conntrack: nil state")
	}
	if s.Family != b.family {
		return backends.SyncResult{}, fmt.Errorf("conntrack: state of IP family %d given to the cleaner of family %d", s.Family, b.family)
	}
	b.syncMu.Lock()
	defer b.syncMu.Unlock()
	r, err := b.inner.Sync(ctx, s)
	if err != nil {
		return r, err
	}
	return r, b.reconcile(ctx, s)
}

// reconcile deletes the stale entries of s.Family and records the stats.
func (b *Backend) reconcile(ctx context.Context, s *backends.State) error {
	name, _ := familyName(s.Family)
	logger := klog.FromContext(ctx).WithValues("ipFamily", name)
	start := time.Now()
	p := planFor(s)
	var (
		deleted uint
		err     error
	)
	if !p.empty() {
		deleted, err = b.table.deleteFlows(s.Family, func(f *flow) bool {
			if !p.stale(f) {
				return false
			}
			logger.V(5).Info("Deleting stale conntrack entry", "flow", f.String())
			return true
		})
	}
	elapsed := time.Since(start)

	b.mu.Lock()
	b.stats.Reconciles++
	b.stats.DeletedEntries += uint64(deleted)
	b.stats.LastDuration = elapsed
	b.stats.TotalDuration += elapsed
	if err != nil {
		b.stats.Failures++
	}
	b.mu.Unlock()
	if b.observer != nil {
		b.observer.Reconciled(s.Family, elapsed, uint64(deleted), err)
	}

	if err != nil {
		return fmt.Errorf("%w: %s (%d entries deleted): %w", ErrCleanup, name, deleted, err)
	}
	logger.V(4).Info("Reconciled conntrack entries", "entriesDeleted", deleted, "elapsed", elapsed)
	return nil
}

// Stats returns the counts so far.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Cleanup cleans up the wrapped backend. Conntrack entries are left to
// expire: once the dataplane is gone, nothing DNATs new flows anyway.
func (b *Backend) Cleanup(ctx context.Context) error {
	return b.inner.Cleanup(ctx)
}

// Close closes the netlink socket and the wrapped backend.
func (b *Backend) Close() error {
	var errs []error
	if err := b.table.close(); err != nil {
		errs = append(errs, fmt.Errorf("conntrack: close: %w", err))
	}
	if err := b.inner.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// familyName returns the Kubernetes name of a family, for logs and errors.
func familyName(f backends.Family) (string, bool) {
	switch f {
	case backends.IPv4:
		return "IPv4", true
	case backends.IPv6:
		return "IPv6", true
	}
	return "", false
}

// CheckingBackend is the Backend that New returns when the wrapped
// backend is a backends.DriftChecker: its CheckDrift is the wrapped
// backend's. Conntrack entries are not part of the check.
type CheckingBackend struct {
	*Backend
	dc backends.DriftChecker
}

var (
	_ backends.Backend      = (*CheckingBackend)(nil)
	_ backends.DriftChecker = (*CheckingBackend)(nil)
)

// CheckDrift checks the wrapped backend's dataplane for drift.
func (b *CheckingBackend) CheckDrift(ctx context.Context) (*backends.Drift, error) {
	return b.dc.CheckDrift(ctx)
}

// checking returns b as a CheckingBackend when the backend it wraps is a
// backends.DriftChecker, else b.
func (b *Backend) checking() backends.Backend {
	if dc, ok := b.inner.(backends.DriftChecker); ok {
		return &CheckingBackend{Backend: b, dc: dc}
	}
	return b
}
