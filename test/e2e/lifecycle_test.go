//go:build linux

package e2e

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/wasp-proxy/wasp/internal/netlab"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// TestLifecycle covers what happens around the dataplane: a custom module
// choosing weights, restarting wasp under traffic, and wasp cleanup.
func TestLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	env := fw.Setup(ctx, t)
	s := &suite{env: env, ctx: ctx}

	t.Run("module hot reload", func(t *testing.T) { testHotReload(t, s) })
	t.Run("ServiceProxyModule", func(t *testing.T) { testServiceProxyModule(t, s) })
	// What depends on the dataplane, once per dataplane.
	for _, dp := range fw.Dataplanes(t) {
		t.Run(dp.Name, func(t *testing.T) {
			env.UseDataplane(t, dp)
			s := &suite{env: env, ctx: ctx, prefix: "lifecycle-" + dp.Name}
			defer s.deleteServices(t)
			t.Run("weighted selection by a module", func(t *testing.T) { testWeighted(t, s) })
			t.Run("restart keeps connections", func(t *testing.T) { testRestart(t, s) })
			t.Run("cleanup leaves no trace", func(t *testing.T) { testCleanup(t, s) })
		})
	}
}

func testWeighted(t *testing.T, s *suite) {
	wasm := filepath.Join(s.env.Dir, "heavy.wasm")
	// Built on the host, where the Go toolchain and its caches are.
	if out, err := exec.CommandContext(s.ctx, s.env.WaspBin, "module", "build", "testdata/heavy", "-o", wasm).CombinedOutput(); err != nil {
		t.Fatalf("build the test module: %v\n%s", err, out)
	}
	w := s.env.StartWasp(t, "--module", "endpoint-selection="+wasm)
	defer w.Stop()

	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "heavy", Namespace: ns,
		Annotations: map[string]string{"e2e.wasp.dev/heavy-node": fw.ProxyNode}})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "b-1")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1", "b-1")

	// 9:1 over n connections: a-1 is binomial(n, 0.9); accept ±5 standard
	// deviations (sd = 9.5 for n = 1000), a false failure about once in
	// 3.5 million runs, while equal weights (500) fail by far.
	const n, p = 1000, 0.9
	got := answers(t, s.client(), "tcp", ip, 80, n)
	sd := math.Sqrt(n * p * (1 - p))
	if d := math.Abs(float64(got["a-1"]) - n*p); d > 5*sd || got["a-1"]+got["b-1"] != n {
		t.Fatalf("9:1 weights over %d connections gave %v, want a-1 within %.0f±%.0f", n, got, n*p, 5*sd)
	}
	t.Logf("9:1 weights over %d connections: %v (expected a-1 %.0f±%.0f)", n, got, n*p, 5*sd)
}

func testRestart(t *testing.T, s *suite) {
	w := s.env.StartWasp(t)
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "restart", Namespace: ns})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "a-2", "b-1")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1", "a-2", "b-1")

	// A long-lived connection and a stream of new ones keep going while
	// wasp stops and starts again.
	long := startLongLived(t, s, ip)
	fresh := startTraffic(s, ip) // new connections
	time.Sleep(300 * time.Millisecond)
	w.Stop()
	time.Sleep(300 * time.Millisecond)
	w2 := s.env.StartWasp(t)
	// The restarted wasp programs a change, so it did reconcile.
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "a-2", "b-1", "b-2")...)
	expectOnlyEventually(t, s, ip, "a-1", "a-2", "b-1", "b-2")
	requests, failures := long.stop()
	counts, errs := fresh.stop()
	requests += sum(counts) + len(errs)
	for _, err := range errs {
		failures = append(failures, fmt.Errorf("new connection: %v", err))
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed across the restart, first: %v", len(failures), requests, failures[0])
	}
	t.Logf("%d requests across the restart, none failed", requests)
	w2.Stop()
}

func testCleanup(t *testing.T, s *suite) {
	w := s.env.StartWasp(t)
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "gone", Namespace: ns, DualStack: true})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1")
	if r, err := s.env.ReadRuleset(); err != nil || r.Rules == 0 {
		t.Fatalf("no %s rules of wasp while wasp runs (%v)", s.env.Dataplane().Name, err)
	}
	w.Stop()
	// Stopping leaves the dataplane in place.
	if _, err := fw.Ask(s.client(), "tcp", ip, 80, ask); err != nil {
		t.Fatalf("after wasp stopped, the Service should still work: %v", err)
	}
	expectCleanedUp(t, s)
	if id, err := fw.Ask(s.client(), "tcp", ip, 80, dropWait); err == nil {
		t.Fatalf("after wasp cleanup the ClusterIP still answers (%q)", id)
	}
	// Cleaning up twice is fine.
	if out, err := s.env.RunWasp(s.ctx, "cleanup"); err != nil {
		t.Fatalf("second wasp cleanup: %v\n%s", err, out)
	}
}

// flow sends a request on one open connection every interval until
// stopped, and counts the answers by identity and the errors.
type flow struct {
	conn net.Conn
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	requests int
	answers  map[string]int
	errs     []error
}

func startFlow(s *suite, conn net.Conn, interval time.Duration) *flow {
	fl := &flow{conn: conn, done: make(chan struct{}), answers: map[string]int{}}
	fl.wg.Add(1)
	go func() {
		defer fl.wg.Done()
		for {
			select {
			case <-fl.done:
				return
			case <-time.After(interval):
			}
			ctx, cancel := context.WithTimeout(s.ctx, ask)
			id, err := netlab.Request(ctx, conn)
			cancel()
			fl.mu.Lock()
			fl.requests++
			if err != nil {
				fl.errs = append(fl.errs, err)
			} else {
				fl.answers[id]++
			}
			fl.mu.Unlock()
		}
	}()
	return fl
}

// stop ends the requests and returns how many were sent, the answers by
// identity and the errors.
func (fl *flow) stop() (int, map[string]int, []error) {
	close(fl.done)
	fl.wg.Wait()
	return fl.requests, fl.answers, fl.errs
}

// longLived is one TCP connection from the client to a Service, with a
// request every 20 ms until stopped. Every answer must come from the
// endpoint that answered the first: the connection keeps its endpoint.
type longLived struct {
	*flow
	first string
}

// startLongLived opens the connection to ip:80 (failing t if it cannot)
// and starts its requests.
func startLongLived(t *testing.T, s *suite, ip netip.Addr) *longLived {
	t.Helper()
	conn, first := establish(t, s, ip)
	return &longLived{flow: startFlow(s, conn, 20*time.Millisecond), first: first}
}

// stop ends the requests and returns how many were sent and which failed
// or were answered by another endpoint.
func (l *longLived) stop() (int, []error) {
	n, answers, errs := l.flow.stop()
	var failures []error
	for _, err := range errs {
		failures = append(failures, fmt.Errorf("established connection: %w", err))
	}
	for id, k := range answers {
		if id != l.first {
			failures = append(failures, fmt.Errorf("established connection answered %d times by %q, first by %q", k, id, l.first))
		}
	}
	return n, failures
}

// establish opens a TCP connection to ip:80 from the client, closed when
// t ends, and returns it with the identity of the pod that answered its
// first request.
func establish(t *testing.T, s *suite, ip netip.Addr) (net.Conn, string) {
	t.Helper()
	s.forgetEarlyProbes(ip, 80)
	conn, err := s.client().Dial(s.ctx, "tcp", netip.AddrPortFrom(ip, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	first, err := netlab.Request(s.ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	return conn, first
}
