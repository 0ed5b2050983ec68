package iptables

import (
	"context"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
)

func transitionStates() []*backends.State { return backendtest.Transitions() }

func newFakeBackend(t testing.TB, f *Fake, o Opts) *Backend {
	t.Helper()
	b, err := NewWithFake(o, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var opts4 = Opts{Family: backends.IPv4, LocalhostNodePorts: true}

// fresh is the dump of a fresh Fake programmed with s.
func fresh(t testing.TB, s *backends.State) string {
	t.Helper()
	f := NewFake()
	if _, err := newFakeBackend(t, f, opts4).Sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return f.Dump()
}

// TestTransitions runs backendtest's transition suite on the Fake: after
// every Sync, in order and in random orders, the tables equal a fresh full
// sync's of the same State, and only the first Sync is full.
func TestTransitions(t *testing.T) { backendtest.RunTransitions(t, harness("")) }

// TestIdempotence runs backendtest's idempotence suite on the Fake: a
// second Sync of a State writes and deletes no service chain.
func TestIdempotence(t *testing.T) { backendtest.RunIdempotence(t, harness("")) }

// TestLifecycle runs backendtest's lifecycle suite on the Fake: Close
// twice, Sync and Cleanup after Close, Cleanup twice.
func TestLifecycle(t *testing.T) { backendtest.RunLifecycle(t, harness("")) }

// declared returns the chains a restore input declares, by table.
func declared(in string) map[string][]string {
	out := map[string][]string{}
	for _, c := range restoreChains(in, ":") {
		table, name, _ := strings.Cut(c, "/")
		out[table] = append(out[table], name)
	}
	return out
}

// restoreChains returns "table/chain" of each line of restore input in
// that starts with op (":" for declarations, "-X " for deletions).
func restoreChains(in, op string) []string {
	var out []string
	table := ""
	for _, l := range strings.Split(in, "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, op):
			name, _, _ := strings.Cut(l[len(op):], " ")
			out = append(out, table+"/"+name)
		}
	}
	return out
}

// serviceChainsOf returns the per-service chains of a declaration list.
func serviceChainsOf(names []string) []string {
	var out []string
	for _, n := range names {
		if isServiceChain(n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// TestPartialSyncWritesOnlyChanges: changing one endpoint of one service
// port rewrites its policy chain and no other chain, adds the new
// endpoint to the hairpin set and deletes the old one; a new service
// port rewrites the fixed chains that dispatch to it too; the same state
// again runs no restore at all.
func TestPartialSyncWritesOnlyChanges(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	b := newFakeBackend(t, f, opts4)
	s := goldenState4()
	if _, err := b.Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Sync(ctx, s.Clone()); err != nil {
		t.Fatal(err)
	}
	if len(f.restores) != 1 || b.stats.skipped != 1 || b.stats.setAdds+b.stats.setDels != 0 {
		t.Errorf("a second sync of the same state ran a restore or changed the set (%d restores, stats %+v)", len(f.restores), b.stats)
	}

	s2 := goldenState4()
	web := &s2.Services[slices.IndexFunc(s2.Services, func(v backends.Service) bool { return v.Name == "web" })]
	old := web.Cluster[1]
	web.Cluster[1] = ep("10.244.3.10", 1)
	if _, err := b.Sync(ctx, s2); err != nil {
		t.Fatal(err)
	}
	n := newServiceChains(web)
	in := f.lastRestore()
	if got, want := serviceChainsOf(declared(in)[TableNAT]), []string{n.svc}; !slices.Equal(got, want) {
		t.Errorf("wrote %v, want %v:\n%s", got, want, in)
	}
	if fixed := slices.DeleteFunc(append(declared(in)[TableNAT], declared(in)[TableFilter]...), isServiceChain); len(fixed) != 0 {
		t.Errorf("an endpoint change writes fixed chains %v, whose rules did not change", fixed)
	}
	if strings.Contains(in, "\n-X ") {
		t.Errorf("an endpoint change deletes a chain:\n%s", in)
	}
	set := f.setEntries(SetHairpin4)
	if b.stats.setAdds != 1 || b.stats.setDels != 1 || !slices.Contains(set, "10.244.3.10,tcp:8080,10.244.3.10") ||
		slices.Contains(set, old.Addr.String()+",tcp:8080,"+old.Addr.String()) {
		t.Errorf("hairpin set %v (stats %+v): want the new endpoint in, the old one out", set, b.stats)
	}
	if b.LastSync().Full {
		t.Error("a change was a full sync")
	}
	// Written counts the rules of the restore, fewer than the tables hold.
	appended := map[string]int{}
	table := ""
	for _, line := range strings.Split(in, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "):
			appended[table]++
		}
	}
	info := b.LastSync()
	if info.Written[TableNAT] != appended[TableNAT] || info.Written[TableFilter] != appended[TableFilter] || info.Written[TableNAT] >= info.Rules[TableNAT] {
		t.Errorf("written %v, rules %v; want the restore's %v, fewer than the rules", info.Written, info.Rules, appended)
	}
	if got, want := f.Dump(), fresh(t, s2); got != want {
		t.Errorf("the partial sync differs from a fresh full one:\n%s", lineDiff(want, got))
	}

	s3 := s2.Clone()
	s3.Services = sortServices(append(s3.Services, svc("new", "10.96.0.30", func(s *backends.Service) {
		s.NodePort = 30030
		s.Cluster = []backends.Endpoint{ep("10.244.2.30", 1)}
	})))
	if _, err := b.Sync(ctx, s3); err != nil {
		t.Fatal(err)
	}
	in = f.lastRestore()
	if got, want := slices.DeleteFunc(declared(in)[TableNAT], isServiceChain), []string{ChainNodePorts, ChainServices}; !slices.Equal(got, want) {
		t.Errorf("a new service port with a NodePort writes fixed chains %v, want %v:\n%s", got, want, in)
	}
	if _, ok := declared(in)[TableFilter]; ok {
		t.Errorf("a new service port with endpoints writes the filter table:\n%s", in)
	}
	if got, want := f.Dump(), fresh(t, s3); got != want {
		t.Errorf("the partial sync differs from a fresh full one:\n%s", lineDiff(want, got))
	}
}

// TestFullSyncRemovesLeftovers: the first Sync deletes the service chains
// of wasp's it does not want (left by an earlier process), and touches no
// chain of kube-proxy's.
func TestFullSyncRemovesLeftovers(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	left := "*nat\n:WASP-SVC-AAAAAAAAAAAAAAAA - [0:0]\n:WASP-SEP-BBBBBBBBBBBBBBBB - [0:0]\n:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\n" +
		"-A WASP-SVC-AAAAAAAAAAAAAAAA -j WASP-SEP-BBBBBBBBBBBBBBBB\n-A KUBE-SVC-AAAAAAAAAAAAAAAA -j ACCEPT\nCOMMIT\n"
	if err := f.restore(ctx, restoreText(left)); err != nil {
		t.Fatal(err)
	}
	b := newFakeBackend(t, f, opts4)
	if _, err := b.Sync(ctx, goldenState4()); err != nil {
		t.Fatal(err)
	}
	got := f.Dump()
	if strings.Contains(got, "AAAAAAAAAAAAAAAA - ") && !strings.Contains(got, ":KUBE-SVC-AAAAAAAAAAAAAAAA - ") ||
		strings.Contains(got, "WASP-SVC-AAAA") || strings.Contains(got, "WASP-SEP-BBBB") {
		t.Errorf("leftovers:\n%s", got)
	}
	kube := "-A KUBE-SVC-AAAAAAAAAAAAAAAA -j ACCEPT\n"
	if !strings.Contains(got, kube) {
		t.Errorf("kube-proxy's chain was touched:\n%s", got)
	}
	if want := fresh(t, goldenState4()); strings.Replace(strings.Replace(got, kube, "", 1), ":KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\n", "", 1) != want {
		t.Errorf("after the restart:\n%s", lineDiff(want, got))
	}
}

// TestRestartReconciles: a new Backend on tables programmed by another
// reaches a fresh full sync of its state, without flushing the chains
// first: the tables never lack a service the old and new states share.
func TestRestartReconciles(t *testing.T) {
	ctx := context.Background()
	states := transitionStates()
	f := NewFake()
	if _, err := newFakeBackend(t, f, opts4).Sync(ctx, states[2]); err != nil {
		t.Fatal(err)
	}
	next := newFakeBackend(t, f, opts4)
	if _, err := next.Sync(ctx, states[1]); err != nil {
		t.Fatal(err)
	}
	if got, want := f.Dump(), fresh(t, states[1]); got != want {
		t.Errorf("after the restart:\n%s", lineDiff(want, got))
	}
	in := f.lastRestore()
	if strings.Contains(in, "\n-F ") || strings.Contains(in, "\n-X "+ChainServices) {
		t.Errorf("the restart's restore flushes or deletes a fixed chain apart:\n%s", in)
	}
}

// TestFailedRestore: a restore the kernel refuses (here a match it lacks)
// returns ErrRestore (and ErrPartialRestore for a partial sync) naming the
// failing line, leaves both tables as they were, and makes the next Sync
// full.
func TestFailedRestore(t *testing.T) {
	ctx := context.Background()
	states := transitionStates()
	f := NewFake()
	b := newFakeBackend(t, f, opts4)
	if _, err := b.Sync(ctx, states[0]); err != nil {
		t.Fatal(err)
	}
	before := f.Save(TableFilter) + f.Save(TableNAT)
	f.lackMatch("statistic")
	_, err := b.Sync(ctx, states[1])
	if !errors.Is(err, ErrRestore) || !errors.Is(err, ErrPartialRestore) {
		t.Fatalf("got %v, want ErrRestore and ErrPartialRestore", err)
	}
	var le *LineError
	if !errors.As(err, &le) || !strings.Contains(le.Text, "-m statistic") || !strings.Contains(err.Error(), "line ") {
		t.Errorf("the error does not name the failing line: %v", err)
	}
	// The hairpin set has the new endpoints already (they go in before
	// the restore); no rule sends a connection to them.
	if tables := f.Save(TableFilter) + f.Save(TableNAT); tables != before {
		t.Errorf("a failed restore changed the tables:\n%s", lineDiff(before, tables))
	}
	_, err = b.Sync(ctx, states[1])
	if !errors.Is(err, ErrRestore) || errors.Is(err, ErrPartialRestore) {
		t.Fatalf("the retry: got %v, want a full sync's ErrRestore", err)
	}
	f.mu.Lock()
	f.missing = nil
	f.mu.Unlock()
	if _, err := b.Sync(ctx, states[2]); err != nil {
		t.Fatal(err)
	}
	if !b.LastSync().Full {
		t.Error("the sync after a failure was not full")
	}
	if got, want := f.Dump(), fresh(t, states[2]); got != want {
		t.Fatalf("after recovery:\n%s", lineDiff(want, got))
	}
	if _, err := b.Sync(ctx, states[3]); err != nil || b.LastSync().Full {
		t.Errorf("the next sync: %v, full %v; want a partial one", err, b.LastSync().Full)
	}
}

// TestPeriodicFullSync: a Sync after FullSyncPeriod is a full one.
func TestPeriodicFullSync(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	o := opts4
	o.FullSyncPeriod = time.Minute
	b := newFakeBackend(t, f, o)
	now := time.Unix(1e9, 0)
	b.now = func() time.Time { return now }
	s := goldenState4()
	var got []bool
	for _, step := range []time.Duration{0, 30 * time.Second, 29 * time.Second, time.Second, time.Second} {
		now = now.Add(step)
		if _, err := b.Sync(ctx, s); err != nil {
			t.Fatal(err)
		}
		got = append(got, b.LastSync().Full)
	}
	if want := []bool{true, false, false, true, false}; !slices.Equal(got, want) {
		t.Errorf("full syncs %v, want %v", got, want)
	}
	if len(f.restores) != 1 {
		t.Errorf("%d restores, want 1: the periodic full sync found every chain as planned", len(f.restores))
	}
}

// TestJumpsAndLocalnet: a full sync ensures the jump rules once and sets
// route_localnet for localhost NodePorts.
func TestJumpsAndLocalnet(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	b := newFakeBackend(t, f, opts4)
	for range 2 {
		if err := b.Cleanup(ctx); err != nil { // the next Sync is full
			t.Fatal(err)
		}
		if _, err := b.Sync(ctx, goldenState4()); err != nil {
			t.Fatal(err)
		}
	}
	dump := f.Dump()
	for _, want := range []string{
		`-A PREROUTING -m comment --comment "wasp service portals" -j WASP-SERVICES`,
		`-A POSTROUTING -m comment --comment "wasp postrouting rules" -j WASP-POSTROUTING`,
		`-A FORWARD -m conntrack --ctstate NEW -m comment --comment "wasp service portals" -j WASP-SERVICES`,
		`-A INPUT -m comment --comment "wasp localhost nodeports firewall" -j WASP-FIREWALL`,
	} {
		if strings.Count(dump, want+"\n") != 1 {
			t.Errorf("%d of %q in\n%s", strings.Count(dump, want+"\n"), want, dump)
		}
	}
	if !f.localnet {
		t.Error("route_localnet not set")
	}
	f6 := NewFake()
	if _, err := newFakeBackend(t, f6, Opts{Family: backends.IPv6, LocalhostNodePorts: true}).Sync(ctx, goldenState6()); err != nil {
		t.Fatal(err)
	}
	if f6.localnet || strings.Contains(f6.Dump(), ChainFirewall) {
		t.Error("localhost NodePorts on IPv6")
	}
}

func TestCleanup(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	kube := "*filter\n:KUBE-FORWARD - [0:0]\n-A FORWARD -j KUBE-FORWARD\nCOMMIT\n"
	if err := f.restore(ctx, restoreText(kube)); err != nil {
		t.Fatal(err)
	}
	want := f.Dump()
	b := newFakeBackend(t, f, opts4)
	if _, err := b.Sync(ctx, goldenState4()); err != nil {
		t.Fatal(err)
	}
	for range 2 { // nothing left is fine
		if err := b.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		if got := f.Dump(); got != want {
			t.Fatalf("after cleanup:\n%s", lineDiff(want, got))
		}
	}
	if _, err := b.Sync(ctx, goldenState4()); err != nil || !b.LastSync().Full {
		t.Fatalf("sync after cleanup: %v, full %v", err, b.LastSync().Full)
	}
	got := strings.Replace(strings.Replace(f.Dump(), ":KUBE-FORWARD - [0:0]\n", "", 1), "-A FORWARD -j KUBE-FORWARD\n", "", 1)
	if want := fresh(t, goldenState4()); got != want {
		t.Errorf("after a cleanup and a sync:\n%s", lineDiff(want, got))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Sync(ctx, goldenState4()); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("sync after close: %v", err)
	}
}

func TestLastSyncRules(t *testing.T) {
	f := NewFake()
	b := newFakeBackend(t, f, opts4)
	if _, err := b.Sync(context.Background(), goldenState4()); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{TableFilter, TableNAT} {
		want := strings.Count(f.Save(table), "\n-A "+Prefix)
		if got := b.LastSync().Rules[table]; got != want || want == 0 {
			t.Errorf("%s: %d rules, the table has %d in wasp's chains", table, got, want)
		}
	}
}

func TestSyncValidates(t *testing.T) {
	f := NewFake()
	b := newFakeBackend(t, f, opts4)
	empty := f.Dump()
	bad := goldenState4()
	bad.Services[0].ClusterIP = ip("fd00::1")
	bad.Services[1].Cluster = []backends.Endpoint{{Addr: ip("10.244.1.1"), Port: 80}}
	_, err := b.Sync(context.Background(), bad)
	if !errors.Is(err, ErrInvalidState) {
		t.Fatalf("got %v, want ErrInvalidState", err)
	}
	for _, want := range []string{"clusterIP: fd00::1 is not ipv4", "cluster[0].weight: 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if f.Dump() != empty {
		t.Error("an invalid state programmed something")
	}
	if _, err := b.Sync(context.Background(), goldenState6()); !errors.Is(err, ErrInvalidState) {
		t.Errorf("an IPv6 state on an IPv4 backend: %v", err)
	}
}

func TestOpts(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts Opts
		want string // error substring, "" for none
		mark uint32
	}{
		{"defaults", Opts{Family: backends.IPv4}, "", 0x4000},
		{"bit", Opts{Family: backends.IPv6, MasqueradeBit: 3}, "", 0x8},
		{"no family", Opts{}, "family 0", 0},
		{"bit too large", Opts{Family: backends.IPv4, MasqueradeBit: 32}, "masquerade bit 32", 0},
		{"negative period", Opts{Family: backends.IPv4, FullSyncPeriod: -1}, "full sync period", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tt.opts.config()
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("got %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil || cfg.mark != tt.mark {
				t.Fatalf("got %+v, %v", cfg, err)
			}
		})
	}
	f := NewFake()
	f.SetHasRandomFully(false)
	if _, err := newFakeBackend(t, f, Opts{Family: backends.IPv4, MasqueradeBit: 3}).Sync(context.Background(), goldenState4()); err != nil {
		t.Fatal(err)
	}
	if d := f.Dump(); !strings.Contains(d, "-j MARK --or-mark 0x8\n") || !strings.Contains(d, "-j MASQUERADE\n") {
		t.Errorf("mark or --random-fully not applied:\n%s", d)
	}
}

// TestFakeRefuses: the Fake refuses what iptables-restore refuses, and a
// refused table section changes nothing.
func TestFakeRefuses(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name, input, want string
	}{
		{"jump to a missing chain", "*nat\n:WASP-A - [0:0]\n-A WASP-A -j WASP-B\nCOMMIT\n", `couldn't load target "WASP-B"`},
		{"rule of a missing chain", "*nat\n-A WASP-B -j ACCEPT\nCOMMIT\n", "no such chain"},
		{"delete a referenced chain", "*nat\n:WASP-A - [0:0]\n:WASP-B - [0:0]\n-A WASP-A -j WASP-B\n-X WASP-B\nCOMMIT\n", "too many links"},
		{"delete a built-in chain", "*nat\n-X PREROUTING\nCOMMIT\n", "built-in"},
		{"DNAT in filter", "*filter\n:WASP-A - [0:0]\n-A WASP-A -j DNAT --to-destination 10.0.0.1:80\nCOMMIT\n", "not valid in the filter table"},
		{"unknown match", "*filter\n:WASP-A - [0:0]\n-A WASP-A -m bogus -j ACCEPT\nCOMMIT\n", `couldn't load match "bogus"`},
		{"long chain name", "*filter\n:WASP-SVC-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA - [0:0]\nCOMMIT\n", "invalid chain name"},
		{"no commit", "*filter\n:WASP-A - [0:0]\n", "no COMMIT"},
		{"jump to a built-in chain", "*filter\n:WASP-A - [0:0]\n-A WASP-A -j INPUT\nCOMMIT\n", "built-in chain"},
		{"match of a missing set", "*nat\n:WASP-A - [0:0]\n-A WASP-A -m set --match-set WASP-HAIRPIN dst,dst,src -j MASQUERADE\nCOMMIT\n", "set WASP-HAIRPIN doesn't exist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake()
			before := f.Dump()
			err := f.restore(ctx, restoreText(tt.input))
			var le *LineError
			if !errors.As(err, &le) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want a line error with %q", err, tt.want)
			}
			if f.Dump() != before {
				t.Errorf("a refused section changed the tables:\n%s", f.Dump())
			}
		})
	}
	t.Run("earlier sections stay committed", func(t *testing.T) {
		f := NewFake()
		err := f.restore(ctx, restoreText("*nat\n:WASP-A - [0:0]\nCOMMIT\n*filter\n-A WASP-B -j ACCEPT\nCOMMIT\n"))
		var le *LineError
		if !errors.As(err, &le) || le.Line != 5 {
			t.Fatalf("got %v, want a failure on line 5", err)
		}
		if !strings.Contains(f.Save(TableNAT), ":WASP-A - [0:0]") {
			t.Error("the committed nat section was undone")
		}
	})
	t.Run("a set a rule matches stays", func(t *testing.T) {
		f := NewFake()
		if err := f.ensureSet(ctx, SetHairpin4, backends.IPv4); err != nil {
			t.Fatal(err)
		}
		if err := f.restore(ctx, restoreText("*nat\n:WASP-A - [0:0]\n-A WASP-A -m set --match-set WASP-HAIRPIN dst,dst,src -j MASQUERADE\nCOMMIT\n")); err != nil {
			t.Fatal(err)
		}
		if err := f.destroySet(ctx, SetHairpin4); err == nil || !strings.Contains(f.SaveSets(), SetHairpin4) {
			t.Errorf("destroyed a set a rule matches: %v", err)
		}
		if err := f.ensureSet(ctx, SetHairpin4, backends.IPv6); err == nil {
			t.Error("made a set of another family over an existing one")
		}
	})
	t.Run("a declaration flushes", func(t *testing.T) {
		f := NewFake()
		for _, in := range []string{"*nat\n:WASP-A - [0:0]\n-A WASP-A -j ACCEPT\nCOMMIT\n", "*nat\n:WASP-A - [0:0]\n-A WASP-A -j DROP\nCOMMIT\n"} {
			if err := f.restore(ctx, restoreText(in)); err != nil {
				t.Fatal(err)
			}
		}
		if got := f.Save(TableNAT); strings.Contains(got, "ACCEPT\n-A") || strings.Count(got, "-A WASP-A") != 1 {
			t.Errorf("got\n%s", got)
		}
	})
}

// TestFullSyncRemovesOtherOptions: a fixed chain of other options (here
// WASP-FIREWALL, of localhost NodePorts) is deleted by the first full
// sync without them, with its jumps.
func TestFullSyncRemovesOtherOptions(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	if _, err := newFakeBackend(t, f, opts4).Sync(ctx, goldenState4()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.Dump(), ":"+ChainFirewall+" ") {
		t.Fatal("no firewall chain to begin with")
	}
	if _, err := newFakeBackend(t, f, Opts{Family: backends.IPv4}).Sync(ctx, goldenState4()); err != nil {
		t.Fatal(err)
	}
	if d := f.Dump(); strings.Contains(d, ChainFirewall+" ") || strings.Contains(d, "-j "+ChainFirewall+"\n") {
		t.Errorf("the firewall chain or its jumps are left:\n%s", d)
	}
	want := NewFake()
	if _, err := newFakeBackend(t, want, Opts{Family: backends.IPv4}).Sync(ctx, goldenState4()); err != nil {
		t.Fatal(err)
	}
	if got := f.Dump(); got != want.Dump() {
		t.Errorf("differs from a fresh sync:\n%s", lineDiff(want.Dump(), got))
	}
}

// TestCheckDrift: the drift check finds nothing until something changes
// wasp's tables behind its back; then it reports what differs, named,
// and the next Sync is a full one that brings the tables back exactly.
func TestCheckDrift(t *testing.T) {
	ctx := context.Background()
	s := goldenState4()
	want := fresh(t, s)
	// A DNAT rule of a service port's policy chain, as saved.
	var dnat []string
	for _, l := range strings.Split(fakeWith(t, s).Save(TableNAT), "\n") {
		if strings.HasPrefix(l, "-A "+prefixSVC) && strings.Contains(l, "-j DNAT") {
			var err error
			if dnat, err = splitArgs(l); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if dnat == nil {
		t.Fatal("no DNAT rule in the golden state's nat table")
	}
	svcChain := dnat[1]
	for _, tc := range []struct {
		name    string
		meddle  func(t *testing.T, f *Fake)
		objects map[string]int
		example string // in one of the examples
	}{{
		name:    "DNAT rule deleted",
		meddle:  func(t *testing.T, f *Fake) { meddle(t, f, TableNAT, "-D "+strings.Join(quoted(dnat[1:]), " ")) },
		objects: map[string]int{backends.DriftRule: 1},
		example: "table nat: chain " + svcChain + ": ",
	}, {
		name:    "service chain flushed",
		meddle:  func(t *testing.T, f *Fake) { meddle(t, f, TableNAT, "-F "+svcChain) },
		objects: map[string]int{backends.DriftRule: ruleCount(fakeWith(t, s), svcChain)},
		example: "table nat: chain " + svcChain + ": 0 rules, want ",
	}, {
		name:    "rule added",
		meddle:  func(t *testing.T, f *Fake) { meddle(t, f, TableFilter, "-A "+ChainServices+" -j ACCEPT") },
		objects: map[string]int{backends.DriftRule: 1},
		example: "table filter: chain " + ChainServices + ": ",
	}, {
		name:    "chain added",
		meddle:  func(t *testing.T, f *Fake) { meddle(t, f, TableNAT, ":"+Prefix+"SVC-AAAAAAAAAAAAAAAA - [0:0]") },
		objects: map[string]int{backends.DriftChain: 1},
		example: "table nat: chain " + Prefix + "SVC-AAAAAAAAAAAAAAAA not programmed by wasp",
	}, {
		name: "jump deleted",
		meddle: func(t *testing.T, f *Fake) {
			for _, j := range anyJumps() {
				if j.table == TableNAT && j.from == chainPrerouting {
					if err := f.deleteRule(context.Background(), j.table, j.from, j.args()...); err != nil {
						t.Fatal(err)
					}
				}
			}
		},
		objects: map[string]int{backends.DriftRule: 1},
		example: "table nat: chain PREROUTING: jump to " + ChainServices + " missing",
	}, {
		name: "firewall reload",
		meddle: func(t *testing.T, f *Fake) {
			if err := cleanup(context.Background(), f, "reload", TableNAT, TableFilter); err != nil {
				t.Fatal(err)
			}
		},
		objects: map[string]int{backends.DriftChain: len(chainRules(fakeWith(t, s))), backends.DriftRule: len(opts4Config(t).jumps())},
		example: "table nat: chain " + ChainServices + " missing",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake()
			b := newFakeBackend(t, f, opts4)
			if d, err := b.CheckDrift(ctx); d != nil || err != nil {
				t.Fatalf("before a sync: %v, %v", d, err)
			}
			if _, err := b.Sync(ctx, s); err != nil {
				t.Fatal(err)
			}
			if d, err := b.CheckDrift(ctx); d != nil || err != nil {
				t.Fatalf("after a sync: %v, %v", d, err)
			}
			tc.meddle(t, f)
			d, err := b.CheckDrift(ctx)
			if err != nil || !maps.Equal(d.Objects, tc.objects) {
				t.Fatalf("drift %+v, %v; want objects %v", d, err, tc.objects)
			}
			if !slices.ContainsFunc(d.Examples, func(e string) bool { return strings.Contains(e, tc.example) }) {
				t.Errorf("examples %q: none names %q", d.Examples, tc.example)
			}
			if _, err := b.Sync(ctx, s); err != nil || !b.LastSync().Full {
				t.Fatalf("the sync after drift: %v, full %v", err, b.LastSync().Full)
			}
			if got := f.Dump(); got != want {
				t.Errorf("after the repair:\n%s", lineDiff(want, got))
			}
			if d, err := b.CheckDrift(ctx); d != nil || err != nil {
				t.Errorf("after the repair: %v, %v", d, err)
			}
		})
	}
}

// fakeWith returns a Fake programmed with s.
func fakeWith(t *testing.T, s *backends.State) *Fake {
	t.Helper()
	f := NewFake()
	if _, err := newFakeBackend(t, f, opts4).Sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return f
}

// meddle applies commands to table of f, behind the Backend's back.
func meddle(t *testing.T, f *Fake, table string, commands ...string) {
	t.Helper()
	in := "*" + table + "\n" + strings.Join(commands, "\n") + "\nCOMMIT\n"
	if err := f.restore(context.Background(), func(w io.Writer) error { _, err := io.WriteString(w, in); return err }); err != nil {
		t.Fatal(err)
	}
}

// quoted quotes the arguments with a space for a restore line.
func quoted(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.Contains(a, " ") {
			out[i] = strconv.Quote(a)
		}
	}
	return out
}

// ruleCount returns the rules of chain in f's nat table.
func ruleCount(f *Fake, chain string) int {
	return strings.Count(f.Save(TableNAT), "-A "+chain+" ")
}

func opts4Config(t *testing.T) config {
	t.Helper()
	cfg, err := opts4.config()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// chainRules returns the rules of each chain of wasp's in f, as saved.
func chainRules(f *Fake) map[string]string {
	out := map[string]string{}
	for _, table := range []string{TableNAT, TableFilter} {
		for _, l := range strings.Split(f.Save(table), "\n") {
			switch {
			case strings.HasPrefix(l, ":"+Prefix):
				name, _, _ := strings.Cut(l[1:], " ")
				out[table+"/"+name] += ""
			case strings.HasPrefix(l, "-A "+Prefix):
				name, _, _ := strings.Cut(l[3:], " ")
				out[table+"/"+name] += l + "\n"
			}
		}
	}
	return out
}

// TestPartialSyncsMinimal replays the transition States in random orders
// and checks each partial sync's restore against the tables before and
// after it: it declares exactly the chains that are new or whose rules
// changed, and deletes exactly the chains that went.
func TestPartialSyncsMinimal(t *testing.T) {
	states := transitionStates()
	for seed := range uint64(10) {
		r := rand.New(rand.NewPCG(seed, 7))
		f := NewFake()
		b := newFakeBackend(t, f, opts4)
		if _, err := b.Sync(context.Background(), states[0]); err != nil {
			t.Fatal(err)
		}
		for step := range 2 * len(states) {
			i := r.IntN(len(states))
			before, restores := chainRules(f), len(f.restores)
			if _, err := b.Sync(context.Background(), states[i]); err != nil {
				t.Fatalf("seed %d step %d state %d: %v", seed, step, i, err)
			}
			after := chainRules(f)
			var changed, gone []string
			for name, rules := range after {
				if old, ok := before[name]; !ok || old != rules {
					changed = append(changed, name)
				}
			}
			for name := range before {
				if _, ok := after[name]; !ok {
					gone = append(gone, name)
				}
			}
			var declaredNow, deleted []string
			if len(f.restores) > restores {
				declaredNow, deleted = restoreChains(f.lastRestore(), ":"), restoreChains(f.lastRestore(), "-X ")
			}
			declaredNow = slices.DeleteFunc(declaredNow, func(n string) bool { return slices.Contains(deleted, n) })
			for _, l := range [][]string{changed, gone, declaredNow, deleted} {
				slices.Sort(l)
			}
			// A chain rewritten with the rules it had is not a change
			// the tables show, so declared may only add to changed
			// what the plan rewrote in vain: nothing.
			if !slices.Equal(declaredNow, changed) || !slices.Equal(deleted, gone) {
				t.Fatalf("seed %d step %d state %d: wrote %v, deleted %v; the tables changed %v and lost %v",
					seed, step, i, declaredNow, deleted, changed, gone)
			}
		}
	}
}

// TestFullSyncWritesOnlyDifferences: a full sync (here a restart's) reads
// the tables back and writes exactly the chains whose rules differ from
// the plan: one flushed behind wasp's back, one with a rule changed; and
// brings the hairpin set in line: an entry deleted behind its back comes
// back, one it does not want goes.
func TestFullSyncWritesOnlyDifferences(t *testing.T) {
	ctx := context.Background()
	s := goldenState4()
	f := NewFake()
	if _, err := newFakeBackend(t, f, opts4).Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	web := &s.Services[slices.IndexFunc(s.Services, func(v backends.Service) bool { return v.Name == "web" })]
	n := newServiceChains(web)
	tamper := "*nat\n:" + n.svc + " - [0:0]\n:" + ChainMarkMasq + " - [0:0]\n-A " + ChainMarkMasq + " -j MARK --or-mark 0x8\nCOMMIT\n" +
		"*filter\n:" + ChainForward + " - [0:0]\nCOMMIT\n"
	if err := f.restore(ctx, restoreText(tamper)); err != nil {
		t.Fatal(err)
	}
	lost := HairpinEntry{Addr: web.Cluster[0].Addr, Protocol: backends.TCP, Port: web.Cluster[0].Port}
	foreign := HairpinEntry{Addr: ip("10.244.9.9"), Protocol: backends.UDP, Port: 9}
	if err := f.delFromSet(ctx, SetHairpin4, []HairpinEntry{lost}); err != nil {
		t.Fatal(err)
	}
	if err := f.addToSet(ctx, SetHairpin4, []HairpinEntry{foreign}); err != nil {
		t.Fatal(err)
	}
	b := newFakeBackend(t, f, opts4)
	if _, err := b.Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	in := f.lastRestore()
	got := append(restoreChains(in, ":"), restoreChains(in, "-X ")...)
	slices.Sort(got)
	want := []string{"filter/" + ChainForward, "nat/" + ChainMarkMasq, "nat/" + n.svc}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the full sync wrote %v, want %v:\n%s", got, want, in)
	}
	if b.stats.setAdds != 1 || b.stats.setDels != 1 {
		t.Errorf("the full sync added %d and deleted %d hairpin entries, want 1 and 1", b.stats.setAdds, b.stats.setDels)
	}
	if got, want := f.Dump(), fresh(t, s); got != want {
		t.Errorf("after the full sync:\n%s", lineDiff(want, got))
	}
}

// TestFullSyncDeletesEndpointChains: the first full sync on tables an
// earlier version programmed, with one chain per endpoint (WASP-SEP-,
// hairpin marked there), rewrites the policy chains to DNAT themselves
// and deletes the endpoint chains in the same restore, and leaves the
// tables as a fresh sync's.
func TestFullSyncDeletesEndpointChains(t *testing.T) {
	ctx := context.Background()
	s := goldenState4()
	f := NewFake()
	in, seps := endpointChainsLayout(s)
	if err := f.restore(ctx, restoreText(in)); err != nil {
		t.Fatal(err)
	}
	b := newFakeBackend(t, f, opts4)
	if _, err := b.Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	deleted := restoreChains(f.lastRestore(), "-X ")
	for _, sep := range seps {
		if !slices.Contains(deleted, TableNAT+"/"+sep) {
			t.Errorf("endpoint chain %s of the earlier layout not deleted: %v", sep, deleted)
		}
	}
	if got, want := f.Dump(), fresh(t, s); got != want {
		t.Errorf("after the first sync:\n%s", lineDiff(want, got))
	}
}

// endpointChainsLayout returns a restore of the policy chains of s's
// service ports in the layout of wasp's earlier versions, one chain per
// endpoint (a hairpin mark, then the DNAT), and the names of those.
func endpointChainsLayout(s *backends.State) (in string, seps []string) {
	in = "*nat\n"
	var rules []string
	for i := range s.Services {
		svc := &s.Services[i]
		if len(svc.Cluster) == 0 {
			continue
		}
		n := newServiceChains(svc)
		in += ":" + n.svc + " - [0:0]\n"
		l4 := "-p " + svc.Protocol.Lower() + " -m " + svc.Protocol.Lower()
		for j := range svc.Cluster {
			e := &svc.Cluster[j]
			sep := endpointName(n.base, e)
			seps = append(seps, sep)
			in += ":" + sep + " - [0:0]\n"
			rules = append(rules, "-A "+n.svc+" -j "+sep,
				"-A "+sep+" -s "+hostPrefix(e.Addr)+" -j MARK --or-mark 0x4000",
				"-A "+sep+" "+l4+" -j DNAT --to-destination "+netip.AddrPortFrom(e.Addr, e.Port).String())
		}
	}
	return in + strings.Join(rules, "\n") + "\nCOMMIT\n", seps
}

// TestHairpinSharedEndpoint: an endpoint of two service ports stays in
// the hairpin set until neither has it, through partial syncs.
func TestHairpinSharedEndpoint(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	b := newFakeBackend(t, f, opts4)
	shared := ep("10.244.1.50", 1)
	entry := "10.244.1.50,tcp:8080,10.244.1.50"
	one := svc("one", "10.96.0.50", func(s *backends.Service) { s.Cluster = []backends.Endpoint{shared} })
	two := svc("two", "10.96.0.51", func(s *backends.Service) { s.Cluster = []backends.Endpoint{shared, ep("10.244.2.51", 1)} })
	for i, step := range []struct {
		svcs []backends.Service
		in   bool
	}{{[]backends.Service{one, two}, true}, {[]backends.Service{two}, true}, {[]backends.Service{one}, true}, {nil, false}, {[]backends.Service{two}, true}} {
		if _, err := b.Sync(ctx, backendtest.State(backends.IPv4, step.svcs...)); err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(f.setEntries(SetHairpin4), entry); got != step.in || (i > 0 && b.LastSync().Full) {
			t.Errorf("step %d: entry in the set %v, want %v (full %v)", i, got, step.in, b.LastSync().Full)
		}
	}
}

// syncingSave is a Fake whose first save runs sync, as a Sync that
// overlaps a drift check's read-back.
type syncingSave struct {
	*Fake
	sync func()
}

func (k *syncingSave) save(ctx context.Context, table string, w io.Writer) error {
	if f := k.sync; f != nil {
		k.sync = nil
		f()
	}
	return k.Fake.save(ctx, table, w)
}

// TestCheckDriftOverlappingSync: a Sync during a check's read-back is not
// blocked by it (it would deadlock here), the check concludes nothing,
// and the next check, which holds the lock, finds the drift.
func TestCheckDriftOverlappingSync(t *testing.T) {
	ctx := context.Background()
	k := &syncingSave{Fake: NewFake()}
	b, err := newBackend(opts4, k)
	if err != nil {
		t.Fatal(err)
	}
	s, changed := goldenState4(), changedCopy(goldenState4(), 0)
	if _, err := b.Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	meddle(t, k.Fake, TableNAT, ":"+Prefix+"SVC-AAAAAAAAAAAAAAAA - [0:0]") // left alone by partial syncs
	synced := false
	k.sync = func() { _, err := b.Sync(ctx, changed); synced = err == nil }
	if d, err := b.CheckDrift(ctx); err != nil || d != nil || !synced {
		t.Fatalf("the check a Sync overlapped: %+v, %v; synced %v", d, err, synced)
	}
	if !b.readbackLocked {
		t.Error("the next check will not hold the lock")
	}
	if d, err := b.CheckDrift(ctx); err != nil || d.Empty() || d.Objects[backends.DriftChain] != 1 || b.readbackLocked {
		t.Fatalf("the next check: %+v, %v; want the chain added found", d, err)
	}
}
