package nftables

import (
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
)

// goldenState4 has one service port per behaviour the plan knows.
func goldenState4() *backends.State { return backendtest.Golden4() }

// goldenState6 is a smaller IPv6 state with NodePorts on two addresses.
func goldenState6() *backends.State { return backendtest.Golden6() }

func TestGolden(t *testing.T) {
	tests := []struct {
		name  string
		state *backends.State
		file  string
	}{
		{"ipv4", goldenState4(), "golden-ipv4.nft"},
		{"ipv6", goldenState6(), "golden-ipv6.nft"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake()
			b, err := NewWithFake(Opts{Family: tt.state.Family}, f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Sync(context.Background(), tt.state); err != nil {
				t.Fatal(err)
			}
			got := f.Dump()
			golden(t, tt.file, got)
			if plan := Plan(tt.state.Family, DefaultTable, backends.DefaultMasqueradeBit, tt.state).Dump(); plan != got {
				t.Errorf("the plan's dump differs from the fake's:\n%s", lineDiff(plan, got))
			}
		})
	}
}

// TestPlanDeterministic: the same input gives the same plan, whether
// planned fresh or through a planner that reuses fragments.
func TestPlanDeterministic(t *testing.T) {
	for _, s := range []*backends.State{goldenState4(), goldenState6()} {
		a := Plan(s.Family, DefaultTable, backends.DefaultMasqueradeBit, s).Dump()
		for range 3 {
			if b := Plan(s.Family, DefaultTable, backends.DefaultMasqueradeBit, s).Dump(); a != b {
				t.Fatalf("two plans of one state differ:\n%s", lineDiff(a, b))
			}
		}
		p := newPlanner(config{family: s.Family, table: DefaultTable, mark: 1 << backends.DefaultMasqueradeBit})
		p.plan(&backends.State{Family: s.Family})
		p.plan(s)
		if b := p.plan(s).Dump(); a != b {
			t.Fatalf("a reusing planner differs from a fresh one:\n%s", lineDiff(a, b))
		}
	}
}

// TestPlanReusesFragments: an unchanged service port keeps its fragment,
// a changed one gets a new one, and a state-wide change renews them all.
func TestPlanReusesFragments(t *testing.T) {
	s := goldenState4()
	p := newPlanner(config{family: s.Family, table: DefaultTable, mark: 1 << backends.DefaultMasqueradeBit})
	a := p.plan(s)
	s2 := goldenState4()
	s2.Services[0].Cluster = append(s2.Services[0].Cluster, ep("10.244.3.1", 1))
	b := p.plan(s2)
	for i := range a.Services {
		if same := a.Services[i] == b.Services[i]; same != (i != 0) {
			t.Errorf("service %q: fragment reused %v, want %v", a.Services[i].Key, same, i != 0)
		}
	}
	s3 := goldenState4()
	s3.Services[0].Cluster = append(s3.Services[0].Cluster, ep("10.244.3.1", 1))
	s3.MasqueradeAll = true
	c := p.plan(s3)
	for i := range b.Services {
		if b.Services[i] == c.Services[i] {
			t.Errorf("service %q: fragment reused across a MasqueradeAll change", b.Services[i].Key)
		}
	}
}

func TestNumgenWeights(t *testing.T) {
	chain := func(i int) string { return string(rune('A' + i)) }
	tests := []struct {
		name    string
		weights []uint32
		want    string
	}{
		{"one", []uint32{5}, "numgen random mod 1 vmap { 0 : goto A }"},
		{"equal weights as upstream", []uint32{3, 3, 3}, "numgen random mod 3 vmap { 0 : goto A, 1 : goto B, 2 : goto C }"},
		{"reduced by the gcd", []uint32{6, 2}, "numgen random mod 4 vmap { 0-2 : goto A, 3 : goto B }"},
		{"nine to one", []uint32{9, 1}, "numgen random mod 10 vmap { 0-8 : goto A, 9 : goto B }"},
		{"coprime", []uint32{2, 3, 5}, "numgen random mod 10 vmap { 0-1 : goto A, 2-4 : goto B, 5-9 : goto C }"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var eps []backends.Endpoint
			for _, w := range tt.weights {
				eps = append(eps, backends.Endpoint{Weight: w})
			}
			if got := numgen(eps, chain).String(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	t.Run("huge weights fit 32 bits", func(t *testing.T) {
		// backends.NormalizeWeights scales them; the ranges follow.
		eps := []backends.Endpoint{{Weight: 1<<32 - 1}, {Weight: 1<<32 - 2}, {Weight: 1}}
		n := numgen(eps, chain)
		if n.Mod == 0 || n.Mod > 1<<31+3 || n.Targets[2].Lo != n.Targets[2].Hi {
			t.Errorf("got %s", n)
		}
		if got := n.Targets[len(n.Targets)-1].Hi + 1; got != n.Mod {
			t.Errorf("targets end at %d, modulus %d", got, n.Mod)
		}
	})
}

func TestChainNames(t *testing.T) {
	s := svc("web", "10.96.0.10", nil)
	n := newServiceNames(&s)
	if !strings.HasPrefix(n.cluster, "service-") || !strings.HasSuffix(n.cluster, "-demo/web/tcp/http") || len(n.base) != 8+1+len("demo/web/tcp/http") {
		t.Errorf("cluster chain %q", n.cluster)
	}
	long := backends.Service{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("s", 63), PortName: strings.Repeat("p", 63), Protocol: "SCTP"}
	e := backends.Endpoint{Addr: ip("fd00:1234:5678:9abc:def0:1234:5678:9abc"), Port: 65535}
	base := endpointBase(&long, &e)
	if len(endpointChainPrefix+base) > nameMax || !strings.HasSuffix(base, "...") {
		t.Errorf("endpoint name %d characters, want at most %d and cut: %q", len(endpointChainPrefix+base), nameMax, base)
	}
	e2 := e
	e2.Port = 65534
	if endpointBase(&long, &e2) == base {
		t.Error("two endpoints whose names are cut share a name")
	}
	if strings.Contains(endpointBase(&s, &e), ":") {
		t.Error("IPv6 colons in a name")
	}
}

// TestFirewallNodeException: the VIPs are allowed as sources when one of
// State.NodeIPs is in loadBalancerSourceRanges, whatever the NodePort
// addresses.
func TestFirewallNodeException(t *testing.T) {
	lb := svc("lb", "10.96.0.15", func(s *backends.Service) {
		s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.15")}
		s.LoadBalancerSourceRanges = []netip.Prefix{pfx("198.51.100.0/25")}
		s.Cluster = []backends.Endpoint{ep("10.244.1.15", 1)}
	})
	for _, tt := range []struct {
		name      string
		nodeIPs   []netip.Addr
		nodePorts []netip.Addr
		want      string
	}{
		{"node in the ranges", []netip.Addr{ip("198.51.100.11")}, nil, "ip saddr != { 198.51.100.0/25, 203.0.113.15 } drop"},
		{"node outside", []netip.Addr{ip("198.51.100.200")}, nil, "ip saddr != { 198.51.100.0/25 } drop"},
		{"NodePort addresses do not count", nil, []netip.Addr{ip("198.51.100.11")}, "ip saddr != { 198.51.100.0/25 } drop"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &backends.State{Family: backends.IPv4, NodeIPs: tt.nodeIPs, NodePortAddresses: tt.nodePorts, Services: []backends.Service{lb}}
			if got := Plan(backends.IPv4, DefaultTable, backends.DefaultMasqueradeBit, s).Dump(); !strings.Contains(got, "\t\t"+tt.want+"\n") {
				t.Errorf("no %q in\n%s", tt.want, got)
			}
		})
	}
}

// TestIdenticalCoversEveryField: identical reads every field of a service
// port: a copy with any one field changed (a slice to a copy of it) is
// not identical, so the planner never reuses the plan of a changed port.
func TestIdenticalCoversEveryField(t *testing.T) {
	base := goldenState4().Services[0]
	base.ExternalIPs = []netip.Addr{ip("192.0.2.1")}
	base.LoadBalancerVIPs = []netip.Addr{ip("192.0.2.2")}
	base.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	base.Local = []backends.Endpoint{ep("10.244.1.10", 1)}
	base.Serving = []netip.Addr{ip("10.244.1.10")}
	if c := base; !identical(&base, &c) {
		t.Fatal("a copy is not identical")
	}
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		c := base
		f := reflect.ValueOf(&c).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Uint8, reflect.Uint16, reflect.Uint32:
			f.SetUint(f.Uint() + 1)
		case reflect.Slice:
			f.Set(reflect.AppendSlice(reflect.MakeSlice(f.Type(), 0, f.Len()), f)) // equal, another array
		case reflect.Struct: // netip.Addr
			f.Set(reflect.ValueOf(ip("10.96.9.9")))
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", v.Type().Field(i).Name, f.Kind())
		}
		if identical(&base, &c) {
			t.Errorf("field %s changed, still identical", v.Type().Field(i).Name)
		}
	}
	var nilSet, emptySet backends.Service
	emptySet.Cluster = []backends.Endpoint{}
	if identical(&nilSet, &emptySet) {
		t.Error("a nil and an empty endpoint set are identical")
	}
}
