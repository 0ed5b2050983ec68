package fake_test

import (
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/backends/fake"
)

// harness is the Fake for backendtest's suites; it has no kernel side.
func harness() backendtest.Harness {
	return backendtest.Harness{
		New: func(t *testing.T, _ backends.Family, netns string) backends.Backend {
			t.Helper()
			if netns != "" {
				t.Fatalf("the fake programs no network namespace (asked for %s)", netns)
			}
			return fake.New()
		},
		Dump: func(_ *testing.T, b backends.Backend) string { return b.(*fake.Fake).Dump() },
	}
}

// TestSuiteTransitions: the Fake holds what a fresh Fake holds for each
// state of backendtest's transitions, in any order.
func TestSuiteTransitions(t *testing.T) { backendtest.RunTransitions(t, harness()) }

// TestSuiteIdempotence: a second Sync of a state changes nothing, and no
// Sync modifies its state.
func TestSuiteIdempotence(t *testing.T) { backendtest.RunIdempotence(t, harness()) }

// TestSuiteLifecycle: Close twice, Sync and Cleanup after Close, Cleanup
// twice.
func TestSuiteLifecycle(t *testing.T) { backendtest.RunLifecycle(t, harness()) }
