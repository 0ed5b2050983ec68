//go:build linux

package nsthread_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/internal/netlab"
	"github.com/wasp-proxy/wasp/internal/nsthread"
)

// netnsID returns the identity of the calling thread's network namespace,
// as "net:[inode]".
func netnsID(t *testing.T) string {
	t.Helper()
	id, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestDoEntersTheNamespaceAndLeavesTheCallerAlone(t *testing.T) {
	lab := netlab.NewForTest(t)
	ns, err := lab.AddNS("a")
	if err != nil {
		t.Fatal(err)
	}
	var want string
	if err := ns.Do(func() error { want = netnsID(t); return nil }); err != nil {
		t.Fatal(err)
	}
	outside := netnsID(t)
	if want == outside {
		t.Fatalf("the lab namespace is the test's own: %s", want)
	}

	var got, child string
	err = nsthread.Do(ns.Path(), func() error {
		got = netnsID(t)
		// A process started here runs in the namespace too.
		out, err := exec.Command("readlink", "/proc/self/ns/net").Output()
		child = strings.TrimSpace(string(out))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("f ran in %s, want the namespace's %s", got, want)
	}
	if child != want {
		t.Errorf("a child process ran in %s, want the namespace's %s", child, want)
	}
	if now := netnsID(t); now != outside {
		t.Errorf("the caller's thread is in %s after Do, want %s", now, outside)
	}
}

func TestDoEmptyPathRunsInPlace(t *testing.T) {
	outside := netnsID(t)
	var got string
	if err := nsthread.Do("", func() error { got = netnsID(t); return nil }); err != nil {
		t.Fatal(err)
	}
	if got != outside {
		t.Errorf("f ran in %s, want the caller's %s", got, outside)
	}
}

func TestDoMissingNamespace(t *testing.T) {
	err := nsthread.Do("/nonexistent/netns", func() error {
		t.Error("f ran without a namespace")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), `"/nonexistent/netns"`) {
		t.Errorf("Do(missing) = %v, want an error naming the path", err)
	}
}

func TestFreshReturnsAPanicAsAnError(t *testing.T) {
	err := nsthread.Fresh(func() error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Fresh(panic) = %v, want an error carrying the panic", err)
	}
}
