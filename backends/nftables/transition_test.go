package nftables

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
)

// transitionStates is backendtest's sequence of states exercising every
// kind of change.
func transitionStates() []*backends.State { return backendtest.Transitions() }

func newFakeBackend(t testing.TB, f *Fake, family backends.Family) *Backend {
	t.Helper()
	b, err := NewWithFake(Opts{Family: family}, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fresh is the dump of a fresh table programmed with s.
func fresh(t testing.TB, s *backends.State) string {
	t.Helper()
	f := NewFake()
	if _, err := newFakeBackend(t, f, s.Family).Sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return f.Dump()
}

// TestTransitions runs backendtest's transition suite on the Fake: in
// order and in random orders, each table equals a fresh build of its
// state.
func TestTransitions(t *testing.T) { backendtest.RunTransitions(t, harness()) }

// TestIdempotence runs backendtest's idempotence suite on the Fake: a
// second Sync of a state sends no operation.
func TestIdempotence(t *testing.T) { backendtest.RunIdempotence(t, harness()) }

// TestLifecycle runs backendtest's lifecycle suite on the Fake: Close
// twice, Sync and Cleanup after Close, Cleanup twice.
func TestLifecycle(t *testing.T) { backendtest.RunLifecycle(t, harness()) }

// TestTransitionsPlanIndex applies the transition states in random
// orders: the planner's element index, updated from the previous plan's,
// matches a fresh plan's.
func TestTransitionsPlanIndex(t *testing.T) {
	states := transitionStates()
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		b := newFakeBackend(t, NewFake(), backends.IPv4)
		for step := range 3 * len(states) {
			i := r.IntN(len(states))
			if _, err := b.Sync(context.Background(), states[i]); err != nil {
				t.Fatalf("seed %d step %d state %d: %v", seed, step, i, err)
			}
			if got, plan := b.programmed.Dump(), Plan(backends.IPv4, DefaultTable, backends.DefaultMasqueradeBit, states[i]).Dump(); got != plan {
				t.Fatalf("seed %d step %d: state %d: incremental plan differs from a fresh one:\n%s", seed, step, i, lineDiff(plan, got))
			}
		}
	}
}

// TestDiffTouchesOnlyTheChange: changing one service port's endpoints
// (the same number) changes its bucket elements and the hairpin set, and
// nothing else: no chain, no rule (a rule would make the kernel validate
// the whole chain graph at commit).
func TestDiffTouchesOnlyTheChange(t *testing.T) {
	s := goldenState4()
	p := newPlanner(config{family: s.Family, table: DefaultTable, mark: 1 << backends.DefaultMasqueradeBit})
	old := p.plan(s)
	s2 := goldenState4()
	for i := range s2.Services {
		if s2.Services[i].Name == "web" {
			s2.Services[i].Cluster = []backends.Endpoint{ep("10.244.1.10", 1), ep("10.244.3.10", 1)}
		}
	}
	tx := Diff(old, p.plan(s2))
	got := tx.String()
	want := []string{
		"delete element ip wasp buckets-cluster-2 { 10.96.0.10 . tcp . 80 . 1 }",
		"delete element ip wasp hairpin-endpoints { 10.244.2.10 . 10.244.2.10 }",
		"add element ip wasp buckets-cluster-2 { 10.96.0.10 . tcp . 80 . 1 : 10.244.3.10 . 8080 }",
		"add element ip wasp hairpin-endpoints { 10.244.3.10 . 10.244.3.10 }",
	}
	if w := strings.Join(want, "\n") + "\n"; got != w {
		t.Errorf("got\n%swant\n%s", got, w)
	}
	if tx := Diff(old, old); tx.Len() != 0 {
		t.Errorf("diff of a ruleset with itself: %s", tx)
	}
}

// TestSharedElements: a key two service ports claim is programmed once,
// for the first port, and stays while either claims it.
func TestSharedElements(t *testing.T) {
	one := svc("a", "10.96.0.1", func(s *backends.Service) {
		s.ExternalIPs = []netip.Addr{ip("192.0.2.1")}
		s.Cluster = []backends.Endpoint{ep("10.244.1.1", 1)}
	})
	two := svc("b", "10.96.0.2", func(s *backends.Service) {
		s.ExternalIPs = []netip.Addr{ip("192.0.2.1")}
		s.Cluster = []backends.Endpoint{ep("10.244.1.2", 1)}
	})
	states := []*backends.State{
		{Family: backends.IPv4, Services: []backends.Service{one, two}},
		{Family: backends.IPv4, Services: []backends.Service{two}},
		{Family: backends.IPv4, Services: []backends.Service{one, two}},
		{Family: backends.IPv4, Services: []backends.Service{one}},
	}
	f := NewFake()
	b := newFakeBackend(t, f, backends.IPv4)
	for i, s := range states {
		if _, err := b.Sync(context.Background(), s); err != nil {
			t.Fatalf("state %d: %v", i, err)
		}
		owner := s.Services[0].Name
		if !strings.Contains(f.Dump(), "192.0.2.1 . tcp . 80 : goto external-") ||
			!strings.Contains(f.Dump(), "demo/"+owner+"/tcp/http\n") {
			t.Errorf("state %d: external IP not owned by %s:\n%s", i, owner, f.Dump())
		}
		if got, want := f.Dump(), fresh(t, s); got != want {
			t.Fatalf("state %d differs from a fresh build:\n%s", i, lineDiff(want, got))
		}
	}
}

// TestFailedSyncRebuilds: after a failed transaction the Backend loads
// the table and rebuilds it.
func TestFailedSyncRebuilds(t *testing.T) {
	states := transitionStates()
	f := NewFake()
	b := newFakeBackend(t, f, backends.IPv4)
	ctx := context.Background()
	if _, err := b.Sync(ctx, states[0]); err != nil {
		t.Fatal(err)
	}
	before := f.Dump()
	boom := errors.New("boom")
	f.FailNext(boom)
	if _, err := b.Sync(ctx, states[1]); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	if f.Dump() != before {
		t.Fatal("a failed transaction changed the table")
	}
	if _, err := b.Sync(ctx, states[2]); err != nil {
		t.Fatal(err)
	}
	if got, want := f.Dump(), fresh(t, states[2]); got != want {
		t.Fatalf("after recovery:\n%s", lineDiff(want, got))
	}
	if b.stats.rebuilds != 2 {
		t.Errorf("stats %+v, want 2 rebuilds", b.stats)
	}
}

// TestRestartReconciles: a new Backend on a table left by another
// reconciles it without deleting it: stale objects go, affinity sets
// whose definition did not change keep their clients.
func TestRestartReconciles(t *testing.T) {
	states := transitionStates()
	ctx := context.Background()
	f := NewFake()
	old := newFakeBackend(t, f, backends.IPv4)
	if _, err := old.Sync(ctx, states[2]); err != nil {
		t.Fatal(err)
	}
	sticky := goldenStickySet(t, states[2])
	client := ip("198.51.100.200")
	if err := f.update(backends.IPv4, DefaultTable, sticky, client); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	next := newFakeBackend(t, f, backends.IPv4)
	inv, _ := f.load(ctx, backends.IPv4, DefaultTable)
	tx := rebuild(inv, Plan(backends.IPv4, DefaultTable, backends.DefaultMasqueradeBit, states[1]))
	if strings.Contains(tx.String(), "delete table") || strings.Contains(tx.String(), "delete set ip wasp "+sticky) {
		t.Errorf("rebuild deletes the table or a kept affinity set:\n%s", tx)
	}
	if _, err := next.Sync(ctx, states[1]); err != nil {
		t.Fatal(err)
	}
	got := f.Dump()
	if !strings.Contains(got, "\t\t\t"+client.String()+"\n") {
		t.Errorf("the affinity set lost its client:\n%s", got)
	}
	// Apart from the client, the table is a fresh build of the state.
	got = strings.Replace(got, "\t\telements = {\n\t\t\t"+client.String()+"\n\t\t}\n", "", 1)
	if want := fresh(t, states[1]); got != want {
		t.Errorf("after the restart:\n%s", lineDiff(want, got))
	}
}

// goldenStickySet is the name of the first affinity set of the sticky
// service in s.
func goldenStickySet(t *testing.T, s *backends.State) string {
	t.Helper()
	for i := range s.Services {
		if v := &s.Services[i]; v.Name == "sticky" {
			return affinitySetPrefix + endpointBase(v, &v.Cluster[0])
		}
	}
	t.Fatal("no sticky service")
	return ""
}

func TestSyncValidates(t *testing.T) {
	f := NewFake()
	b := newFakeBackend(t, f, backends.IPv4)
	bad := goldenState4()
	bad.Services[0].ClusterIP = ip("fd00::1")
	bad.Services[1].Cluster = []backends.Endpoint{{Addr: ip("10.244.1.1"), Port: 80}}
	bad.Services[2].Key = bad.Services[0].Key
	_, err := b.Sync(context.Background(), bad)
	if !errors.Is(err, ErrInvalidState) {
		t.Fatalf("got %v, want ErrInvalidState", err)
	}
	for _, want := range []string{"clusterIP: fd00::1 is not ipv4", "cluster[0].weight: 0", "key: not sorted: after"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if f.Dump() != "" {
		t.Error("an invalid state programmed something")
	}
	if _, err := b.Sync(context.Background(), goldenState6()); !errors.Is(err, ErrInvalidState) {
		t.Errorf("an IPv6 state on an IPv4 backend: %v", err)
	}
}

// TestSyncValidatesChanges: after a valid State, the next is checked
// through the service ports that changed, and refused as a whole
// validation would refuse it, naming the culprit by its place in it.
func TestSyncValidatesChanges(t *testing.T) {
	ctx := context.Background()
	good := goldenState4()
	tests := []struct {
		name   string
		change func(s *backends.State)
		want   string // "": valid
	}{
		{"unchanged", func(s *backends.State) {}, ""},
		{"an endpoint of weight 0", func(s *backends.State) {
			s.Services[3].Cluster = []backends.Endpoint{{Addr: ip("10.244.1.1"), Port: 80}}
		}, `services[3] "` + good.Services[3].Key + `": cluster[0].weight: 0`},
		{"two identical ports swapped", func(s *backends.State) {
			s.Services[1], s.Services[2] = s.Services[2], s.Services[1]
		}, "services[2]"},
		{"an identical port repeated", func(s *backends.State) {
			s.Services = append(s.Services[:2:2], s.Services[1:]...)
		}, "key: duplicate of services[1]"},
		{"a port removed", func(s *backends.State) { s.Services = s.Services[1:] }, ""},
		{"a new port out of order", func(s *backends.State) {
			n := s.Services[0]
			n.Key = "zz/" + n.Key
			s.Services = append([]backends.Service{n}, s.Services...)
		}, "not sorted"},
		{"state-wide", func(s *backends.State) { s.NodeIPs = []netip.Addr{ip("fd00::1")} }, "nodeIPs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newFakeBackend(t, NewFake(), backends.IPv4)
			if _, err := b.Sync(ctx, good); err != nil {
				t.Fatal(err)
			}
			s := *good
			s.Services = slices.Clone(good.Services) // the same endpoint slices: identical
			tt.change(&s)
			_, err := b.Sync(ctx, &s)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.want != "" && (!errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want ErrInvalidState mentioning %q", err, tt.want)
			}
			if full := validate(backends.IPv4, &s); (full == nil) != (err == nil) || (full != nil && full.Error() != err.Error()) {
				t.Errorf("got %v, a whole validation %v", err, full)
			}
		})
	}
}

func TestCleanupAndClose(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	v4, v6 := newFakeBackend(t, f, backends.IPv4), newFakeBackend(t, f, backends.IPv6)
	if _, err := v4.Sync(ctx, goldenState4()); err != nil {
		t.Fatal(err)
	}
	if _, err := v6.Sync(ctx, goldenState6()); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a missing table is fine
		if err := v4.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Dump(); strings.Contains(got, "table ip wasp") || !strings.Contains(got, "table ip6 wasp") {
		t.Errorf("after the IPv4 cleanup:\n%s", got)
	}
	if _, err := v4.Sync(ctx, goldenState4()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.Dump(), "table ip wasp") {
		t.Error("no table after a sync following a cleanup")
	}
	if err := v4.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v4.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := v4.Sync(ctx, goldenState4()); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("sync after close: %v", err)
	}
}

func TestOpts(t *testing.T) {
	tests := []struct {
		name string
		opts Opts
		want string // error substring, "" for none
		mark uint32
	}{
		{"defaults", Opts{Family: backends.IPv4}, "", 0x4000},
		{"bit", Opts{Family: backends.IPv6, MasqueradeBit: 3}, "", 0x8},
		{"no family", Opts{}, "family 0", 0},
		{"bit too large", Opts{Family: backends.IPv4, MasqueradeBit: 32}, "masquerade bit 32", 0},
		{"table too long", Opts{Family: backends.IPv4, Table: strings.Repeat("t", 300)}, "table name", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tt.opts.config()
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil || cfg.mark != tt.mark || cfg.table != DefaultTable {
				t.Fatalf("got %+v, %v", cfg, err)
			}
		})
	}
	f := NewFake()
	b, err := NewWithFake(Opts{Family: backends.IPv4, Table: "other", MasqueradeBit: 3}, f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Sync(context.Background(), goldenState4()); err != nil {
		t.Fatal(err)
	}
	if d := f.Dump(); !strings.HasPrefix(d, "table ip other {") || !strings.Contains(d, "mark set mark or 0x00000008") {
		t.Errorf("table name or mark not applied:\n%.300s", d)
	}
}

// TestFakeValidates: the fake refuses what the kernel refuses, and a
// refused transaction changes nothing.
func TestFakeValidates(t *testing.T) {
	ctx := context.Background()
	setup := func() *Fake {
		f := NewFake()
		if _, err := newFakeBackend(t, f, backends.IPv4).Sync(ctx, goldenState4()); err != nil {
			t.Fatal(err)
		}
		return f
	}
	rule := func(chain string, exprs ...Expr) op {
		return op{kind: opAddRule, name: chain, rule: &Rule{Exprs: exprs}}
	}
	serviceIPs := &Set{Name: serviceIPsMap, Key: []KeyType{KeyIPv4Addr, KeyInetProto, KeyInetService}, Map: true}
	// sticky has affinity, so a policy chain and endpoint chains (web
	// is a simple service port: no chain).
	key := ElemKey{Addr: ip("10.96.0.12"), Proto: protoTCP, Port: 80}
	webChain := clusterChainPrefix + hashed("demo/sticky/tcp/http")
	tests := []struct {
		name string
		ops  []op
		want syscall.Errno
	}{
		{"rule in a missing chain", []op{rule("nope", Verdict{Kind: Drop})}, syscall.ENOENT},
		{"jump to a missing chain", []op{rule(servicesChain, Verdict{Jump, "nope"})}, syscall.ENOENT},
		{"jump to a base chain", []op{rule(servicesChain, Verdict{Jump, natOutputChain})}, syscall.EOPNOTSUPP},
		{"lookup in a missing set", []op{rule(servicesChain, SetMatch{backends.IPv4, DAddr, "nope"}, Verdict{Kind: Drop})}, syscall.ENOENT},
		{"vmap lookup in a plain set", []op{rule(servicesChain, VMap{Family: backends.IPv4, Key: dispatchKey, Map: clusterIPsSet})}, syscall.EINVAL},
		{"key lookup in a map", []op{rule(servicesChain, KeySetMatch{Family: backends.IPv4, Key: dispatchKey, Set: serviceIPsMap}, Verdict{Kind: Drop})}, syscall.EINVAL},
		{"key lookup of another type", []op{rule(servicesChain, KeySetMatch{Family: backends.IPv4, Key: nodePortKey, Set: simpleServicesSet}, Verdict{Kind: Drop})}, syscall.EINVAL},
		{"key lookup in a missing set", []op{rule(servicesChain, KeySetMatch{Family: backends.IPv4, Key: dispatchKey, Set: "nope"}, Verdict{Kind: Drop})}, syscall.ENOENT},
		{"delete a set a key lookup uses", []op{{kind: opDeleteSet, name: simpleServicesSet}}, syscall.EBUSY},
		{"delete a chain a map element uses", []op{{kind: opFlushChain, name: webChain}, {kind: opDeleteChain, name: webChain}}, syscall.EBUSY},
		{"delete a set a rule uses", []op{{kind: opDeleteSet, name: clusterIPsSet}}, syscall.EBUSY},
		{"delete a missing element", []op{{kind: opDeleteElements, set: serviceIPs, elems: packElems(Element{Key: ElemKey{Addr: ip("10.96.9.9"), Proto: protoTCP, Port: 80}})}}, syscall.ENOENT},
		{"element of a missing map", []op{{kind: opAddElements, set: &Set{Name: "nope", Key: serviceIPs.Key, Map: true}, elems: packElems(Element{Key: key, Value: Verdict{Kind: Drop}})}}, syscall.ENOENT},
		{"element with another value", []op{{kind: opAddElements, set: serviceIPs, elems: packElems(Element{Key: key, Value: Verdict{Kind: Drop}})}}, syscall.EEXIST},
		{"element going to a missing chain", []op{{kind: opAddElements, set: serviceIPs, elems: packElems(Element{Key: ElemKey{Addr: ip("10.96.9.9"), Proto: protoTCP, Port: 80}, Value: Verdict{Goto, "nope"}})}}, syscall.ENOENT},
		{"element of the wrong family", []op{{kind: opAddElements, set: serviceIPs, elems: packElems(Element{Key: ElemKey{Addr: ip("fd00::1"), Proto: protoTCP, Port: 80}, Value: Verdict{Kind: Drop}})}}, syscall.EINVAL},
		{"redefine a set", []op{{kind: opAddSet, set: &Set{Name: clusterIPsSet, Key: []KeyType{KeyIPv6Addr}}}}, syscall.EEXIST},
		{"redefine a base chain", []op{{kind: opAddChain, chain: &Chain{Name: natOutputChain, Base: &BaseChain{ChainNAT, HookOutput, 0}}}}, syscall.EEXIST},
		{"dnat reached from a filter chain", []op{rule(firewallCheckChain, Verdict{Jump, webChain})}, syscall.EOPNOTSUPP},
		{"reject reached from prerouting", []op{rule(firewallCheckChain, Verdict{Jump, rejectChain})}, syscall.EOPNOTSUPP},
		{"masquerade reached from prerouting", []op{rule(servicesChain, Verdict{Jump, masqueradingChain})}, syscall.EOPNOTSUPP},
		{"loop", []op{rule(markMasqChain, Verdict{Jump, servicesChain})}, syscall.ELOOP},
		{"numgen with a gap", []op{rule(servicesChain, Numgen{Mod: 3, Targets: []NumgenTarget{{0, 0, webChain}, {2, 2, webChain}}})}, syscall.EINVAL},
		{"missing table", []op{{kind: opDeleteTable}, {kind: opDeleteTable}}, syscall.ENOENT},
		{"name too long", []op{{kind: opAddChain, chain: &Chain{Name: strings.Repeat("c", 256)}}}, syscall.ENAMETOOLONG},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := setup()
			before := f.Dump()
			// A valid operation first, to see it undone.
			ops := append([]op{{kind: opAddChain, chain: &Chain{Name: "extra"}}}, tt.ops...)
			err := f.apply(ctx, &Transaction{Family: backends.IPv4, Table: DefaultTable, ops: ops})
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if f.Dump() != before {
				t.Errorf("a refused transaction changed the table:\n%s", lineDiff(before, f.Dump()))
			}
		})
	}
}

// TestTransactionString shows the syntax of each operation.
func TestTransactionString(t *testing.T) {
	s := &backends.State{Family: backends.IPv4, NodePortAddresses: []netip.Addr{ip("198.51.100.11")},
		Services: []backends.Service{svc("web", "10.96.0.10", func(v *backends.Service) {
			v.AffinityTimeout = 5
			v.Cluster = []backends.Endpoint{ep("10.244.1.10", 1)}
		})}}
	tx := Diff(nil, Plan(backends.IPv4, DefaultTable, backends.DefaultMasqueradeBit, s))
	got := tx.String()
	for _, want := range []string{
		"add table ip wasp\n",
		"add chain ip wasp nat-output { type nat hook output priority dstnat; policy accept; }\n",
		"add set ip wasp affinity-",
		"{ type ipv4_addr; flags dynamic,timeout; timeout 5s; }\n",
		"add map ip wasp service-ips { type ipv4_addr . inet_proto . inet_service : verdict; comment",
		"add element ip wasp service-ips { 10.96.0.10 . tcp . 80 : goto service-AXK6CI2C-demo/web/tcp/http }\n",
		"add element ip wasp nodeport-ips { 198.51.100.11 }\n",
		"add rule ip wasp services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q", want)
		}
	}
	if t.Failed() {
		t.Log(got)
	}
}

// TestDiffEndpointCountOnlyElements: a service port whose number of
// endpoints changes (to one, and to three) moves to another bucket class
// through elements alone: no chain or rule operation.
func TestDiffEndpointCountOnlyElements(t *testing.T) {
	s := goldenState4()
	p := newPlanner(config{family: s.Family, table: DefaultTable, mark: 1 << backends.DefaultMasqueradeBit})
	prev := p.plan(s)
	for _, eps := range [][]backends.Endpoint{
		{ep("10.244.1.10", 1)},
		{ep("10.244.1.10", 1), ep("10.244.2.10", 1), ep("10.244.3.10", 1)},
		{ep("10.244.1.10", 2), ep("10.244.2.10", 1)},
	} {
		s2 := goldenState4()
		for i := range s2.Services {
			if s2.Services[i].Name == "web" {
				s2.Services[i].Cluster = eps
			}
		}
		rs := p.plan(s2)
		for _, o := range Diff(prev, rs).ops {
			switch o.kind {
			case opAddElements, opDeleteElements:
			case opAddChain:
				if !strings.HasPrefix(o.chain.Name, bucketChainPrefix) {
					t.Errorf("%d endpoints: add chain %s", len(eps), o.chain.Name)
				}
			case opAddRule:
				if !strings.HasPrefix(o.name, bucketChainPrefix) {
					t.Errorf("%d endpoints: add rule to %s", len(eps), o.name)
				}
			case opAddSet:
				if !strings.HasPrefix(o.set.Name, bucketChainPrefix) {
					t.Errorf("%d endpoints: add set %s", len(eps), o.set.Name)
				}
			default:
				t.Errorf("%d endpoints: operation %d on %s", len(eps), o.kind, o.name)
			}
		}
		prev = rs
	}
}

// TestDiffSimpleServiceDataOnly: a simple service port's arrival, its
// change of endpoint count (10, 9, 10: W changes) and its departure
// are data elements only: no chain, no rule, no set, and no element with
// a verdict, any of which makes the kernel validate the whole chain graph
// at commit. And the table each transaction makes equals a fresh build.
func TestDiffSimpleServiceDataOnly(t *testing.T) {
	base := largeState(100, 10)
	with := func(eps int) *backends.State {
		s := largeState(101, eps)
		s.Services = append(slices.Clone(base.Services), s.Services[100])
		return s
	}
	states := []*backends.State{base, with(10), with(9), with(10), base}
	f := NewFake()
	b := newFakeBackend(t, f, backends.IPv4)
	ctx := context.Background()
	if _, err := b.Sync(ctx, states[0]); err != nil {
		t.Fatal(err)
	}
	for i, s := range states[1:] {
		prev := b.programmed
		rs := b.planner.plan(s)
		tx := Diff(prev, rs)
		for _, o := range tx.ops {
			switch o.kind {
			case opAddElements, opDeleteElements:
				for _, p := range o.elems {
					e := p.element()
					if o.set.Map || e.Value.Kind != VerdictNone {
						t.Errorf("step %d: element %s of verdict map %s", i+1, e.Key.string(o.set.Key), o.set.Name)
					}
				}
			default:
				t.Errorf("step %d: not a data element:\n%s", i+1, (&Transaction{Family: tx.Family, Table: tx.Table, ops: []op{o}}).String())
			}
		}
		if tx.Len() == 0 {
			t.Errorf("step %d: no operation", i+1)
		}
		if _, err := b.Sync(ctx, s); err != nil {
			t.Fatal(err)
		}
		if got, want := f.Dump(), fresh(t, s); got != want {
			t.Fatalf("step %d differs from a fresh build:\n%s", i+1, lineDiff(want, got))
		}
	}
}

// TestDiffCommitsMakeBeforeBreak: a change that moves a served service
// entry from one path to another adds the new path in a first commit
// (after a commit of the new chains and their rules, if any) and deletes
// the old one a lookup level per commit, so that a packet whose
// evaluation straddles a commit finds a whole path; a departure or an
// arrival is one commit.
func TestDiffCommitsMakeBeforeBreak(t *testing.T) {
	base := goldenState4()
	change := func(f func(s *backends.Service)) *backends.State {
		s := goldenState4()
		for i := range s.Services {
			if s.Services[i].Name == "web" {
				f(&s.Services[i])
			}
		}
		return s
	}
	three := []backends.Endpoint{ep("10.244.1.10", 1), ep("10.244.2.10", 1), ep("10.244.3.10", 1)}
	tests := []struct {
		name string
		to   *backends.State
		want [][]string // per commit, the sets and chains its operations name, in order
	}{
		{"simple W 2 to 3", change(func(s *backends.Service) { s.Cluster = three }), [][]string{
			{"add buckets-cluster-3", "add hairpin-endpoints", "add simple-cluster-3"},
			{"delete simple-cluster-2"},
			{"delete buckets-cluster-2"},
		}},
		{"simple to a NodePort", change(func(s *backends.Service) { s.NodePort = 30080 }), [][]string{
			{"add chain external-", "add chain service-", "rules external-", "rules service-"},
			{"add bucket-classes-cluster", "add bucket-classes-cluster-nodeports", "add buckets-cluster-2-nodeports",
				"add service-ips", "add service-nodeports"},
			{"delete simple-services"},
			{"delete simple-cluster-2"},
		}},
		{"departure", func() *backends.State {
			s := goldenState4()
			s.Services = slices.DeleteFunc(s.Services, func(v backends.Service) bool { return v.Name == "web" })
			return s
		}(), [][]string{
			{"delete buckets-cluster-2", "delete cluster-ips", "delete hairpin-endpoints", "delete simple-cluster-2", "delete simple-services"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(config{family: base.Family, table: DefaultTable, mark: 1 << backends.DefaultMasqueradeBit})
			old := p.plan(base)
			tx := Diff(old, p.plan(tt.to))
			var got [][]string
			for _, part := range tx.parts() {
				var names []string
				for _, o := range part.ops {
					var n string
					switch o.kind {
					case opAddElements:
						n = "add " + o.set.Name
					case opDeleteElements:
						n = "delete " + o.set.Name
					case opAddChain:
						n = "add chain " + strings.SplitAfter(o.chain.Name, "-")[0]
					case opAddRule:
						n = "rules " + strings.SplitAfter(o.name, "-")[0]
					default:
						n = fmt.Sprintf("op %d %s", o.kind, o.name)
					}
					if len(names) == 0 || names[len(names)-1] != n {
						names = append(names, n)
					}
				}
				got = append(got, names)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("commits\n%q\nwant\n%q\n%s", got, tt.want, tx)
			}
			// And the commits, applied in turn, give a fresh build.
			f := NewFake()
			b := newFakeBackend(t, f, base.Family)
			if _, err := b.Sync(context.Background(), base); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Sync(context.Background(), tt.to); err != nil {
				t.Fatal(err)
			}
			if got, want := f.Dump(), fresh(t, tt.to); got != want {
				t.Errorf("differs from a fresh build:\n%s", lineDiff(want, got))
			}
		})
	}
}
