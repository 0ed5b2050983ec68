//go:build !linux

package backendtest

import "testing"

// namespace returns "" for an in-memory Harness; a Kernel one needs Linux
// network namespaces, so t is skipped.
func (s *suite) namespace(t *testing.T) string {
	t.Helper()
	if s.h.Kernel {
		t.Skip("kernel test: needs Linux network namespaces")
	}
	return ""
}
