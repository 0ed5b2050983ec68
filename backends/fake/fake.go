// Package fake is a stateful, in-memory backends.Backend for unit tests of
// the sync loop. It validates every State it is given as strictly as a real
// dataplane would, keeps a deep copy of the last good State of each family,
// and renders what is programmed with Dump, in a compact rule-like text
// that golden tests compare.
//
// Like the nftables backend, which owns one table per family, the Fake
// keeps one State per family: a Sync replaces only the State of its
// family, so a dual-stack node syncs IPv4 and IPv6 separately.
package fake

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/wasp-proxy/wasp/backends"
)

// ErrInvalidState is wrapped by the error Sync returns for a State that
// breaks the backends contract.
var ErrInvalidState = backends.ErrInvalidState

// errClosed is returned by Sync and Cleanup after Close.
var errClosed = fmt.Errorf("fake: %w", backends.ErrClosed)

// Fake is an in-memory Backend. It is safe for concurrent use.
type Fake struct {
	mu       sync.Mutex
	states   map[backends.Family]*backends.State
	failNext error
	closed   bool
	counts   Counts
}

var _ backends.Backend = (*Fake)(nil)

// Counts are how often each method of a Fake was called.
type Counts struct {
	Syncs       int // Sync calls, failed ones included
	FailedSyncs int // Sync calls that returned an error
	Cleanups    int // Cleanup calls
	Closes      int // Close calls
}

// New returns an empty Fake.
func New() *Fake {
	return &Fake{states: map[backends.Family]*backends.State{}}
}

// Sync validates s and, if it is valid, stores a deep copy as the
// programmed State of s.Family. On any error the programmed State is left
// as it was. An error set with FailNextSync is returned first, without
// looking at s; then a canceled ctx, a closed Fake, and a State that breaks
// the contract (wrapping ErrInvalidState, naming every problem). Its
// SyncResult says nothing.
func (f *Fake) Sync(ctx context.Context, s *backends.State) (backends.SyncResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts.Syncs++
	err := f.sync(ctx, s)
	if err != nil {
		f.counts.FailedSyncs++
	}
	return backends.SyncResult{}, err
}

func (f *Fake) sync(ctx context.Context, s *backends.State) error {
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if f.closed {
		return errClosed
	}
	if err := Validate(s); err != nil {
		return err
	}
	f.states[s.Family] = s.Clone()
	return nil
}

// Cleanup forgets every programmed State.
func (f *Fake) Cleanup(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts.Cleanups++
	if err := ctx.Err(); err != nil {
		return err
	}
	if f.closed {
		return errClosed
	}
	clear(f.states)
	return nil
}

// Close marks the Fake closed, leaving the programmed State as it is, as a
// real backend leaves the dataplane. Closing twice is not an error.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts.Closes++
	f.closed = true
	return nil
}

// FailNextSync makes the next Sync return err without changing anything.
// A nil err cancels a pending failure.
func (f *Fake) FailNextSync(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = err
}

// Counts returns how often each method was called.
func (f *Fake) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

// State returns a deep copy of the programmed State of family, or nil if
// none is programmed.
func (f *Fake) State(family backends.Family) *backends.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.states[family]
	if !ok {
		return nil
	}
	return s.Clone()
}

// Dump renders the programmed State of every family, IPv4 first; see
// DumpState for the syntax. It is "" when nothing is programmed.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, fam := range []backends.Family{backends.IPv4, backends.IPv6} {
		if s, ok := f.states[fam]; ok {
			b.WriteString(DumpState(s))
		}
	}
	return b.String()
}
