package backendtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// RunIdempotence syncs each of Golden4, Golden6, To6(Golden4) and the
// Transitions States (of the Harness's families) on a new backend, then
// again, then once more with a deep copy: the second and third Syncs must
// change nothing (the same Dump and, with Changes, no change made), and
// no Sync may modify the State it was given. Subtests are named after the
// State: Idempotence/ipv4/golden, Idempotence/ipv4/transition 3,
// Idempotence/ipv6/golden twin (To6 of Golden4), ...
func RunIdempotence(t *testing.T, h Harness) {
	if h.New == nil || h.Dump == nil {
		t.Fatal("backendtest: RunIdempotence needs Harness.New and Harness.Dump")
	}
	s := newSuite(t, &h, "Idempotence")
	for _, f := range h.families() {
		s.run(t, "", f.String(), func(t *testing.T) {
			netns := s.namespace(t)
			named := map[string]*backends.State{}
			var names []string
			add := func(name string, st *backends.State) {
				names = append(names, name)
				named[name] = st
			}
			for i, st := range Transitions() {
				if f == backends.IPv6 {
					st = To6(st)
				}
				add(fmt.Sprintf("transition %d", i), st)
			}
			if f == backends.IPv4 {
				add("golden", Golden4())
			} else {
				add("golden", Golden6())
				add("golden twin", To6(Golden4()))
			}
			for _, name := range names {
				s.run(t, f.String(), name, func(t *testing.T) { s.idempotent(t, netns, named[name]) })
			}
		})
	}
}

func (s *suite) idempotent(t *testing.T, netns string, st *backends.State) {
	t.Helper()
	ctx := context.Background()
	orig := st.Clone()
	b := s.h.New(t, st.Family, netns)
	defer b.Close()
	if _, err := b.Sync(ctx, st); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	first := s.h.Dump(t, b)
	for _, again := range []struct {
		name string
		st   *backends.State
	}{
		{"the same State", st},
		{"a deep copy", st.Clone()},
	} {
		if _, err := b.Sync(ctx, again.st); err != nil {
			t.Fatalf("sync of %s again: %v", again.name, err)
		}
		if got := s.h.Dump(t, b); got != first {
			t.Errorf("sync of %s again changed the dataplane (-first +again):\n%s", again.name, LineDiff(first, got))
		}
		if s.h.Changes != nil {
			if n := s.h.Changes(b); n != 0 {
				t.Errorf("sync of %s again made %d changes, want none", again.name, n)
			}
		}
	}
	if !st.Equal(orig) {
		t.Error("Sync modified the State it was given")
	}
	s.cleanup(t, b)
}
