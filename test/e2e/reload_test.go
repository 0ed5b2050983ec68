//go:build linux

package e2e

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/wasp-proxy/wasp/internal/netlab"
	"github.com/wasp-proxy/wasp/modules"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// testHotReload runs wasp with its endpoint-selection module read from a
// file, replaces the file (as a ConfigMap update does) with the 9:1
// weights module, and requires the new spread without a restart and with
// an established connection untouched; then a broken file, which must
// leave the 9:1 module serving.
func testHotReload(t *testing.T, s *suite) {
	heavy := filepath.Join(s.env.Dir, "heavy-reload.wasm")
	if out, err := exec.CommandContext(s.ctx, s.env.WaspBin, "module", "build", "testdata/heavy", "-o", heavy).CombinedOutput(); err != nil {
		t.Fatalf("build the test module: %v\n%s", err, out)
	}
	def, err := modules.Wasm("selection")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.env.Dir, "selection.wasm")
	replace := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(path+".new", b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	replace(def)
	w := s.env.StartWasp(t, "--module", "endpoint-selection="+path)
	defer w.Stop()
	pid := w.Pid()

	ip, spread := heavyService(t, s, "reload")

	conn, first := establish(t, s, ip)

	replace(mustRead(t, heavy))
	fw.Eventually(t, converge, func() error {
		if !strings.Contains(w.Log(), "Swapping the module chain") {
			return fmt.Errorf("no swap in wasp's log yet")
		}
		return nil
	})
	fw.Eventually(t, converge, func() error { return spread(0.9) })
	if done, err := w.Exited(); done || w.Pid() != pid {
		t.Fatalf("wasp restarted or exited (%v): a module swap must not restart it", err)
	}
	ctx, cancel := context.WithTimeout(s.ctx, ask)
	defer cancel()
	if id, err := netlab.Request(ctx, conn); err != nil || id != first {
		t.Fatalf("the connection established before the swap: %q, %v; want %q", id, err, first)
	}

	// A broken module: the 9:1 module keeps serving.
	replace([]byte("\x00asm\x01\x00\x00\x00 not a module"))
	fw.Eventually(t, converge, func() error {
		if !strings.Contains(w.Log(), "Module reload failed") {
			return fmt.Errorf("no failed reload in wasp's log yet")
		}
		return nil
	})
	if err := spread(0.9); err != nil {
		t.Fatalf("after a broken module file: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if done, err := w.Exited(); done {
		t.Fatalf("wasp exited after a broken module file: %v", err)
	}
}

// heavyService creates a Service that the 9:1 module (testdata/heavy)
// weighs for the proxy node, with endpoints a-1 (on it) and b-1, waits
// until it answers, checks the 1:1 spread of the builtin module, and
// returns its ClusterIP and its spread check.
func heavyService(t *testing.T, s *suite, name string) (netip.Addr, func(p float64) error) {
	t.Helper()
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: name, Namespace: s.namespace(t),
		Annotations: map[string]string{"e2e.wasp.dev/heavy-node": fw.ProxyNode}})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "b-1")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1", "b-1")
	spread := spreadOf(t, s, ip)
	if err := spread(0.5); err != nil {
		t.Fatalf("the builtin module: %v", err)
	}
	return ip, spread
}

// spreadOf returns a check that a-1 answers a share p of 1000 new
// connections to ip:80, within ±5 standard deviations (see testWeighted).
func spreadOf(t *testing.T, s *suite, ip netip.Addr) func(p float64) error {
	return func(p float64) error {
		const n = 1000
		got := answers(t, s.client(), "tcp", ip, 80, n)
		sd := math.Sqrt(n * p * (1 - p))
		if d := math.Abs(float64(got["a-1"]) - n*p); d > 5*sd {
			return fmt.Errorf("a-1 answered %d of %d, want %.0f±%.0f (%v)", got["a-1"], n, n*p, 5*sd, got)
		}
		return nil
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
