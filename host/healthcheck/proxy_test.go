package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

// t0 is when every test clock starts; timeout is every ProxyServer's
// HealthTimeout.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const timeout = 60 * time.Second

func newTestProxy(t *testing.T) (*ProxyServer, *clocktesting.FakePassiveClock) {
	t.Helper()
	c := clocktesting.NewFakePassiveClock(t0)
	s, err := newProxyServer(ProxyOpts{HealthTimeout: timeout}, c)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func readyNode() *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
}

// get runs one request through h and returns status, headers and body.
func get(h http.Handler, path string) (int, http.Header, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Header(), rec.Body.String()
}

func TestProxyHealth(t *testing.T) {
	type response struct {
		code int
		body string
	}
	tests := []struct {
		name           string
		steps          func(s *ProxyServer, c *clocktesting.FakePassiveClock)
		healthz, livez response
	}{
		{
			name:    "fresh, no node yet",
			steps:   func(s *ProxyServer, c *clocktesting.FakePassiveClock) {},
			healthz: response{503, `{"lastUpdated":"0001-01-01T00:00:00Z","currentTime":"2026-01-02T03:04:05Z","nodeEligible":false,"healthy":true}`},
			livez:   response{200, `{"lastUpdated":"2026-01-02T03:04:05Z","currentTime":"2026-01-02T03:04:05Z","healthy":true}`},
		},
		{
			name: "updated, lastUpdated overwritten with currentTime",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				s.SyncNode(readyNode())
				s.Updated(v1.IPv4Protocol)
				c.SetTime(t0.Add(5 * time.Second))
			},
			healthz: response{200, `{"lastUpdated":"2026-01-02T03:04:10Z","currentTime":"2026-01-02T03:04:10Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":true}}}`},
			livez:   response{200, `{"lastUpdated":"2026-01-02T03:04:10Z","currentTime":"2026-01-02T03:04:10Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":true}}}`},
		},
		{
			name: "queued, just inside the timeout",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				s.SyncNode(readyNode())
				s.Updated(v1.IPv4Protocol)
				c.SetTime(t0.Add(time.Second))
				s.QueuedUpdate(v1.IPv4Protocol)
				c.SetTime(t0.Add(time.Second + timeout - time.Nanosecond))
			},
			healthz: response{200, `{"lastUpdated":"2026-01-02T03:05:05.999999999Z","currentTime":"2026-01-02T03:05:05.999999999Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":true}}}`},
			livez:   response{200, `{"lastUpdated":"2026-01-02T03:05:05.999999999Z","currentTime":"2026-01-02T03:05:05.999999999Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":true}}}`},
		},
		{
			name: "queued for the timeout: unhealthy, lastUpdated kept",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				s.SyncNode(readyNode())
				s.Updated(v1.IPv4Protocol)
				c.SetTime(t0.Add(time.Second))
				s.QueuedUpdate(v1.IPv4Protocol)
				c.SetTime(t0.Add(2 * time.Second))
				s.QueuedUpdate(v1.IPv4Protocol) // the oldest counts
				c.SetTime(t0.Add(time.Second + timeout))
			},
			healthz: response{503, `{"lastUpdated":"2026-01-02T03:04:05Z","currentTime":"2026-01-02T03:05:06Z","nodeEligible":true,"healthy":false,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":false}}}`},
			livez:   response{503, `{"lastUpdated":"2026-01-02T03:04:05Z","currentTime":"2026-01-02T03:05:06Z","healthy":false,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":false}}}`},
		},
		{
			name: "queued past the timeout, then updated: healthy again",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				s.SyncNode(readyNode())
				s.Updated(v1.IPv4Protocol)
				s.QueuedUpdate(v1.IPv4Protocol)
				c.SetTime(t0.Add(2 * timeout))
				s.Updated(v1.IPv4Protocol)
			},
			healthz: response{200, `{"lastUpdated":"2026-01-02T03:06:05Z","currentTime":"2026-01-02T03:06:05Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:06:05Z","healthy":true}}}`},
			livez:   response{200, `{"lastUpdated":"2026-01-02T03:06:05Z","currentTime":"2026-01-02T03:06:05Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:06:05Z","healthy":true}}}`},
		},
		{
			name: "dual-stack, IPv6 late: lastUpdated is the latest family's",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				s.SyncNode(readyNode())
				s.Updated(v1.IPv6Protocol)
				s.QueuedUpdate(v1.IPv6Protocol)
				c.SetTime(t0.Add(timeout))
				s.Updated(v1.IPv4Protocol)
			},
			healthz: response{503, `{"lastUpdated":"2026-01-02T03:05:05Z","currentTime":"2026-01-02T03:05:05Z","nodeEligible":true,"healthy":false,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:05:05Z","healthy":true},"IPv6":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":false}}}`},
			livez:   response{503, `{"lastUpdated":"2026-01-02T03:05:05Z","currentTime":"2026-01-02T03:05:05Z","healthy":false,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:05:05Z","healthy":true},"IPv6":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":false}}}`},
		},
		{
			// Upstream judges only families that were Updated at least
			// once; its sync loops call Updated when they start.
			name: "queued but never updated family not judged",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				s.SyncNode(readyNode())
				s.QueuedUpdate(v1.IPv6Protocol)
				c.SetTime(t0.Add(2 * timeout))
			},
			healthz: response{200, `{"lastUpdated":"2026-01-02T03:06:05Z","currentTime":"2026-01-02T03:06:05Z","nodeEligible":true,"healthy":true}`},
			livez:   response{200, `{"lastUpdated":"2026-01-02T03:06:05Z","currentTime":"2026-01-02T03:06:05Z","healthy":true}`},
		},
		{
			name: "node being deleted: healthz fails, livez does not",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				n := readyNode()
				n.DeletionTimestamp = &metav1.Time{Time: t0}
				s.SyncNode(n)
				s.Updated(v1.IPv4Protocol)
			},
			healthz: response{503, `{"lastUpdated":"2026-01-02T03:04:05Z","currentTime":"2026-01-02T03:04:05Z","nodeEligible":false,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":true}}}`},
			livez:   response{200, `{"lastUpdated":"2026-01-02T03:04:05Z","currentTime":"2026-01-02T03:04:05Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2026-01-02T03:04:05Z","healthy":true}}}`},
		},
		{
			name: "node tainted by the autoscaler",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				n := readyNode()
				n.Spec.Taints = []v1.Taint{{Key: "other", Effect: v1.TaintEffectNoSchedule}, {Key: ToBeDeletedTaint, Effect: v1.TaintEffectNoSchedule}}
				s.SyncNode(n)
			},
			healthz: response{503, `{"lastUpdated":"0001-01-01T00:00:00Z","currentTime":"2026-01-02T03:04:05Z","nodeEligible":false,"healthy":true}`},
			livez:   response{200, `{"lastUpdated":"2026-01-02T03:04:05Z","currentTime":"2026-01-02T03:04:05Z","healthy":true}`},
		},
		{
			name: "node gone after being there",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				s.SyncNode(readyNode())
				s.SyncNode(nil)
			},
			healthz: response{503, `{"lastUpdated":"0001-01-01T00:00:00Z","currentTime":"2026-01-02T03:04:05Z","nodeEligible":false,"healthy":true}`},
			livez:   response{200, `{"lastUpdated":"2026-01-02T03:04:05Z","currentTime":"2026-01-02T03:04:05Z","healthy":true}`},
		},
		{
			name: "other taints are fine",
			steps: func(s *ProxyServer, c *clocktesting.FakePassiveClock) {
				n := readyNode()
				n.Spec.Taints = []v1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: v1.TaintEffectNoSchedule}}
				s.SyncNode(n)
			},
			healthz: response{200, `{"lastUpdated":"2026-01-02T03:04:05Z","currentTime":"2026-01-02T03:04:05Z","nodeEligible":true,"healthy":true}`},
			livez:   response{200, `{"lastUpdated":"2026-01-02T03:04:05Z","currentTime":"2026-01-02T03:04:05Z","healthy":true}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := newTestProxy(t)
			tt.steps(s, c)
			h := s.Handler()
			for _, r := range []struct {
				path string
				want response
			}{{"/healthz", tt.healthz}, {"/livez", tt.livez}} {
				code, hdr, body := get(h, r.path)
				if code != r.want.code || body != r.want.body {
					t.Errorf("GET %s = %d\n%s\nwant %d\n%s", r.path, code, body, r.want.code, r.want.body)
				}
				if got := hdr.Get("Content-Type"); got != "application/json" {
					t.Errorf("GET %s: Content-Type %q", r.path, got)
				}
				if got := hdr.Get("X-Content-Type-Options"); got != "nosniff" {
					t.Errorf("GET %s: X-Content-Type-Options %q", r.path, got)
				}
			}
			if got, want := s.IsHealthy(), tt.livez.code == 200; got != want {
				t.Errorf("IsHealthy() = %v, want %v", got, want)
			}
		})
	}
}

// codes is an Observer that counts status codes per path.
type codes map[string]int

func (c codes) Healthz(code int) { c[fmt.Sprint("/healthz ", code)]++ }
func (c codes) Livez(code int)   { c[fmt.Sprint("/livez ", code)]++ }

// TestProxyObserver: the Observer gets the status of every /healthz and
// /livez response, and of no other path.
func TestProxyObserver(t *testing.T) {
	got := codes{}
	s, err := newProxyServer(ProxyOpts{HealthTimeout: timeout, Observer: got}, clocktesting.NewFakePassiveClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/livez", "/livez", "/metrics"} {
		get(s.Handler(), path)
	}
	s.SyncNode(readyNode())
	get(s.Handler(), "/healthz")
	want := codes{"/healthz 503": 1, "/healthz 200": 1, "/livez 200": 2}
	if !maps.Equal(got, want) {
		t.Errorf("observed %v, want %v", got, want)
	}
}

func TestProxyOtherPaths(t *testing.T) {
	s, _ := newTestProxy(t)
	s.SyncNode(readyNode())
	for _, path := range []string{"/", "/healthz/", "/livez/x", "/metrics"} {
		if code, _, _ := get(s.Handler(), path); code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, code)
		}
	}
}

func TestNewProxyServerValidates(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := NewProxyServer(ProxyOpts{HealthTimeout: d}); err == nil || !strings.Contains(err.Error(), "healthTimeout") {
			t.Errorf("NewProxyServer(HealthTimeout: %v) error = %v, want one naming healthTimeout", d, err)
		}
	}
}

func TestProxyRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	type opened struct {
		requested string
		ln        net.Listener
	}
	openedc := make(chan opened, 1)
	listen := func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen(network, "127.0.0.1:0")
		if err == nil {
			openedc <- opened{addr, ln}
		}
		return ln, err
	}
	s, err := NewProxyServer(ProxyOpts{HealthTimeout: timeout, Listen: listen})
	if err != nil {
		t.Fatal(err)
	}
	s.SyncNode(readyNode())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	var o opened
	select {
	case o = <-openedc:
	case err := <-done:
		t.Fatalf("Run returned before listening: %v", err)
	}
	// The listener is open, so the request waits in its backlog until
	// Serve accepts it.
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + o.ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", resp.StatusCode)
	}
	if o.requested != DefaultBindAddress {
		t.Errorf("listened on %q, want the default %q", o.requested, DefaultBindAddress)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}

	boom := errors.New("address in use")
	s2, _ := NewProxyServer(ProxyOpts{HealthTimeout: timeout, BindAddress: "127.0.0.1:1", Listen: func(string, string) (net.Listener, error) { return nil, boom }})
	if err := s2.Run(context.Background()); !errors.Is(err, boom) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Run with a failing listen = %v, want it wrapped with the address", err)
	}
}
