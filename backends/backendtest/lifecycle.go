package backendtest

import (
	"context"
	"errors"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// RunLifecycle holds a backend to the contract's rules for Close and
// Cleanup, for each of the Harness's families, with Golden4 or Golden6:
//
//   - Lifecycle/ipv4/close twice: a second Close returns nil;
//   - Lifecycle/ipv4/after close: Sync and Cleanup of a closed backend
//     return errors wrapping backends.ErrClosed and leave the dataplane
//     as it was (a new backend then cleans it up);
//   - Lifecycle/ipv4/cleanup twice: Cleanup, again right after, leaves
//     nothing and returns nil; so does Cleanup of a backend that never
//     synced; a Sync after Cleanup programs the State again.
func RunLifecycle(t *testing.T, h Harness) {
	if h.New == nil || h.Dump == nil {
		t.Fatal("backendtest: RunLifecycle needs Harness.New and Harness.Dump")
	}
	s := newSuite(t, &h, "Lifecycle")
	ctx := context.Background()
	for _, f := range h.families() {
		s.run(t, "", f.String(), func(t *testing.T) {
			netns := s.namespace(t)
			st := Golden4()
			if f == backends.IPv6 {
				st = Golden6()
			}
			s.run(t, f.String(), "close twice", func(t *testing.T) {
				b := s.h.New(t, f, netns)
				if _, err := b.Sync(ctx, st); err != nil {
					t.Fatalf("sync: %v", err)
				}
				s.cleanup(t, b)
				if err := b.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				if err := b.Close(); err != nil {
					t.Errorf("second close: %v, want nil", err)
				}
			})
			s.run(t, f.String(), "after close", func(t *testing.T) {
				b := s.h.New(t, f, netns)
				if _, err := b.Sync(ctx, st); err != nil {
					t.Fatalf("sync: %v", err)
				}
				want := s.h.Dump(t, b)
				if err := b.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				if _, err := b.Sync(ctx, State(f)); !errors.Is(err, backends.ErrClosed) {
					t.Errorf("sync after close: %v, want an error wrapping backends.ErrClosed", err)
				}
				if err := b.Cleanup(ctx); !errors.Is(err, backends.ErrClosed) {
					t.Errorf("cleanup after close: %v, want an error wrapping backends.ErrClosed", err)
				}
				// Dump may need an open backend: read what is left
				// through a new one, which may only look.
				again := s.h.New(t, f, netns)
				defer again.Close()
				if netns != "" {
					if got := s.h.Dump(t, again); got != want {
						t.Errorf("sync or cleanup after close changed the dataplane (-before +after):\n%s", LineDiff(want, got))
					}
				}
				s.cleanup(t, again)
			})
			s.run(t, f.String(), "cleanup twice", func(t *testing.T) {
				b := s.h.New(t, f, netns)
				defer b.Close()
				s.cleanup(t, b)
				if _, err := b.Sync(ctx, st); err != nil {
					t.Fatalf("sync: %v", err)
				}
				want := s.h.Dump(t, b)
				s.cleanup(t, b)
				s.cleanup(t, b)
				if _, err := b.Sync(ctx, st); err != nil {
					t.Fatalf("sync after cleanup: %v", err)
				}
				if got := s.h.Dump(t, b); got != want {
					t.Errorf("sync after cleanup differs from the first (-first +again):\n%s", LineDiff(want, got))
				}
				s.cleanup(t, b)
			})
		})
	}
}
