package iptables

import (
	"context"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// TestChainNameVectors: with Prefix in place of "KUBE-", wasp's chain
// names are upstream's (its test vectors), and fit MaxChainName.
func TestChainNameVectors(t *testing.T) {
	kube := func(name string) string { return "KUBE-" + strings.TrimPrefix(name, Prefix) }
	p80 := func(ns, name string) backends.Service {
		return backends.Service{Namespace: ns, Name: name, PortName: "p80", Protocol: backends.TCP}
	}
	tests := []struct {
		name, got, want string
	}{
		{"svc1 cluster", newServiceChains(ptr(p80("ns1", "svc1"))).svc, "KUBE-SVC-XPGD46QRK7WJZT7O"},
		{"svc1 endpoint", endpointName(newServiceChains(ptr(p80("ns1", "svc1"))).base, ptr(ep4("10.180.0.1", 80))), "KUBE-SEP-SXIVWICOYRO3J4NJ"},
		{"svc2 hash", newServiceChains(ptr(p80("ns2", "svc2"))).ext, "KUBE-EXT-GNZBNJ2PO5MGZ6GT"},
		{"svc5 hash", newServiceChains(ptr(p80("ns5", "svc5"))).fw, "KUBE-FW-NUKIZ6OKUXPJNT4C"},
		{"svc4 endpoint", endpointName(newServiceChains(ptr(p80("ns4", "svc4"))).base, ptr(ep4("10.180.0.4", 80))), "KUBE-SEP-UKSFD7AGPMPPLUHC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.HasPrefix(tt.got, Prefix) || kube(tt.got) != tt.want {
				t.Errorf("got %s, want %s with prefix %s", tt.got, tt.want, Prefix)
			}
			if len(tt.got) > MaxChainName {
				t.Errorf("%s: %d characters, over %d", tt.got, len(tt.got), MaxChainName)
			}
		})
	}
	// xt_recent takes names of up to 200 bytes (XT_RECENT_NAME_LEN with
	// the terminating zero), ipset up to maxSetName.
	if name := endpointName(newServiceChains(ptr(p80("ns1", "svc1"))).base, ptr(ep4("10.180.0.1", 80))); len(name) > 199 {
		t.Errorf("affinity list %s: over 199 bytes", name)
	}
	for _, set := range []string{SetHairpin4, SetHairpin6} {
		if len(set) > maxSetName {
			t.Errorf("set %s: over %d bytes", set, maxSetName)
		}
	}
	if n := newServiceChains(&backends.Service{Namespace: "a", Name: "b", Protocol: backends.UDP}); n.base != "a/budp" {
		t.Errorf("an unnamed port hashes %q, want a/budp", n.base)
	}
	for _, name := range []string{ChainServices, ChainNodePorts, ChainExternalServices, ChainForward, ChainProxyFirewall,
		ChainFirewall, ChainPostrouting, ChainMarkMasq, ChainMasqOffCluster} {
		if len(name) > MaxChainName || isServiceChain(name) {
			t.Errorf("fixed chain %s: too long, or taken for a service chain", name)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func ep4(addr string, port uint16) backends.Endpoint {
	return backends.Endpoint{Addr: ip(addr), Port: port, Weight: 1}
}

// TestProbabilities: equal weights give upstream's strings; for random
// weights, the chance of reaching each rule times its probability is the
// endpoint's share of the weights.
func TestProbabilities(t *testing.T) {
	eps := func(ws ...uint32) []backends.Endpoint {
		out := make([]backends.Endpoint, len(ws))
		for i, w := range ws {
			out[i] = backends.Endpoint{Weight: w}
		}
		return out
	}
	for _, tt := range []struct {
		name    string
		weights []uint32
		want    string
	}{
		{"one", []uint32{7}, ""},
		{"two equal", []uint32{1, 1}, "0.5000000000"},
		{"three equal, as upstream", []uint32{4, 4, 4}, "0.3333333333 0.5000000000"},
		{"four equal, as upstream", []uint32{1, 1, 1, 1}, "0.2500000000 0.3333333333 0.5000000000"},
		{"three to one", []uint32{3, 1}, "0.7500000000"},
		{"3, 1, 1", []uint32{3, 1, 1}, "0.6000000000 0.5000000000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(Probabilities(eps(tt.weights...)), " "); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 1000 {
		n := 1 + r.IntN(10)
		ws := make([]uint32, n)
		for i := range ws {
			ws[i] = 1 + uint32(r.IntN(1000))
			if trial%10 == 0 {
				ws[i] = 1 + uint32(r.Uint64N(1<<32-1)) // scaled by NormalizeWeights
			}
		}
		norm, total := backends.NormalizeWeights(eps(ws...))
		probs := Probabilities(eps(ws...))
		if len(probs) != max(n-1, 0) {
			t.Fatalf("weights %v: %d probabilities", ws, len(probs))
		}
		reach := 1.0
		for i := range n {
			p := 1.0
			if i < n-1 {
				var err error
				if p, err = strconv.ParseFloat(probs[i], 64); err != nil {
					t.Fatal(err)
				}
			}
			want := float64(norm[i]) / float64(total)
			if got := reach * p; math.Abs(got-want) > 1e-9 {
				t.Fatalf("weights %v: endpoint %d gets %.12f, want %.12f", ws, i, got, want)
			}
			reach *= 1 - p
		}
	}
}

func TestGolden(t *testing.T) {
	for _, tt := range []struct {
		name  string
		opts  Opts
		state *backends.State
		file  string
	}{
		{"ipv4", Opts{Family: backends.IPv4, LocalhostNodePorts: true}, goldenState4(), "golden-ipv4.txt"},
		{"ipv6", Opts{Family: backends.IPv6, TCPBeLiberal: true}, goldenState6(), "golden-ipv6.txt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake()
			b, err := NewWithFake(tt.opts, f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Sync(context.Background(), tt.state); err != nil {
				t.Fatal(err)
			}
			rs, err := Plan(tt.opts, true, tt.state)
			if err != nil {
				t.Fatal(err)
			}
			// The restore, then the hairpin set the first Sync made.
			golden(t, tt.file, rs.Restore()+f.SaveSets())
			var wantSet []string
			for e := range rs.Hairpin() {
				wantSet = append(wantSet, e.String())
			}
			slices.Sort(wantSet)
			if got := f.setEntries(hairpinSet(tt.opts.Family)); !slices.Equal(got, wantSet) || len(got) == 0 {
				t.Errorf("hairpin set after the first sync %v, want the plan's %v", got, wantSet)
			}
			// The first Sync programs the plan's chains (it skips those
			// the jump rules made, empty, and that the plan has empty).
			planned := NewFake()
			if err := planned.ensureSet(context.Background(), hairpinSet(tt.opts.Family), tt.opts.Family); err != nil {
				t.Fatal(err)
			}
			if err := planned.restore(context.Background(), restoreText(rs.Restore())); err != nil {
				t.Fatal(err)
			}
			got := chainRules(f)
			for name, rules := range chainRules(planned) {
				if got[name] != rules {
					t.Errorf("chain %s after the first sync:\n%s\nwant\n%s", name, got[name], rules)
				}
			}
		})
	}
}

// TestPlanDeterministic: the same input gives the same plan, whether
// planned fresh or through a planner that reuses fragments.
func TestPlanDeterministic(t *testing.T) {
	for _, s := range []*backends.State{goldenState4(), goldenState6()} {
		o := Opts{Family: s.Family}
		a := mustPlan(t, o, s).Restore()
		for range 3 {
			if b := mustPlan(t, o, s).Restore(); a != b {
				t.Fatalf("two plans of one state differ:\n%s", lineDiff(a, b))
			}
		}
		cfg, _ := o.config()
		cfg.randomFully = true
		p := newPlanner(cfg)
		p.plan(&backends.State{Family: s.Family})
		p.plan(s)
		if b := p.plan(s).Restore(); a != b {
			t.Fatalf("a reusing planner differs from a fresh one:\n%s", lineDiff(a, b))
		}
	}
}

func mustPlan(t testing.TB, o Opts, s *backends.State) *Ruleset {
	t.Helper()
	rs, err := Plan(o, true, s)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestPlanReusesFragments: an unchanged service port keeps its Fragment,
// a changed one gets a new one, and a state-wide change renews them all.
func TestPlanReusesFragments(t *testing.T) {
	s := goldenState4()
	cfg, _ := Opts{Family: backends.IPv4}.config()
	p := newPlanner(cfg)
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

// TestMasqueradeOffCluster: one cluster CIDR is matched in place, as
// upstream; several go through ChainMasqOffCluster.
func TestMasqueradeOffCluster(t *testing.T) {
	s := goldenState4()
	one := mustPlan(t, Opts{Family: backends.IPv4}, s).Restore()
	if !strings.Contains(one, `! -s 10.244.0.0/16 -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j WASP-MARK-MASQ`) {
		t.Errorf("no in-place off-cluster match:\n%s", one)
	}
	s.ClusterCIDRs = append(s.ClusterCIDRs, pfx("10.245.0.0/16"))
	two := mustPlan(t, Opts{Family: backends.IPv4}, s).Restore()
	for _, want := range []string{
		"-A WASP-MASQ-OFF-CLUSTER -s 10.244.0.0/16 -j RETURN\n-A WASP-MASQ-OFF-CLUSTER -s 10.245.0.0/16 -j RETURN\n-A WASP-MASQ-OFF-CLUSTER -j WASP-MARK-MASQ\n",
		`-d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j WASP-MASQ-OFF-CLUSTER`,
	} {
		if !strings.Contains(two, want) {
			t.Errorf("no %q in\n%s", want, two)
		}
	}
}

// TestLargeCluster: above LargeClusterEndpoints endpoints, the DNAT
// rules of the policy chains carry no comment; the others keep theirs.
func TestLargeCluster(t *testing.T) {
	for _, tt := range []struct {
		services int
		large    bool
	}{{100, false}, {101, true}} {
		in := mustPlan(t, Opts{Family: backends.IPv4}, largeState(tt.services, 10)).Restore()
		sepComments := strings.Contains(in, `-m comment --comment "bench/svc-00000:http -> `)
		if sepComments == tt.large || !strings.Contains(in, `--comment "bench/svc-00000:http cluster IP"`) {
			t.Errorf("%d services: endpoint comments %v, want %v", tt.services, sepComments, !tt.large)
		}
	}
}

// A hairpin entry survives its 20-byte key, in either family, with every
// protocol.
func TestEntryKey(t *testing.T) {
	for _, a := range []string{"10.244.1.10", "0.0.0.1", "fd00:10:244::a", "::1.2.3.4", "::"} {
		for _, p := range []backends.Protocol{backends.TCP, backends.UDP, backends.SCTP} {
			e := HairpinEntry{Addr: netip.MustParseAddr(a), Protocol: p, Port: 8080}
			if got := e.key().entry(); got != e {
				t.Errorf("%v: key().entry() = %v", e, got)
			}
		}
	}
	v4, v6 := HairpinEntry{Addr: netip.MustParseAddr("10.0.0.1"), Protocol: backends.TCP, Port: 80}, HairpinEntry{Addr: netip.MustParseAddr("::a00:1"), Protocol: backends.TCP, Port: 80}
	if v4.key() == v6.key() {
		t.Errorf("%v and %v have the same key", v4, v6)
	}
}
