package conntrack

import (
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/wasp-proxy/wasp/backends"
)

// fakeTable is a stateful in-memory conntrack table: deleteFlows removes
// what it matches, as the kernel would.
type fakeTable struct {
	mu       sync.Mutex
	flows    map[backends.Family][]flow
	failNext error // returned by the next deleteFlows, after deleting
	scans    int
	closed   bool
}

var _ table = (*fakeTable)(nil)

func newFakeTable() *fakeTable {
	return &fakeTable{flows: map[backends.Family][]flow{}}
}

func (t *fakeTable) add(family backends.Family, fs ...flow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flows[family] = append(t.flows[family], fs...)
}

func (t *fakeTable) deleteFlows(family backends.Family, stale func(*flow) bool) (uint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, errors.New("table closed")
	}
	t.scans++
	var n uint
	kept := t.flows[family][:0]
	for _, f := range t.flows[family] {
		if stale(&f) {
			n++
			continue
		}
		kept = append(kept, f)
	}
	t.flows[family] = kept
	err := t.failNext
	t.failNext = nil
	return n, err
}

func (t *fakeTable) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	return nil
}

// Dump renders the flows of family, one a line, sorted, as `conntrack -L`.
func (t *fakeTable) Dump(family backends.Family) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lines []string
	for _, f := range t.flows[family] {
		lines = append(lines, f.String())
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
