package fake_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/fake"
)

// Address plan: ClusterIPs 10.96.0.0/16 and fd00:10:96::/112, pods
// 10.244.0.0/16 and fd00:10:244::/56, external IPs 192.0.2.0/24
// (TEST-NET-1), LB VIPs 203.0.113.0/24 (TEST-NET-3), nodes and clients
// 198.51.100.0/24 (TEST-NET-2).

var (
	ip  = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

func ep(addr string, w uint32) backends.Endpoint {
	return backends.Endpoint{Addr: ip(addr), Port: 8080, Weight: w}
}

// svc returns a TCP service port "demo/<name>:http" on clusterIP:80.
func svc(name, clusterIP string, f func(*backends.Service)) backends.Service {
	fam := "IPv4"
	if ip(clusterIP).Is6() {
		fam = "IPv6"
	}
	s := backends.Service{
		Key: "demo/" + name + ":http/TCP/" + fam, Namespace: "demo", Name: name, PortName: "http", Protocol: "TCP",
		ClusterIP: ip(clusterIP), Port: 80,
	}
	if f != nil {
		f(&s)
	}
	return s
}

// goldenState covers every line of the Dump syntax.
func goldenState() *backends.State {
	return &backends.State{
		Family:            backends.IPv4,
		NodePortAddresses: []netip.Addr{ip("198.51.100.2"), ip("198.51.100.1")},
		NodeIPs:           []netip.Addr{ip("198.51.100.1")},
		ServiceCIDRs:      []netip.Prefix{pfx("10.96.0.0/16")},
		ClusterCIDRs:      []netip.Prefix{pfx("10.244.0.0/16")},
		MasqueradeAll:     true,
		Services: []backends.Service{
			svc("empty", "10.96.0.5", nil),
			svc("frontend", "10.96.0.20", func(s *backends.Service) {
				s.NodePort, s.HealthCheckNodePort, s.ExternalPolicyLocal = 30080, 32080, true
				s.ExternalIPs = []netip.Addr{ip("192.0.2.20")}
				s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.20")}
				s.LoadBalancerSourceRanges = []netip.Prefix{pfx("198.51.100.0/24")}
				s.HasAnyEndpoints = true
				s.Cluster = []backends.Endpoint{ep("10.244.2.20", 1), ep("10.244.1.20", 1)}
				s.Local = []backends.Endpoint{}
				s.Serving = []netip.Addr{ip("10.244.1.20"), ip("10.244.2.20")}
			}),
			svc("metrics", "10.96.0.30", func(s *backends.Service) {
				s.InternalPolicyLocal, s.HasAnyEndpoints = true, true
			}),
			svc("web", "10.96.0.10", func(s *backends.Service) {
				s.AffinityTimeout, s.HasAnyEndpoints = 10800, true
				s.Cluster = []backends.Endpoint{ep("10.244.1.10", 3), ep("10.244.2.10", 1)}
			}),
		},
	}
}

const goldenDump = `family ipv4
  node-port-addresses { 198.51.100.1, 198.51.100.2 }
  node-ips { 198.51.100.1 }
  service-cidrs { 10.96.0.0/16 }
  cluster-cidrs { 10.244.0.0/16 }
  masquerade-all

service demo/empty:http/TCP/IPv4
  cluster-ip 10.96.0.5 tcp dport 80
  internal cluster -> reject
  cluster unused
  local unused

service demo/frontend:http/TCP/IPv4
  cluster-ip 10.96.0.20 tcp dport 80
  external-ips { 192.0.2.20 }
  lb-vips { 203.0.113.20 }
  lb-source-ranges { 198.51.100.0/24 }
  node-port 30080
  health-check-node-port 32080
  internal cluster -> goto cluster
  external local -> drop
  cluster { 10.244.1.20:8080 weight 1, 10.244.2.20:8080 weight 1 }
  local { }
  serving { 10.244.1.20, 10.244.2.20 }

service demo/metrics:http/TCP/IPv4
  cluster-ip 10.96.0.30 tcp dport 80
  internal local -> drop
  cluster unused
  local unused

service demo/web:http/TCP/IPv4
  cluster-ip 10.96.0.10 tcp dport 80
  affinity client-ip timeout 10800s
  internal cluster -> goto cluster
  cluster { 10.244.1.10:8080 weight 3, 10.244.2.10:8080 weight 1 }
  local unused
family ipv6
  node-port-addresses any

service demo/dual:http/TCP/IPv6
  cluster-ip fd00:10:96::70 tcp dport 80
  internal cluster -> goto cluster
  cluster { [fd00:10:244:1::70]:8080 weight 1 }
  local unused
`

func ipv6State() *backends.State {
	return &backends.State{Family: backends.IPv6, Services: []backends.Service{
		svc("dual", "fd00:10:96::70", func(s *backends.Service) {
			s.HasAnyEndpoints, s.Cluster = true, []backends.Endpoint{ep("fd00:10:244:1::70", 1)}
		}),
	}}
}

func TestDumpGolden(t *testing.T) {
	f := fake.New()
	ctx := context.Background()
	for _, s := range []*backends.State{ipv6State(), goldenState()} {
		if _, err := f.Sync(ctx, s); err != nil {
			t.Fatalf("Sync: %v", err)
		}
	}
	if got := f.Dump(); got != goldenDump {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, goldenDump)
	}
}

func TestSyncStoresDeepCopy(t *testing.T) {
	f := fake.New()
	s := goldenState()
	if _, err := f.Sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	want := f.Dump()
	s.Services[1].Cluster[0].Weight = 9
	s.Services[1].ExternalIPs[0] = ip("192.0.2.99")
	s.NodePortAddresses[0] = ip("198.51.100.99")
	if got := f.Dump(); got != want {
		t.Errorf("changing the synced State changed the Fake:\n%s", got)
	}
	got := f.State(backends.IPv4)
	if !reflect.DeepEqual(got, goldenState()) {
		t.Errorf("State:\n got %+v\nwant %+v", got, goldenState())
	}
	if f.State(backends.IPv6) != nil {
		t.Errorf("State(IPv6) is not nil before any IPv6 Sync")
	}
}

func TestSyncInvalid(t *testing.T) {
	tests := []struct {
		name  string
		state func(*backends.State)
		want  []string // substrings of the error
	}{
		{"family", func(s *backends.State) { s.Family = 5 }, []string{"family: 5, want 4 or 6"}},
		{"node port address family", func(s *backends.State) { s.NodePortAddresses = []netip.Addr{ip("2001:db8::1")} },
			[]string{"nodePortAddresses[0]: 2001:db8::1 is not ipv4"}},
		{"service CIDR invalid", func(s *backends.State) { s.ServiceCIDRs = []netip.Prefix{{}} },
			[]string{"serviceCIDRs[0]: invalid prefix"}},
		{"cluster CIDR family", func(s *backends.State) { s.ClusterCIDRs = []netip.Prefix{pfx("fd00::/8")} },
			[]string{"clusterCIDRs[0]: fd00::/8 is not ipv4"}},
		{"unsorted", func(s *backends.State) { s.Services[0], s.Services[1] = s.Services[1], s.Services[0] },
			[]string{`services[1] "demo/empty:http/TCP/IPv4": key: not sorted: after "demo/frontend:http/TCP/IPv4"`}},
		{"duplicate", func(s *backends.State) { s.Services[1] = s.Services[0] },
			[]string{`services[1] "demo/empty:http/TCP/IPv4": key: duplicate of services[0]`}},
		{"empty key", func(s *backends.State) { s.Services[0].Key = "" }, []string{`services[0] "": key: empty`}},
		{"names and protocol", func(s *backends.State) {
			s.Services[0].Namespace, s.Services[0].Name, s.Services[0].Protocol = "", "", "ICMP"
		}, []string{"namespace: empty", "name: empty", `protocol: "ICMP", want TCP, UDP or SCTP`}},
		{"cluster IP missing", func(s *backends.State) { s.Services[0].ClusterIP = netip.Addr{} }, []string{"clusterIP: missing"}},
		{"cluster IP family", func(s *backends.State) { s.Services[0].ClusterIP = ip("fd00:10:96::5") },
			[]string{"clusterIP: fd00:10:96::5 is not ipv4"}},
		{"port zero", func(s *backends.State) { s.Services[0].Port = 0 }, []string{`"demo/empty:http/TCP/IPv4": port: 0`}},
		{"external IP family", func(s *backends.State) { s.Services[1].ExternalIPs[0] = ip("2001:db8::20") },
			[]string{"externalIPs[0]: 2001:db8::20 is not ipv4"}},
		{"LB VIP missing", func(s *backends.State) { s.Services[1].LoadBalancerVIPs[0] = netip.Addr{} },
			[]string{"loadBalancerVIPs[0]: missing"}},
		{"source range family", func(s *backends.State) { s.Services[1].LoadBalancerSourceRanges[0] = pfx("2001:db8::/64") },
			[]string{"loadBalancerSourceRanges[0]: 2001:db8::/64 is not ipv4"}},
		{"weight zero", func(s *backends.State) { s.Services[3].Cluster[1].Weight = 0 },
			[]string{`services[3] "demo/web:http/TCP/IPv4": cluster[1].weight: 0, want >= 1`}},
		{"endpoint family and port", func(s *backends.State) { s.Services[3].Cluster[0] = backends.Endpoint{Addr: ip("fd00::1"), Weight: 1} },
			[]string{"cluster[0].addr: fd00::1 is not ipv4", "cluster[0].port: 0"}},
		{"duplicate endpoint", func(s *backends.State) {
			s.Services[1].Local = []backends.Endpoint{ep("10.244.1.20", 1), ep("10.244.1.20", 2)}
		},
			[]string{"local[1]: 10.244.1.20:8080 duplicates local[0]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fake.New()
			ctx := context.Background()
			if _, err := f.Sync(ctx, goldenState()); err != nil {
				t.Fatal(err)
			}
			before := f.Dump()
			s := goldenState()
			tt.state(s)
			_, err := f.Sync(ctx, s)
			if !errors.Is(err, fake.ErrInvalidState) {
				t.Fatalf("Sync error %v, want ErrInvalidState", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if f.Dump() != before {
				t.Errorf("a failed Sync changed the programmed state")
			}
			if c := f.Counts(); c.Syncs != 2 || c.FailedSyncs != 1 {
				t.Errorf("Counts = %+v, want 2 syncs, 1 failed", c)
			}
		})
	}
	if _, err := fake.New().Sync(context.Background(), nil); !errors.Is(err, fake.ErrInvalidState) {
		t.Errorf("Sync(nil) = %v, want ErrInvalidState", err)
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	f := fake.New()
	if f.Dump() != "" {
		t.Errorf("new Fake dumps %q", f.Dump())
	}

	boom := errors.New("boom")
	f.FailNextSync(boom)
	if _, err := f.Sync(ctx, goldenState()); !errors.Is(err, boom) {
		t.Errorf("Sync after FailNextSync = %v, want boom", err)
	}
	if f.Dump() != "" {
		t.Errorf("the failed Sync programmed something")
	}
	// The failure is for one Sync only; the retry succeeds, twice.
	for range 2 {
		if _, err := f.Sync(ctx, goldenState()); err != nil {
			t.Fatalf("Sync: %v", err)
		}
	}
	if _, err := f.Sync(ctx, ipv6State()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got := f.Dump(); got != goldenDump {
		t.Errorf("Dump after repeated Sync:\n%s", got)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.Sync(canceled, goldenState()); !errors.Is(err, context.Canceled) {
		t.Errorf("Sync with a canceled context = %v", err)
	}

	if err := f.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if f.Dump() != "" || f.State(backends.IPv4) != nil {
		t.Errorf("Cleanup left %q", f.Dump())
	}
	if _, err := f.Sync(ctx, goldenState()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Sync(ctx, goldenState()); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Sync after Close = %v, want backends.ErrClosed", err)
	}
	if err := f.Cleanup(ctx); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Cleanup after Close = %v, want backends.ErrClosed", err)
	}
	if f.Dump() == "" {
		t.Errorf("Close removed the programmed state")
	}
	want := fake.Counts{Syncs: 7, FailedSyncs: 3, Cleanups: 2, Closes: 2}
	if c := f.Counts(); c != want {
		t.Errorf("Counts = %+v, want %+v", c, want)
	}
}

// TestTransitions applies a sequence of states and checks that each
// resulting Dump equals that of a fresh Fake given only that state: the
// Fake, like a real backend, must not depend on what it held before. The
// sequence is then replayed in random orders.
func TestTransitions(t *testing.T) {
	web := func(f func(*backends.Service)) backends.Service {
		return svc("web", "10.96.0.10", func(s *backends.Service) {
			s.HasAnyEndpoints, s.Cluster = true, []backends.Endpoint{ep("10.244.1.10", 1)}
			if f != nil {
				f(s)
			}
		})
	}
	states := []*backends.State{
		{Family: backends.IPv4},
		{Family: backends.IPv4, Services: []backends.Service{web(nil)}},
		{Family: backends.IPv4, Services: []backends.Service{web(func(s *backends.Service) {
			s.Cluster = append(s.Cluster, ep("10.244.2.10", 2))
		})}},
		{Family: backends.IPv4, Services: []backends.Service{web(func(s *backends.Service) {
			s.InternalPolicyLocal, s.Local = true, []backends.Endpoint{}
		})}},
		{Family: backends.IPv4, Services: []backends.Service{web(func(s *backends.Service) {
			s.HasAnyEndpoints, s.Cluster = false, nil
		})}},
		{Family: backends.IPv4, ServiceCIDRs: []netip.Prefix{pfx("10.96.0.0/16")}, Services: []backends.Service{
			svc("api", "10.96.0.40", nil), web(func(s *backends.Service) { s.NodePort = 30080 }),
		}},
		goldenState(),
		ipv6State(),
	}
	fresh := make([]string, len(states))
	for i, s := range states {
		f := fake.New()
		if _, err := f.Sync(context.Background(), s); err != nil {
			t.Fatalf("state %d: %v", i, err)
		}
		fresh[i] = f.Dump()
	}

	apply := func(t *testing.T, order []int) {
		t.Helper()
		f := fake.New()
		var v4, v6 string // the last dump of each family: Sync touches its own only
		for _, i := range order {
			if _, err := f.Sync(context.Background(), states[i]); err != nil {
				t.Fatalf("state %d: %v", i, err)
			}
			if states[i].Family == backends.IPv4 {
				v4 = fresh[i]
			} else {
				v6 = fresh[i]
			}
			if got := f.Dump(); got != v4+v6 {
				t.Fatalf("after state %d (order %v):\n%s\nwant:\n%s", i, order, got, v4+v6)
			}
		}
	}
	inOrder := make([]int, len(states))
	for i := range inOrder {
		inOrder[i] = i
	}
	apply(t, inOrder)

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	for range 20 {
		// Each state up to three times, shuffled: repeats exercise
		// idempotence.
		var order []int
		for i := range states {
			for range 1 + r.IntN(3) {
				order = append(order, i)
			}
		}
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		apply(t, order)
	}
}
