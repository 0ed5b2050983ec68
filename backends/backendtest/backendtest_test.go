package backendtest_test

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	bt "github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/backends/fake"
)

func TestPlan(t *testing.T) {
	ip := netip.MustParseAddr
	tests := []struct {
		name      string
		got, want netip.Addr
	}{
		{"ClusterIP 15", bt.ClusterIP(backends.IPv4, 15), ip("10.96.0.15")},
		{"ClusterIP 15, IPv6", bt.ClusterIP(backends.IPv6, 15), ip("fd00:10:96::15")},
		{"endpoint 15 of node 2", bt.EndpointIP(backends.IPv4, 2, 15), ip("10.244.2.15")},
		{"endpoint 15 of node 2, IPv6", bt.EndpointIP(backends.IPv6, 2, 15), ip("fd00:10:244:2::15")},
		{"node 1", bt.NodeIP(backends.IPv4, 1), ip("198.51.100.11")},
		{"node 1, IPv6", bt.NodeIP(backends.IPv6, 1), ip("2001:db8:100::11")},
		{"client", bt.ClientIP(backends.IPv4), ip("198.51.100.200")},
		{"client, IPv6", bt.ClientIP(backends.IPv6), ip("2001:db8:100::200")},
		{"external IP 15", bt.ExternalIP(backends.IPv4, 15), ip("192.0.2.15")},
		{"VIP 15, IPv6", bt.VIP(backends.IPv6, 15), ip("2001:db8:203::15")},
		{"absent", bt.AbsentIP(backends.IPv4), ip("198.51.100.99")},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, tt.got, tt.want)
		}
	}
	if p := bt.NodePort(15); p != 30015 {
		t.Errorf("NodePort(15) = %d", p)
	}
}

func TestService(t *testing.T) {
	s := bt.Service("dns", bt.ClusterIP(backends.IPv6, 17), bt.UDP(), bt.Port("dns", 53),
		bt.Endpoints(bt.Endpoint(bt.EndpointIP(backends.IPv6, 1, 17), 2)))
	if s.Key != "demo/dns:dns/UDP/IPv6" || !s.HasAnyEndpoints || s.Port != 53 || s.Cluster[0].Port != 8080 || s.Local != nil {
		t.Errorf("got %+v", s)
	}
	if u := bt.UDPTwin(bt.Service("web", bt.ClusterIP(backends.IPv4, 10))); u.Key != "demo/web:http/UDP/IPv4" || u.HasAnyEndpoints {
		t.Errorf("UDP twin %+v", u)
	}
	if l := bt.Service("l", bt.ClusterIP(backends.IPv4, 14), bt.InternalLocal(), bt.Local()); l.Local == nil || len(l.Local) != 0 || l.HasAnyEndpoints {
		t.Errorf("an empty Local set: %+v", l)
	}
}

// TestStatesValid: every State the package builds is valid, in both
// families, and To6 moves every address to IPv6.
func TestStatesValid(t *testing.T) {
	states := append([]*backends.State{bt.Golden4(), bt.Golden6()}, bt.Transitions()...)
	for _, s := range bt.Transitions() {
		states = append(states, bt.To6(s))
	}
	states = append(states, bt.To6(bt.Golden4()))
	for i, s := range states {
		if err := backends.Validate(s); err != nil {
			t.Errorf("state %d (%s): %v", i, s.Family, err)
		}
	}
	s6 := bt.To6(bt.Golden4())
	d := fake.DumpState(s6)
	for _, want := range []string{
		"service demo/lb:http/TCP/IPv6", "cluster-ip fd00:10:96::15 tcp dport 80", "lb-vips { 2001:db8:203::15 }",
		"external-ips { 2001:db8:192::15 }", "lb-source-ranges { 2001:db8:100::/121, 2001:db8:192::/64 }",
		"local { [fd00:10:244:1::15]:8080 weight 1 }", "node-ips { 2001:db8:100::11 }",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("To6(Golden4()) lacks %q:\n%s", want, d)
		}
	}
	if a := ipv4.FindString(d); a != "" {
		t.Errorf("To6(Golden4()) keeps the IPv4 address %s:\n%s", a, d)
	}
}

var ipv4 = regexp.MustCompile(`\b\d+\.\d+\.\d+\.\d+\b`)

// The suites must be able to fail. Each broken backend below runs a suite
// in a child process (the suite's failure must not fail this test), which
// must fail with the message of the defect.
const brokenEnv = "BACKENDTEST_BROKEN"

// sticky never forgets a service port: it syncs the union of what it
// was given.
type sticky struct {
	*fake.Fake
	seen map[string]backends.Service
}

func (s *sticky) Sync(ctx context.Context, st *backends.State) (backends.SyncResult, error) {
	for _, v := range st.Services {
		s.seen[v.Key] = v
	}
	u := st.Clone()
	u.Services = nil
	for _, v := range s.seen {
		u.Services = append(u.Services, v)
	}
	u.Services = bt.SortServices(u.Services)
	return s.Fake.Sync(ctx, u)
}

// meddler clears the NodeIPs of the State it is given.
type meddler struct{ *fake.Fake }

func (m meddler) Sync(ctx context.Context, st *backends.State) (backends.SyncResult, error) {
	st.NodeIPs = nil
	return m.Fake.Sync(ctx, st)
}

func brokenHarness(kind string) bt.Harness {
	h := bt.Harness{
		New: func(t *testing.T, _ backends.Family, _ string) backends.Backend {
			switch kind {
			case "sticky":
				return &sticky{Fake: fake.New(), seen: map[string]backends.Service{}}
			case "meddler":
				return meddler{fake.New()}
			}
			return fake.New()
		},
		Dump: func(_ *testing.T, b backends.Backend) string {
			switch b := b.(type) {
			case *sticky:
				return b.Fake.Dump()
			case meddler:
				return b.Fake.Dump()
			}
			return b.(*fake.Fake).Dump()
		},
	}
	switch kind {
	case "noisy":
		h.Changes = func(backends.Backend) int { return 1 }
	case "typo":
		h.Unsupported = map[string]string{"Idempotence/ipv4/goldn": "a typo"}
	case "no suite":
		h.Unsupported = map[string]string{"Idempotency/ipv4": "a typo"}
	}
	return h
}

func TestBrokenBackend(t *testing.T) {
	kind := os.Getenv(brokenEnv)
	if kind == "" {
		t.Skip("run by TestSuitesCatchDefects")
	}
	h := brokenHarness(kind)
	if kind == "sticky" {
		bt.RunTransitions(t, h)
		return
	}
	bt.RunIdempotence(t, h)
}

func TestSuitesCatchDefects(t *testing.T) {
	for _, tt := range []struct {
		kind, want string
	}{
		{"sticky", "differs from a fresh backend's"},
		{"noisy", "made 1 changes, want none"},
		{"meddler", "Sync modified the State it was given"},
		{"typo", `Harness names "Idempotence/ipv4/goldn", which is no scenario of Idempotence`},
		{"no suite", `Harness names "Idempotency/ipv4", which starts with no suite`},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenBackend$", "-test.v")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tt.kind)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tt.want) {
				t.Errorf("the suite passed or failed otherwise (%v); want a failure saying %q:\n%.3000s", err, tt.want, out)
			}
		})
	}
	t.Run("unsupported skipped", func(t *testing.T) {
		h := brokenHarness("")
		h.Unsupported = map[string]string{
			"Idempotence/ipv6":          "not in this test",
			"Idempotence/ipv4/golden":   "nor this",
			"Transitions/ipv4/in order": "a name of another suite, left alone",
		}
		var ran []string
		h.New = func(t *testing.T, _ backends.Family, _ string) backends.Backend {
			ran = append(ran, t.Name())
			return fake.New()
		}
		bt.RunIdempotence(t, h)
		for _, name := range ran {
			if strings.Contains(name, "ipv6") || strings.HasSuffix(name, "/golden") {
				t.Errorf("%s ran", name)
			}
		}
		if len(ran) == 0 {
			t.Error("nothing ran")
		}
	})
}
