//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasp-proxy/wasp/internal/netlab"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// Timeouts. converge bounds how long wasp may take to program a change
// (it syncs within a second; the rest is headroom for a loaded CI machine);
// ask bounds one echo request, and is how long a drop is waited for.
const (
	converge = 20 * time.Second
	ask      = 2 * time.Second
	dropWait = 1500 * time.Millisecond
)

// TestDataplane runs every scenario against one environment, once per
// dataplane (nftables, iptables-nft, iptables-legacy): one wasp process
// each, each scenario in its own namespace. Between dataplanes wasp is
// stopped and `wasp cleanup` must leave nothing behind.
func TestDataplane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	env := fw.Setup(ctx, t)
	for _, dp := range fw.Dataplanes(t) {
		if !t.Run(dp.Name, func(t *testing.T) { runDataplane(ctx, t, env, dp) }) && ctx.Err() != nil {
			return
		}
	}
}

func runDataplane(ctx context.Context, t *testing.T, env *fw.Env, dp fw.Dataplane) {
	env.UseDataplane(t, dp)
	w := env.StartWasp(t)
	s := &suite{env: env, ctx: ctx, prefix: "e2e-" + dp.Name}
	// The next dataplane must not see this one's Services (their
	// external IPs and VIPs would be claimed twice).
	defer s.deleteServices(t)
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, s *suite)
	}{
		{"ClusterIP TCP and UDP", testClusterIP},
		{"NodePort", testNodePort},
		{"externalIP", testExternalIP},
		{"LoadBalancer VIP", testLoadBalancer},
		{"loadBalancerSourceRanges", testSourceRanges},
		{"ClientIP affinity", testAffinity},
		{"internalTrafficPolicy Local", testInternalLocal},
		{"externalTrafficPolicy Local and health check", testExternalLocal},
		{"topology PreferSameZone", testPreferSameZone},
		{"topology PreferSameNode", testPreferSameNode},
		{"terminating fallback", testTerminatingFallback},
		{"no endpoints rejects", testNoEndpoints},
		{"scale down while connecting", testScaleDown},
		{"UDP flow follows its endpoint", testUDPConntrack},
		{"IPv6 ClusterIP", testIPv6},
		{"healthz and livez", testProxyHealth},
		{"metrics move with a change", testMetrics},
	} {
		if !t.Run(sc.name, func(t *testing.T) { sc.run(t, s) }) && ctx.Err() != nil {
			return
		}
	}
	w.Stop()
	expectCleanedUp(t, s)
}

// expectCleanedUp runs wasp cleanup and expects nothing of wasp's left in
// the proxy node's dataplane.
func expectCleanedUp(t *testing.T, s *suite) {
	t.Helper()
	if out, err := s.env.RunWasp(s.ctx, "cleanup"); err != nil {
		t.Fatalf("wasp cleanup: %v\n%s", err, out)
	}
	r, err := s.env.ReadRuleset()
	if err != nil {
		t.Fatal(err)
	}
	if r.Tables+r.Chains+r.Rules+r.Sets != 0 {
		t.Fatalf("after wasp cleanup, %s remain: %s", s.env.Dataplane().Name, r.Counts())
	}
}

type suite struct {
	env *fw.Env
	ctx context.Context
	// prefix names the suite's namespaces: prefix-1, prefix-2, ...
	// (default "e2e").
	prefix string
	n      atomic.Int32
}

// namespace returns a fresh Kubernetes namespace for a scenario.
func (s *suite) namespace(t *testing.T) string {
	return s.env.Namespace(s.ctx, t, s.namespaceName(s.n.Add(1)))
}

// namespaceName is the name of the suite's i-th namespace.
func (s *suite) namespaceName(i int32) string {
	prefix := s.prefix
	if prefix == "" {
		prefix = "e2e"
	}
	return fmt.Sprintf("%s-%d", prefix, i)
}

// forgetEarlyProbes deletes the proxy node's conntrack entries of
// requests to ip:port that were never translated (see
// fw.ForgetUntranslated): those of a waitFor that asked before the proxy
// programmed the Service. Without it, a counted connection that reuses
// such a request's source port would time out, in iptables mode, for a
// reason that is the test's own. Errors only weaken the test's guard, so
// they are not fatal.
func (s *suite) forgetEarlyProbes(ip netip.Addr, port uint16) {
	_, _ = fw.ForgetUntranslated(s.env.ProxyNS(), netip.AddrPortFrom(ip, port))
}

// deleteServices deletes the Services of every namespace the suite made.
func (s *suite) deleteServices(t *testing.T) {
	t.Helper()
	client, err := s.env.BulkClient()
	if err != nil {
		t.Fatal(err)
	}
	for i := int32(1); i <= s.n.Load(); i++ {
		ns := s.namespaceName(i)
		list, err := client.CoreV1().Services(ns).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			t.Errorf("list Services of %s: %v", ns, err)
			continue
		}
		for _, svc := range list.Items {
			if err := client.CoreV1().Services(ns).Delete(s.ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete Service %s/%s: %v", ns, svc.Name, err)
			}
		}
	}
}

func (s *suite) client() *netlab.NS { return s.env.Cluster.Client.NS }
func (s *suite) pod(name string) *netlab.NS {
	return s.env.Cluster.Pod(name).NS
}
func (s *suite) nodeA() *netlab.Node { return s.env.Cluster.Node(fw.ProxyNode) }

// answers asks n times and returns the count of each identity, failing t
// on any error.
func answers(t *testing.T, from *netlab.NS, network string, addr netip.Addr, port uint16, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		id, err := fw.Ask(from, network, addr, port, ask)
		if err != nil {
			t.Fatalf("%s %s: %v (answers so far %v)", network, netip.AddrPortFrom(addr, port), err, got)
		}
		got[id]++
	}
	return got
}

// waitFor waits until a request gets an answer from one of want. Then
// it forgets the requests that asked before the proxy programmed the
// address (forgetEarlyProbes), so that the test's next connections are
// not refused or dropped for a reason that is the test's own.
func (s *suite) waitFor(t *testing.T, from *netlab.NS, network string, addr netip.Addr, port uint16, want ...string) {
	t.Helper()
	fw.Eventually(t, converge, func() error {
		id, err := fw.Ask(from, network, addr, port, 500*time.Millisecond)
		if err != nil {
			return err
		}
		if !slices.Contains(want, id) {
			return fmt.Errorf("%s %s answered by %q, want one of %v", network, netip.AddrPortFrom(addr, port), id, want)
		}
		return nil
	})
	s.forgetEarlyProbes(addr, port)
}

// expectOnly asks n times and fails unless every answer is in want and
// every one of want answered.
func expectOnly(t *testing.T, from *netlab.NS, network string, addr netip.Addr, port uint16, n int, want ...string) {
	t.Helper()
	got := answers(t, from, network, addr, port, n)
	for id := range got {
		if !slices.Contains(want, id) {
			t.Fatalf("%s %s answered by %q; answers %v, want only %v", network, netip.AddrPortFrom(addr, port), id, got, want)
		}
	}
	for _, w := range want {
		if got[w] == 0 {
			t.Fatalf("%s %s never answered by %q in %d requests: %v", network, netip.AddrPortFrom(addr, port), w, n, got)
		}
	}
	t.Logf("%s %s: %v", network, netip.AddrPortFrom(addr, port), got)
}

// expectDrop waits until requests time out (the packets are dropped).
func expectDrop(t *testing.T, from *netlab.NS, network string, addr netip.Addr, port uint16) {
	t.Helper()
	fw.Eventually(t, converge, func() error {
		id, err := fw.Ask(from, network, addr, port, dropWait)
		switch {
		case err == nil:
			return fmt.Errorf("%s %s answered by %q, want a drop", network, netip.AddrPortFrom(addr, port), id)
		case !fw.IsTimeout(err):
			return fmt.Errorf("%s %s: %v, want a timeout (drop)", network, netip.AddrPortFrom(addr, port), err)
		}
		return nil
	})
}

// expectReject waits until requests are refused (ICMP reject).
func expectReject(t *testing.T, from *netlab.NS, network string, addr netip.Addr, port uint16) {
	t.Helper()
	fw.Eventually(t, converge, func() error {
		id, err := fw.Ask(from, network, addr, port, ask)
		switch {
		case err == nil:
			return fmt.Errorf("%s %s answered by %q, want a reject", network, netip.AddrPortFrom(addr, port), id)
		case !fw.IsRefused(err):
			return fmt.Errorf("%s %s: %v, want connection refused", network, netip.AddrPortFrom(addr, port), err)
		}
		return nil
	})
}

// expectUnknownPort checks a port of an active ClusterIP that no service
// port has: the nftables mode rejects it, as upstream's nftables mode; the
// iptables mode, as upstream's, has no rule for it, so nothing answers
// (the packet is routed on unchanged).
func expectUnknownPort(t *testing.T, s *suite, network string, ip netip.Addr, port uint16) {
	t.Helper()
	id, err := fw.Ask(s.client(), network, ip, port, ask)
	switch {
	case s.env.Dataplane().IPTables() && err == nil:
		t.Errorf("%s %s (no such service port) answered by %q, want no answer", network, netip.AddrPortFrom(ip, port), id)
	case !s.env.Dataplane().IPTables() && !fw.IsRefused(err):
		t.Errorf("%s %s (no such service port): %v, want connection refused", network, netip.AddrPortFrom(ip, port), err)
	}
}

func testClusterIP(t *testing.T, s *suite) {
	ns := s.namespace(t)
	for _, proto := range []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP} {
		network := strings.ToLower(string(proto))
		svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "echo-" + network, Namespace: ns, Protocol: proto})
		s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "a-2", "b-1")...)
		ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
		s.waitFor(t, s.client(), network, ip, 80, "a-1", "a-2", "b-1")
		expectOnly(t, s.client(), network, ip, 80, 60, "a-1", "a-2", "b-1")
		expectOnly(t, s.pod("a-3"), network, ip, 80, 60, "a-1", "a-2", "b-1")
		if proto == v1.ProtocolTCP {
			expectUnknownPort(t, s, network, ip, 81)
		}
	}
}

func testNodePort(t *testing.T, s *suite) {
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "np", Namespace: ns, Type: v1.ServiceTypeNodePort})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "b-1")...)
	port := fw.NodePort(t, svc)
	node := s.nodeA().IPv4
	s.waitFor(t, s.client(), "tcp", node, port, "a-1", "b-1")
	expectOnly(t, s.client(), "tcp", node, port, 60, "a-1", "b-1")
}

func testExternalIP(t *testing.T, s *suite) {
	ns := s.namespace(t)
	eip := netip.MustParseAddr("192.0.2.10")
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "eip", Namespace: ns, ExternalIPs: []string{eip.String()}})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-2", "b-2")...)
	s.waitFor(t, s.client(), "tcp", eip, 80, "a-2", "b-2")
	expectOnly(t, s.client(), "tcp", eip, 80, 60, "a-2", "b-2")
}

func testLoadBalancer(t *testing.T, s *suite) {
	ns := s.namespace(t)
	vip := netip.MustParseAddr("203.0.113.10")
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "lb", Namespace: ns, Type: v1.ServiceTypeLoadBalancer})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-3", "b-1")...)
	s.env.SetLoadBalancerIP(s.ctx, t, svc, vip.String())
	s.waitFor(t, s.client(), "tcp", vip, 80, "a-3", "b-1")
	expectOnly(t, s.client(), "tcp", vip, 80, 60, "a-3", "b-1")
}

func testSourceRanges(t *testing.T, s *suite) {
	ns := s.namespace(t)
	vip := netip.MustParseAddr("203.0.113.11")
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "fw", Namespace: ns, Type: v1.ServiceTypeLoadBalancer,
		SourceRanges: []string{"203.0.113.0/24"}})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1")...)
	s.env.SetLoadBalancerIP(s.ctx, t, svc, vip.String())
	// The client (198.51.100.200) is outside the range: dropped.
	expectDrop(t, s.client(), "tcp", vip, 80)
	// Its NodePort is not restricted by the ranges.
	s.waitFor(t, s.client(), "tcp", s.nodeA().IPv4, fw.NodePort(t, svc), "a-1")

	cur, err := s.env.Client.CoreV1().Services(ns).Get(s.ctx, svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24", s.env.Cluster.Client.IPv4.String() + "/32"}
	cur, err = s.env.Client.CoreV1().Services(ns).Update(s.ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, s.client(), "tcp", vip, 80, "a-1")

	// The VIP bound to the node, and only the node's IP in the ranges:
	// the node's own connection to the VIP leaves with the VIP as source,
	// which wasp allows because the Node's IP is in the ranges, as
	// upstream does.
	node := s.nodeA()
	if err := node.NS.AddAddrs("lo", netip.PrefixFrom(vip, vip.BitLen())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := node.NS.Command(context.Background(), "ip", "addr", "del", vip.String()+"/32", "dev", "lo").CombinedOutput(); err != nil {
			t.Errorf("remove the VIP from the node: %v: %s", err, out)
		}
	})
	cur.Spec.LoadBalancerSourceRanges = []string{node.IPv4.String() + "/32"}
	if _, err := s.env.Client.CoreV1().Services(ns).Update(s.ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectDrop(t, s.client(), "tcp", vip, 80)
	s.waitFor(t, node.NS, "tcp", vip, 80, "a-1")
}

func testAffinity(t *testing.T, s *suite) {
	ns := s.namespace(t)
	const timeout = 3
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "sticky", Namespace: ns, Affinity: timeout})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "a-2", "b-1")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1", "a-2", "b-1")

	got := answers(t, s.client(), "tcp", ip, 80, 50)
	if len(got) != 1 {
		t.Fatalf("50 connections with ClientIP affinity went to %v, want one endpoint", got)
	}
	var first string
	for id := range got {
		first = id
	}
	// After the timeout without traffic the choice is made afresh: with
	// three endpoints each fresh choice keeps the same one with p = 1/3,
	// so eight rounds all landing on it happen with p = 1/6561.
	for round := range 8 {
		time.Sleep((timeout + 1) * time.Second)
		id, err := fw.Ask(s.client(), "tcp", ip, 80, ask)
		if err != nil {
			t.Fatal(err)
		}
		if id != first {
			t.Logf("affinity moved from %s to %s after the timeout (round %d)", first, id, round+1)
			return
		}
	}
	t.Fatalf("affinity never expired: always %s after %d s idle", first, timeout+1)
}

func testInternalLocal(t *testing.T, s *suite) {
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "itp", Namespace: ns, InternalLocal: true})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "b-1", "b-2")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.pod("a-3"), "tcp", ip, 80, "a-1")
	expectOnly(t, s.pod("a-3"), "tcp", ip, 80, 30, "a-1")

	// Endpoints only on the other node: dropped here.
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("b-1", "b-2")...)
	expectDrop(t, s.pod("a-3"), "tcp", ip, 80)
}

// healthCheck GETs the Service's health-check node port on node-a from the
// client and returns the status code and the decoded body.
func healthCheck(s *suite, port int32) (int, map[string]any, http.Header, error) {
	return getJSON(s, netip.AddrPortFrom(s.nodeA().IPv4, uint16(port)), "/")
}

// getJSON GETs http://addr/path from the client namespace and decodes the
// JSON body.
func getJSON(s *suite, addr netip.AddrPort, path string) (int, map[string]any, http.Header, error) {
	c := &http.Client{Timeout: ask, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return s.client().Dial(ctx, network, addr)
		},
	}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(fmt.Sprintf("http://%s%s", addr, path))
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		return 0, nil, nil, fmt.Errorf("body %q: %w", b, err)
	}
	return resp.StatusCode, body, resp.Header, nil
}

func testExternalLocal(t *testing.T, s *suite) {
	ns := s.namespace(t)
	vip := netip.MustParseAddr("203.0.113.12")
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "etp", Namespace: ns, Type: v1.ServiceTypeLoadBalancer, ExternalLocal: true})
	if svc.Spec.HealthCheckNodePort == 0 {
		t.Fatal("the apiserver allocated no healthCheckNodePort")
	}
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "a-2", "b-1")...)
	s.env.SetLoadBalancerIP(s.ctx, t, svc, vip.String())
	port := fw.NodePort(t, svc)
	node := s.nodeA().IPv4
	s.waitFor(t, s.client(), "tcp", node, port, "a-1", "a-2")
	expectOnly(t, s.client(), "tcp", node, port, 40, "a-1", "a-2")
	// The VIP comes with the status update, which may reach wasp after
	// the NodePort's sync.
	s.waitFor(t, s.client(), "tcp", vip, 80, "a-1", "a-2")
	expectOnly(t, s.client(), "tcp", vip, 80, 40, "a-1", "a-2")

	hc := svc.Spec.HealthCheckNodePort
	fw.Eventually(t, converge, func() error {
		code, body, hdr, err := healthCheck(s, hc)
		if err != nil {
			return err
		}
		if code != http.StatusOK || body["localEndpoints"] != float64(2) || hdr.Get("X-Load-Balancing-Endpoint-Weight") != "2" {
			return fmt.Errorf("health check: %d %v %v, want 200 with 2 local endpoints", code, body, hdr)
		}
		svcBody, _ := body["service"].(map[string]any)
		if svcBody["namespace"] != ns || svcBody["name"] != "etp" {
			return fmt.Errorf("health check body names %v", body["service"])
		}
		return nil
	})

	// No local endpoint: external traffic is dropped, the health check
	// says 503 so the load balancer moves away.
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("b-1")...)
	expectDrop(t, s.client(), "tcp", node, port)
	fw.Eventually(t, converge, func() error {
		code, body, _, err := healthCheck(s, hc)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || body["localEndpoints"] != float64(0) {
			return fmt.Errorf("health check: %d %v, want 503 with 0 local endpoints", code, body)
		}
		return nil
	})
	// The ClusterIP still uses every endpoint (internal policy Cluster).
	s.waitFor(t, s.pod("a-3"), "tcp", fw.ClusterIP(t, svc, v1.IPv4Protocol), 80, "b-1")
}

func testPreferSameZone(t *testing.T, s *suite) {
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "zone", Namespace: ns, Distribution: v1.ServiceTrafficDistributionPreferSameZone})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol,
		fw.Endpoint{Pod: "a-1", ZoneHints: []string{fw.ZoneA}},
		fw.Endpoint{Pod: "a-2", ZoneHints: []string{fw.ZoneA}},
		fw.Endpoint{Pod: "b-1", ZoneHints: []string{fw.ZoneB}},
	)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1", "a-2")
	expectOnly(t, s.client(), "tcp", ip, 80, 40, "a-1", "a-2")
}

func testPreferSameNode(t *testing.T, s *suite) {
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "node", Namespace: ns, Distribution: v1.ServiceTrafficDistributionPreferSameNode})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol,
		fw.Endpoint{Pod: "a-2", ZoneHints: []string{fw.ZoneA}, NodeHints: []string{fw.ProxyNode}},
		fw.Endpoint{Pod: "b-1", ZoneHints: []string{fw.ZoneB}, NodeHints: []string{fw.OtherNode}},
		fw.Endpoint{Pod: "b-2", ZoneHints: []string{fw.ZoneB}, NodeHints: []string{fw.OtherNode}},
	)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-2")
	expectOnly(t, s.client(), "tcp", ip, 80, 30, "a-2")
}

func testTerminatingFallback(t *testing.T, s *suite) {
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "term", Namespace: ns})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol,
		fw.Endpoint{Pod: "a-1", NotReady: true, Terminating: true},
		fw.Endpoint{Pod: "b-1", NotReady: true, Terminating: true},
		fw.Endpoint{Pod: "b-2", NotReady: true, Terminating: true, NotServing: true},
	)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	// No ready endpoint anywhere: the serving terminating ones are used,
	// the non-serving one never.
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1", "b-1")
	expectOnly(t, s.client(), "tcp", ip, 80, 40, "a-1", "b-1")

	// One ready endpoint: the terminating ones are not used any more.
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol,
		fw.Endpoint{Pod: "a-1", NotReady: true, Terminating: true},
		fw.Endpoint{Pod: "a-3"},
	)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-3")
	expectOnly(t, s.client(), "tcp", ip, 80, 30, "a-3")
}

func testNoEndpoints(t *testing.T, s *suite) {
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "empty", Namespace: ns, Type: v1.ServiceTypeNodePort})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	expectReject(t, s.client(), "tcp", ip, 80)
	expectReject(t, s.pod("a-1"), "tcp", ip, 80)
	expectReject(t, s.client(), "tcp", s.nodeA().IPv4, fw.NodePort(t, svc))

	// Endpoints arrive: served.
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("b-2")...)
	s.waitFor(t, s.client(), "tcp", ip, 80, "b-2")
}

func testScaleDown(t *testing.T, s *suite) {
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "scale", Namespace: ns})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "a-2", "b-1", "b-2")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	expectOnlyEventually(t, s, ip, "a-1", "a-2", "b-1", "b-2")

	// A client keeps opening connections while the Service scales from
	// four endpoints to two. The removed pods keep answering (they are
	// gone from the Service, not dead), so no request may fail.
	tr := startTraffic(s, ip)
	time.Sleep(300 * time.Millisecond)
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "b-1")...)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1", "b-1")
	time.Sleep(500 * time.Millisecond)
	counts, errs := tr.stop()
	if len(errs) > 0 {
		t.Fatalf("%d of %d requests failed during the scale-down, first: %v", len(errs), len(errs)+sum(counts), errs[0])
	}
	t.Logf("during scale-down: %v", counts)
	expectOnly(t, s.client(), "tcp", ip, 80, 40, "a-1", "b-1")
}

// expectOnlyEventually waits until a round of requests is answered by
// every one of want and by nothing else, then checks a longer run.
func expectOnlyEventually(t *testing.T, s *suite, ip netip.Addr, want ...string) {
	t.Helper()
	fw.Eventually(t, converge, func() error {
		got := map[string]int{}
		for range 8 * len(want) {
			id, err := fw.Ask(s.client(), "tcp", ip, 80, ask)
			if err != nil {
				return err
			}
			got[id]++
		}
		for id := range got {
			if !slices.Contains(want, id) {
				return fmt.Errorf("answered by %q: %v, want only %v", id, got, want)
			}
		}
		for _, w := range want {
			if got[w] == 0 {
				return fmt.Errorf("not yet answered by %q: %v", w, got)
			}
		}
		return nil
	})
	expectOnly(t, s.client(), "tcp", ip, 80, 60, want...)
}

// traffic opens connection after connection (a new socket each, also for
// UDP) from the client to one Service address, one request each, until
// stopped.
type traffic struct {
	done chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	counts map[string]int // answers by identity
	errs   []error
}

// startTraffic sends TCP requests to ip:80 back to back.
func startTraffic(s *suite, ip netip.Addr) *traffic { return startTrafficTo(s, "tcp", ip, 80, 0) }

// startTrafficTo sends requests over network to ip:port, pausing pause
// after each. A test that runs traffic for long pauses: every closed TCP
// connection keeps its client port in TIME_WAIT for a minute, and back to
// back connections to one address use up the ports in less.
func startTrafficTo(s *suite, network string, ip netip.Addr, port uint16, pause time.Duration) *traffic {
	s.forgetEarlyProbes(ip, port)
	tr := &traffic{done: make(chan struct{}), counts: map[string]int{}}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		for {
			select {
			case <-tr.done:
				return
			default:
			}
			id, err := fw.Ask(s.client(), network, ip, port, ask)
			if err != nil {
				err = explainTimeout(s, network, ip, port, err)
			}
			tr.mu.Lock()
			if err != nil {
				tr.errs = append(tr.errs, err)
			} else {
				tr.counts[id]++
			}
			tr.mu.Unlock()
			if pause > 0 {
				time.Sleep(pause)
			}
		}
	}()
	return tr
}

// stop ends the traffic and returns the answers by identity and the
// failed requests.
func (tr *traffic) stop() (map[string]int, []error) {
	close(tr.done)
	tr.wg.Wait()
	return tr.counts, tr.errs
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func testUDPConntrack(t *testing.T, s *suite) {
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "udp", Namespace: ns, Protocol: v1.ProtocolUDP})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "udp", ip, 80, "a-1")

	// One UDP flow: the same socket, so the same conntrack entry.
	conn, err := s.client().Dial(s.ctx, "udp", netip.AddrPortFrom(ip, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := func() (string, error) {
		ctx, cancel := context.WithTimeout(s.ctx, ask)
		defer cancel()
		return netlab.Request(ctx, conn)
	}
	if id, err := req(); err != nil || id != "a-1" {
		t.Fatalf("flow answered by %q, %v; want a-1", id, err)
	}
	// a-1 leaves the Service but keeps answering: only the conntrack
	// cleanup can move the flow.
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-2")...)
	fw.Eventually(t, converge, func() error {
		id, err := req()
		if err != nil {
			return err
		}
		if id != "a-2" {
			return fmt.Errorf("flow still answered by %q", id)
		}
		return nil
	})
}

func testIPv6(t *testing.T, s *suite) {
	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "dual", Namespace: ns, DualStack: true, Type: v1.ServiceTypeNodePort})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "b-1")...)
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv6Protocol, fw.Ready("a-2", "b-2")...)
	ip6 := fw.ClusterIP(t, svc, v1.IPv6Protocol)
	ip4 := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip6, 80, "a-2", "b-2")
	expectOnly(t, s.client(), "tcp", ip6, 80, 40, "a-2", "b-2")
	// The Service has no UDP port.
	expectUnknownPort(t, s, "udp", ip6, 80)
	expectOnly(t, s.pod("a-3"), "tcp", ip6, 80, 40, "a-2", "b-2")
	expectOnly(t, s.client(), "tcp", ip4, 80, 40, "a-1", "b-1")
	s.waitFor(t, s.client(), "tcp", s.nodeA().IPv6, fw.NodePort(t, svc), "a-2", "b-2")
}

// testProxyHealth checks the proxy health server on its default port:
// healthy while syncs keep up, and /healthz (not /livez) failing once the
// node is marked for deletion by the cluster autoscaler.
func testProxyHealth(t *testing.T, s *suite) {
	addr := netip.AddrPortFrom(s.nodeA().IPv4, 10256)
	for _, path := range []string{"/healthz", "/livez"} {
		fw.Eventually(t, converge, func() error {
			code, body, hdr, err := getJSON(s, addr, path)
			if err != nil {
				return err
			}
			if code != http.StatusOK || body["healthy"] != true || hdr.Get("Content-Type") != "application/json" {
				return fmt.Errorf("%s: %d %v %v, want 200, healthy, JSON", path, code, body, hdr)
			}
			status, _ := body["status"].(map[string]any)
			if status["IPv4"] == nil || status["IPv6"] == nil {
				return fmt.Errorf("%s: status %v, want both families", path, body["status"])
			}
			if path == "/healthz" && body["nodeEligible"] != true {
				return fmt.Errorf("%s: nodeEligible %v, want true", path, body["nodeEligible"])
			}
			return nil
		})
	}

	nodes := s.env.Client.CoreV1().Nodes()
	node, err := nodes.Get(s.ctx, fw.ProxyNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	taint := v1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: v1.TaintEffectNoSchedule}
	node.Spec.Taints = append(node.Spec.Taints, taint)
	if _, err := nodes.Update(s.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		node, err := nodes.Get(s.ctx, fw.ProxyNode, metav1.GetOptions{})
		if err == nil {
			node.Spec.Taints = nil
			_, err = nodes.Update(s.ctx, node, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Error(err)
		}
	}()
	fw.Eventually(t, converge, func() error {
		code, body, _, err := getJSON(s, addr, "/healthz")
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || body["nodeEligible"] != false {
			return fmt.Errorf("/healthz on a node being deleted: %d %v, want 503, nodeEligible false", code, body)
		}
		return nil
	})
	if code, body, _, err := getJSON(s, addr, "/livez"); err != nil || code != http.StatusOK {
		t.Fatalf("/livez ignores the node: %d %v %v, want 200", code, body, err)
	}
}
