//go:build linux

package backendtest

import (
	"testing"

	"github.com/wasp-proxy/wasp/internal/netlab"
)

// namespace returns "" for an in-memory Harness; for a Kernel one, the
// path of a throwaway network namespace that t's cleanup removes, or it
// skips t with the reason there is none.
func (s *suite) namespace(t *testing.T) string {
	t.Helper()
	if !s.h.Kernel {
		return ""
	}
	if testing.Short() {
		t.Skip("kernel test: skipped in -short mode")
	}
	ns, err := netlab.NewForTest(t).AddNS("node")
	if err != nil {
		t.Fatal(err)
	}
	if s.h.Probe != nil {
		if err := s.h.Probe(ns.Path()); err != nil {
			t.Skipf("kernel test: the backend cannot run here: %v", err)
		}
	}
	return ns.Path()
}
