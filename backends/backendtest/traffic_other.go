//go:build !linux

package backendtest

import "testing"

// RunTraffic sends real packets through the backend in a network lab of
// Linux namespaces; elsewhere it skips.
func RunTraffic(t *testing.T, h Harness) {
	t.Skip("traffic suite: needs Linux network namespaces")
}

// RunChurn probes the backend with real packets while it syncs, in a
// network lab of Linux namespaces; elsewhere it skips.
func RunChurn(t *testing.T, h Harness) {
	t.Skip("churn suite: needs Linux network namespaces")
}
