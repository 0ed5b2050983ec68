package healthcheck

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
)

var (
	web = types.NamespacedName{Namespace: "default", Name: "web"}
	dns = types.NamespacedName{Namespace: "kube-system", Name: "dns"}
	bad = types.NamespacedName{Namespace: "default", Name: "bad"}
)

// testProxy returns a ProxyServer that is healthy, or one whose IPv4
// update is overdue.
func testProxy(t *testing.T, healthy bool) *ProxyServer {
	t.Helper()
	s, c := newTestProxy(t)
	s.Updated(v1.IPv4Protocol)
	if !healthy {
		s.QueuedUpdate(v1.IPv4Protocol)
		c.SetTime(t0.Add(timeout))
	}
	return s
}

func TestServiceResponse(t *testing.T) {
	tests := []struct {
		name     string
		count    int
		healthy  bool
		wantCode int
	}{
		{name: "local endpoints, proxy healthy", count: 2, healthy: true, wantCode: 200},
		{name: "one local endpoint, proxy healthy", count: 1, healthy: true, wantCode: 200},
		{name: "no local endpoint, proxy healthy", count: 0, healthy: true, wantCode: 503},
		{name: "local endpoints, proxy unhealthy", count: 3, healthy: false, wantCode: 503},
		{name: "no local endpoint, proxy unhealthy", count: 0, healthy: false, wantCode: 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewServiceServer(ServiceOpts{Proxy: testProxy(t, tt.healthy), Listen: newFakeNet().listen})
			if err != nil {
				t.Fatal(err)
			}
			// Registered by hand: this test is about the handler.
			s.services[web] = &serviceHC{name: web, port: 30000, endpoints: tt.count}
			wantBody := fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}", tt.count, tt.healthy)
			for _, path := range []string{"/", "/healthz", "/any/path?x=1"} {
				code, hdr, body := get(s.handler(web), path)
				if code != tt.wantCode || body != wantBody {
					t.Errorf("GET %s = %d\n%s\nwant %d\n%s", path, code, body, tt.wantCode, wantBody)
				}
				for k, want := range map[string]string{
					"Content-Type":                     "application/json",
					"X-Content-Type-Options":           "nosniff",
					"X-Load-Balancing-Endpoint-Weight": fmt.Sprint(tt.count),
				} {
					if got := hdr.Get(k); got != want {
						t.Errorf("GET %s: %s = %q, want %q", path, k, got, want)
					}
				}
			}
		})
	}
}

// The node's eligibility is /healthz's business, not the services': a
// node being drained still reports its local endpoints as healthy, as
// upstream.
func TestServiceIgnoresNode(t *testing.T) {
	p := testProxy(t, true)
	p.SyncNode(nil)
	s, _ := NewServiceServer(ServiceOpts{Proxy: p})
	s.services[web] = &serviceHC{name: web, port: 30000, endpoints: 1}
	if code, _, body := get(s.handler(web), "/"); code != 200 || !strings.Contains(body, `"serviceProxyHealthy": true`) {
		t.Errorf("GET = %d %s, want 200 and a healthy proxy", code, body)
	}
}

func TestServiceClosedHandler(t *testing.T) {
	s, _ := NewServiceServer(ServiceOpts{Proxy: testProxy(t, true)})
	if code, _, _ := get(s.handler(web), "/"); code != 503 {
		t.Errorf("GET for a closed health check = %d, want 503", code)
	}
}

// fakeNet listens on 127.0.0.1 with a kernel-chosen port for every address
// asked for, remembering which, and fails the addresses in fail.
type fakeNet struct {
	mu     sync.Mutex
	opened map[string]net.Listener // by requested address, latest
	calls  []string
	fail   map[string]error
}

func newFakeNet() *fakeNet {
	return &fakeNet{opened: map[string]net.Listener{}, fail: map[string]error{}}
}

func (f *fakeNet) listen(network, addr string) (net.Listener, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, network+" "+addr)
	if err := f.fail[addr]; err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.opened[addr] = ln
	return ln, nil
}

func (f *fakeNet) setFail(addr string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, addr)
	} else {
		f.fail[addr] = err
	}
}

// url returns the real address behind a requested one.
func (f *fakeNet) url(t *testing.T, addr string) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	ln := f.opened[addr]
	if ln == nil {
		t.Fatalf("nothing ever listened on %s", addr)
	}
	return "http://" + ln.Addr().String() + "/"
}

func (f *fakeNet) callsSoFar() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// fetch GETs url and returns the status and body.
func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// refused checks that nothing answers at url any more.
func refused(t *testing.T, url string) {
	t.Helper()
	if resp, err := client.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("GET %s answered %d after its health check was closed", url, resp.StatusCode)
	}
}

func TestSyncServicesPortChange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fn := newFakeNet()
	s, err := NewServiceServer(ServiceOpts{Proxy: testProxy(t, true), Listen: fn.listen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })

	if err := s.SyncServices(ctx, map[types.NamespacedName]uint16{web: 30001, dns: 30010}); err != nil {
		t.Fatal(err)
	}
	s.SyncEndpoints(map[types.NamespacedName]int{web: 3, dns: 2, bad: 7})
	oldWeb := fn.url(t, "0.0.0.0:30001")
	if code, body := fetch(t, oldWeb); code != 200 || !strings.Contains(body, `"localEndpoints": 3`) {
		t.Fatalf("web before the change = %d %s, want 200 with 3 endpoints", code, body)
	}

	// web moves to 30002; dns stays.
	if err := s.SyncServices(ctx, map[types.NamespacedName]uint16{web: 30002, dns: 30010}); err != nil {
		t.Fatal(err)
	}
	refused(t, oldWeb)
	if code, body := fetch(t, fn.url(t, "0.0.0.0:30002")); code != 503 || !strings.Contains(body, `"localEndpoints": 0`) {
		t.Errorf("web on its new port = %d %s, want 503 with the count reset to 0", code, body)
	}
	if code, body := fetch(t, fn.url(t, "0.0.0.0:30010")); code != 200 || !strings.Contains(body, `"localEndpoints": 2`) {
		t.Errorf("dns, unchanged = %d %s, want 200 with its 2 endpoints", code, body)
	}
	want := []string{"tcp 0.0.0.0:30010", "tcp 0.0.0.0:30001", "tcp 0.0.0.0:30002"}
	if got := fn.callsSoFar(); !sameElements(got, want) {
		t.Errorf("listen calls %q, want %q (dns opened once)", got, want)
	}

	// A count missing from SyncEndpoints is 0.
	s.SyncEndpoints(map[types.NamespacedName]int{web: 1})
	if code, body := fetch(t, fn.url(t, "0.0.0.0:30010")); code != 503 || !strings.Contains(body, `"localEndpoints": 0`) {
		t.Errorf("dns without a count = %d %s, want 503 with 0", code, body)
	}

	// Removing a service closes it.
	dnsURL := fn.url(t, "0.0.0.0:30010")
	if err := s.SyncServices(ctx, map[types.NamespacedName]uint16{web: 30002}); err != nil {
		t.Fatal(err)
	}
	refused(t, dnsURL)

	s.Close(ctx)
	refused(t, fn.url(t, "0.0.0.0:30002"))
}

func TestSyncServicesListenFailure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fn := newFakeNet()
	addrs := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}
	s, err := NewServiceServer(ServiceOpts{Proxy: testProxy(t, true), Listen: fn.listen, Addresses: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	inUse := errors.New("address already in use")
	fn.setFail("[2001:db8::1]:30003", inUse) // bad's second address

	services := map[types.NamespacedName]uint16{web: 30001, bad: 30003}
	err = s.SyncServices(ctx, services)
	if !errors.Is(err, inUse) {
		t.Fatalf("SyncServices error = %v, want the listen error", err)
	}
	for _, w := range []string{"default/bad", "30003", "[2001:db8::1]:30003"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
	s.SyncEndpoints(map[types.NamespacedName]int{web: 1, bad: 1})
	for _, a := range []string{"192.0.2.1:30001", "[2001:db8::1]:30001"} {
		if code, _ := fetch(t, fn.url(t, a)); code != 200 {
			t.Errorf("web on %s = %d, want 200 despite bad's failure", a, code)
		}
	}
	// bad's first listener was closed again: all or nothing.
	refused(t, fn.url(t, "192.0.2.1:30003"))

	// The next sync retries bad.
	fn.setFail("[2001:db8::1]:30003", nil)
	if err := s.SyncServices(ctx, services); err != nil {
		t.Fatalf("retry: %v", err)
	}
	for _, a := range []string{"192.0.2.1:30003", "[2001:db8::1]:30003"} {
		if code, body := fetch(t, fn.url(t, a)); code != 503 || !strings.Contains(body, `"name": "bad"`) {
			t.Errorf("bad on %s after the retry = %d %s, want 503 (count not set yet)", a, code, body)
		}
	}
	s.SyncEndpoints(map[types.NamespacedName]int{web: 1, bad: 1})
	if code, _ := fetch(t, fn.url(t, "[2001:db8::1]:30003")); code != 200 {
		t.Errorf("bad with an endpoint = %d, want 200", code)
	}
}

func TestNewServiceServer(t *testing.T) {
	if _, err := NewServiceServer(ServiceOpts{}); err == nil || !strings.Contains(err.Error(), "proxy: required") {
		t.Errorf("NewServiceServer without a proxy: %v", err)
	}
	if _, err := NewServiceServer(ServiceOpts{Proxy: testProxy(t, true), Addresses: []netip.Addr{{}}}); err == nil || !strings.Contains(err.Error(), "addresses[0]") {
		t.Errorf("NewServiceServer with an invalid address: %v", err)
	}
	s, err := NewServiceServer(ServiceOpts{Proxy: testProxy(t, true), Addresses: []netip.Addr{
		netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.1"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"192.0.2.1", "2001:db8::1"}; !slices.Equal(s.hosts, want) {
		t.Errorf("hosts %q, want %q (sorted, distinct)", s.hosts, want)
	}
}

func sameElements(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestSetAddresses: new node-port addresses close the health checks on
// the old ones, and the next SyncServices opens them on the new ones; the
// same addresses change nothing.
func TestSetAddresses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fn := newFakeNet()
	s, err := NewServiceServer(ServiceOpts{Proxy: testProxy(t, true), Listen: fn.listen, Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.1")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	ports := map[types.NamespacedName]uint16{web: 30001}
	if err := s.SyncServices(ctx, ports); err != nil {
		t.Fatal(err)
	}
	old := fn.url(t, "192.0.2.1:30001")
	if s.SetAddresses(ctx, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) {
		t.Errorf("the same addresses reported as a change")
	}
	if !s.SetAddresses(ctx, []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::2")}) {
		t.Fatal("new addresses not reported as a change")
	}
	refused(t, old)
	if err := s.SyncServices(ctx, ports); err != nil {
		t.Fatal(err)
	}
	want := []string{"tcp 192.0.2.1:30001", "tcp 192.0.2.2:30001", "tcp [2001:db8::2]:30001"}
	if got := fn.callsSoFar(); !sameElements(got, want) {
		t.Errorf("listen calls %q, want %q", got, want)
	}
	if code, _ := fetch(t, fn.url(t, "192.0.2.2:30001")); code != 503 {
		t.Errorf("web on the new address = %d, want 503 (no endpoint counted yet)", code)
	}
}
