package backendtest

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
)

var seedFlag = flag.Uint64("backendtest.seed", 0, "replay RunTransitions' random orders with this seed only (0: the fixed seeds and one from the clock)")

// transitionRuns is how many random orders RunTransitions replays in
// memory; a kernel harness replays fewer, each Sync being a real
// transaction.
const (
	transitionRuns       = 20
	kernelTransitionRuns = 3
)

// RunTransitions applies the Transitions States (To6 of them for IPv6)
// to one backend, first in order and then in random orders with repeats:
// after every Sync, the Harness's Dump must equal the dump of a fresh
// backend that synced only that State. Every order starts from a new
// backend on an empty dataplane, and the suite requires (with FullSyncs)
// that only its first Sync rewrote everything.
//
// The random orders use fixed seeds and one from the clock; a failure
// names its seed, and -backendtest.seed=N replays that order alone.
// Subtests: Transitions/ipv4/in order, Transitions/ipv4/random order, and
// the same for ipv6.
func RunTransitions(t *testing.T, h Harness) {
	if h.New == nil || h.Dump == nil {
		t.Fatal("backendtest: RunTransitions needs Harness.New and Harness.Dump")
	}
	s := newSuite(t, &h, "Transitions")
	for _, f := range h.families() {
		s.run(t, "", f.String(), func(t *testing.T) {
			netns := s.namespace(t)
			states := Transitions()
			if f == backends.IPv6 {
				for i := range states {
					states[i] = To6(states[i])
				}
			}
			want := make([]string, len(states))
			for i, st := range states {
				want[i] = s.fresh(t, netns, st)
			}
			s.run(t, f.String(), "in order", func(t *testing.T) {
				order := make([]int, len(states))
				for i := range order {
					order[i] = i
				}
				s.replay(t, netns, states, want, order, "in order")
			})
			s.run(t, f.String(), "random order", func(t *testing.T) {
				seeds := seeds(netns != "")
				t.Logf("random orders of seeds %v (-backendtest.seed=N replays one)", seeds)
				for _, seed := range seeds {
					r := rand.New(rand.NewPCG(seed, 1))
					order := make([]int, 3*len(states))
					for i := range order {
						order[i] = r.IntN(len(states))
					}
					s.replay(t, netns, states, want, order, fmt.Sprintf("seed %d", seed))
				}
			})
		})
	}
}

// seeds are the seeds of the random orders.
func seeds(kernel bool) []uint64 {
	if *seedFlag != 0 {
		return []uint64{*seedFlag}
	}
	n := transitionRuns
	if kernel {
		n = kernelTransitionRuns
	}
	out := make([]uint64, 0, n+1)
	for i := range n {
		out = append(out, uint64(i+1))
	}
	return append(out, uint64(time.Now().UnixNano())|1)
}

// fresh returns the dump of a new backend that synced st alone, and
// cleans up after it.
func (s *suite) fresh(t *testing.T, netns string, st *backends.State) string {
	t.Helper()
	b := s.h.New(t, st.Family, netns)
	defer b.Close()
	if _, err := b.Sync(context.Background(), st); err != nil {
		t.Fatalf("fresh backend: sync: %v", err)
	}
	d := s.h.Dump(t, b)
	s.cleanup(t, b)
	return d
}

// cleanup runs b's Cleanup and requires that it leaves nothing.
func (s *suite) cleanup(t *testing.T, b backends.Backend) {
	t.Helper()
	if err := b.Cleanup(context.Background()); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if d := s.h.Dump(t, b); d != "" {
		t.Fatalf("after cleanup the backend's dataplane holds:\n%s", d)
	}
}

// replay syncs states in order on a new backend, comparing each dump with
// want.
func (s *suite) replay(t *testing.T, netns string, states []*backends.State, want []string, order []int, name string) {
	t.Helper()
	b := s.h.New(t, states[0].Family, netns)
	defer b.Close()
	for step, i := range order {
		if _, err := b.Sync(context.Background(), states[i]); err != nil {
			t.Fatalf("%s, step %d (state %d): sync: %v", name, step, i, err)
		}
		if got := s.h.Dump(t, b); got != want[i] {
			t.Fatalf("%s, step %d: state %d after state %d differs from a fresh backend's (-fresh +this):\n%s",
				name, step, i, prev(order, step), LineDiff(want[i], got))
		}
	}
	if s.h.FullSyncs != nil {
		if n := s.h.FullSyncs(b); n != 1 {
			t.Errorf("%s: %d full syncs, want one (the first)", name, n)
		}
	}
	s.cleanup(t, b)
}

// prev is the state synced before step of order, -1 for none.
func prev(order []int, step int) int {
	if step == 0 {
		return -1
	}
	return order[step-1]
}

// LineDiff shows the lines only in want (-) and only in got (+), as a
// multiset: a line present in both, even elsewhere, is not shown.
func LineDiff(want, got string) string {
	var b strings.Builder
	only := func(a, c, sign string) {
		count := map[string]int{}
		for _, l := range strings.Split(c, "\n") {
			count[l]++
		}
		for _, l := range strings.Split(a, "\n") {
			if count[l] > 0 {
				count[l]--
				continue
			}
			b.WriteString(sign + " " + l + "\n")
		}
	}
	only(want, got, "-")
	only(got, want, "+")
	return b.String()
}
