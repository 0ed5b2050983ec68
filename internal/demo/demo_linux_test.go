//go:build linux

package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/wasp-proxy/wasp/internal/netlab"
)

// buildWasp builds cmd/wasp into a temporary directory, or skips the test
// with the reason it cannot run.
func buildWasp(t *testing.T) string {
	t.Helper()
	if err := netlab.Probe(); err != nil {
		t.Skipf("the demo needs a network lab: %v", err)
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skipf("the demo needs nsenter: %v", err)
	}
	if testing.Short() {
		t.Skip("builds wasp: not in -short mode")
	}
	bin := filepath.Join(t.TempDir(), "wasp")
	if out, err := exec.Command("go", "build", "-tags", "grpcnotrace", "-o", bin, "github.com/wasp-proxy/wasp/cmd/wasp").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// labNamespaces lists the namespaces of this process's labs.
func labNamespaces(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("wl%d-", os.Getpid())) {
			out = append(out, e.Name())
		}
	}
	return out
}

// proxies lists the running processes started from bin.
func proxies(t *testing.T, bin string) []string {
	t.Helper()
	out, _ := exec.Command("pgrep", "-f", bin+" run").Output()
	return strings.Fields(string(out))
}

func TestDemo(t *testing.T) {
	bin := buildWasp(t)
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) { testDemo(t, bin, mode) })
	}
}

func testDemo(t *testing.T, bin, mode string) {
	if mode == "iptables" {
		if _, err := exec.LookPath("iptables-restore"); err != nil {
			t.Skip("demo in iptables mode: iptables-restore is not installed (Debian: apt-get install iptables)")
		}
	}
	var out bytes.Buffer
	if err := Run(context.Background(), Opts{Wasp: bin, Out: &out, Requests: 6, ProxyMode: mode}); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	for _, want := range []string{
		"from client ClusterIP          10.96.0.10:80/TCP       -> response from pod web-",
		"from client ClusterIP          10.96.0.10:80/UDP       -> response from pod web-",
		"from client NodePort eTP=Local 198.51.100.11:30081/TCP -> response from pod web-",
		"from node-a ClusterIP          10.96.0.10:80/TCP       -> response from pod web-",
		"from client ClusterIP, edited  10.96.0.10:80/TCP       -> response from pod web-3",
		"Spread per endpoint:",
		"wasp programmed node-a's " + mode + " in ",
		"Done: no process, rule, namespace or file of the demo is left.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if ns := labNamespaces(t); len(ns) > 0 {
		t.Errorf("namespaces left behind: %q", ns)
	}
	if ps := proxies(t, bin); len(ps) > 0 {
		t.Errorf("proxy processes left behind: %q", ps)
	}
}

// cancelWriter cancels a context once its output contains s.
type cancelWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	s      string
	cancel context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.s) {
		w.cancel()
	}
	return n, err
}

// TestDemoInterrupted: an interrupt at any stage leaves nothing behind.
func TestDemoInterrupted(t *testing.T) {
	bin := buildWasp(t)
	for _, at := range []string{"Starting wasp", "programmed", "response from pod", "Editing the snapshot"} {
		t.Run(at, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &cancelWriter{s: at, cancel: cancel}
			err := Run(ctx, Opts{Wasp: bin, Out: w, Requests: 3})
			if err == nil || !strings.Contains(err.Error(), "interrupted") {
				t.Errorf("got error %v, want an interruption\noutput:\n%s", err, w.buf.String())
			}
			if ns := labNamespaces(t); len(ns) > 0 {
				t.Errorf("namespaces left behind: %q", ns)
			}
			if ps := proxies(t, bin); len(ps) > 0 {
				t.Errorf("proxy processes left behind: %q", ps)
			}
		})
	}
}
