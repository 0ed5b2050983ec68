package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// lbChain is the Cluster chain of goldenState4's service port "lb" (web
// is a simple service port: no chain of its own).
func lbChain(t *testing.T) string {
	t.Helper()
	s := goldenState4()
	for i := range s.Services {
		if s.Services[i].Name == "lb" {
			return newServiceNames(&s.Services[i]).cluster
		}
	}
	t.Fatal("no service lb")
	return ""
}

func TestCheckDrift(t *testing.T) {
	lb := lbChain(t)
	tests := []struct {
		name   string
		tamper func(t *testing.T, f *Fake) error
		// want are the kinds counted, and example a part of the first
		// example; nil want: no drift.
		want    map[string]int
		example string
	}{{
		name: "endpoint element deleted",
		tamper: func(t *testing.T, f *Fake) error {
			return f.DeleteElement(backends.IPv4, DefaultTable, "buckets-cluster-2", "10.96.0.10 . tcp . 80 . 1")
		},
		want:    map[string]int{backends.DriftElement: 1},
		example: "map buckets-cluster-2: element 10.96.0.10 . tcp . 80 . 1 missing",
	}, {
		name: "service element deleted",
		tamper: func(t *testing.T, f *Fake) error {
			return f.DeleteElement(backends.IPv4, DefaultTable, serviceIPsMap, "10.96.0.15 . tcp . 80")
		},
		want:    map[string]int{backends.DriftElement: 1},
		example: "map service-ips: element 10.96.0.15 . tcp . 80 missing",
	}, {
		name: "simple service element deleted",
		tamper: func(t *testing.T, f *Fake) error {
			return f.DeleteElement(backends.IPv4, DefaultTable, simpleServicesSet, "10.96.0.10 . tcp . 80")
		},
		want:    map[string]int{backends.DriftElement: 1},
		example: "set simple-services: element 10.96.0.10 . tcp . 80 missing",
	}, {
		name: "simple class element deleted",
		tamper: func(t *testing.T, f *Fake) error {
			return f.DeleteElement(backends.IPv4, DefaultTable, "simple-cluster-2", "10.96.0.10 . tcp . 80")
		},
		want:    map[string]int{backends.DriftElement: 1},
		example: "set simple-cluster-2: element 10.96.0.10 . tcp . 80 missing",
	}, {
		name:    "service chain flushed",
		tamper:  func(t *testing.T, f *Fake) error { return f.FlushChain(backends.IPv4, DefaultTable, lb) },
		want:    map[string]int{backends.DriftRule: 2},
		example: "chain " + lb + ": 0 rules, want 2",
	}, {
		name: "simple-classes rule deleted",
		tamper: func(t *testing.T, f *Fake) error {
			return f.DeleteRule(backends.IPv4, DefaultTable, simpleClassesChain, 3)
		},
		want:    map[string]int{backends.DriftRule: 30}, // the rules after it moved up
		example: "chain simple-classes: 32 rules, want 33",
	}, {
		name: "base chain rule deleted",
		tamper: func(t *testing.T, f *Fake) error {
			return f.DeleteRule(backends.IPv4, DefaultTable, filterInputChain, 1)
		},
		want:    map[string]int{backends.DriftRule: 1},
		example: "chain filter-input: 1 rules, want 2",
	}, {
		name:    "rule replaced",
		tamper:  func(t *testing.T, f *Fake) error { return f.ReplaceRule(backends.IPv4, DefaultTable, servicesChain, 0) },
		want:    map[string]int{backends.DriftRule: 1},
		example: "chain services: rule 1 changed: want \"ip daddr . meta l4proto . th dport vmap @service-ips\"",
	}, {
		name:    "chain added",
		tamper:  func(t *testing.T, f *Fake) error { return f.AddChain(backends.IPv4, DefaultTable, "intruder") },
		want:    map[string]int{backends.DriftChain: 1},
		example: "chain intruder not programmed by wasp",
	}, {
		name: "element changed",
		tamper: func(t *testing.T, f *Fake) error {
			return f.tamper(backends.IPv4, DefaultTable, func(a *fakeApply, tb *fakeTable) error {
				s := tb.sets["buckets-cluster-2"]
				s.elems[ElemKey{Addr: ip("10.96.0.10"), Proto: 6, Port: 80, Bucket: 1}] = elemValue{to: netip.MustParseAddrPort("10.244.9.9:8080")}
				return nil
			})
		},
		want:    map[string]int{backends.DriftElement: 1},
		example: "element 10.96.0.10 . tcp . 80 . 1 changed: want 10.244.2.10 . 8080",
	}, {
		name: "element added",
		tamper: func(t *testing.T, f *Fake) error {
			return f.tamper(backends.IPv4, DefaultTable, func(a *fakeApply, tb *fakeTable) error {
				tb.sets[clusterIPsSet].elems[ElemKey{Addr: ip("10.96.9.9")}] = elemValue{}
				return nil
			})
		},
		want:    map[string]int{backends.DriftElement: 1},
		example: "set cluster-ips: element 10.96.9.9 not programmed by wasp",
	}, {
		name: "set added",
		tamper: func(t *testing.T, f *Fake) error {
			return f.tamper(backends.IPv4, DefaultTable, func(a *fakeApply, tb *fakeTable) error {
				return a.addSet(tb, &Set{Name: "intruder", Key: []KeyType{KeyIPv4Addr}})
			})
		},
		want:    map[string]int{backends.DriftSet: 1},
		example: "set intruder not programmed by wasp",
	}, {
		name: "table deleted",
		tamper: func(t *testing.T, f *Fake) error {
			return f.apply(context.Background(), &Transaction{Family: backends.IPv4, Table: DefaultTable, ops: []op{{kind: opDeleteTable}}})
		},
		want:    map[string]int{backends.DriftTable: 1},
		example: "table ip wasp missing",
	}, {
		// A packet's update is no commit; the commit to another table
		// makes the check read the table back all the same.
		name: "client added to an affinity set",
		tamper: func(t *testing.T, f *Fake) error {
			for name, s := range f.tables[tableID{backends.IPv4, DefaultTable}].sets {
				if s.spec.Dynamic {
					if err := f.update(backends.IPv4, DefaultTable, name, ip("198.51.100.99")); err != nil {
						return err
					}
					return f.apply(context.Background(), &Transaction{Family: backends.IPv4, Table: "other", ops: []op{{kind: opAddTable}}})
				}
			}
			return fmt.Errorf("no affinity set")
		},
	}, {
		name: "another table committed",
		tamper: func(t *testing.T, f *Fake) error {
			return f.apply(context.Background(), &Transaction{Family: backends.IPv4, Table: "other", ops: []op{{kind: opAddTable}}})
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := NewFake()
			b, err := NewWithFake(Opts{Family: backends.IPv4}, f)
			if err != nil {
				t.Fatal(err)
			}
			if d, err := b.CheckDrift(ctx); err != nil || d != nil {
				t.Fatalf("check before any sync: %v, %v; want nothing", d, err)
			}
			s := goldenState4()
			if _, err := b.Sync(ctx, s); err != nil {
				t.Fatal(err)
			}
			programmed := f.Dump()
			if d, err := b.CheckDrift(ctx); err != nil || d != nil {
				t.Fatalf("check after the sync: %+v, %v; want no drift", d, err)
			}
			readbacks := b.stats.driftReadbacks
			if d, err := b.CheckDrift(ctx); err != nil || d != nil || b.stats.driftReadbacks != readbacks {
				t.Fatalf("second check: %+v, %v, %d read-backs (was %d); want no drift without a read-back", d, err, b.stats.driftReadbacks, readbacks)
			}

			if err := tc.tamper(t, f); err != nil {
				t.Fatal(err)
			}
			d, err := b.CheckDrift(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if b.stats.driftReadbacks != readbacks+1 {
				t.Errorf("%d read-backs after the change, want %d", b.stats.driftReadbacks, readbacks+1)
			}
			if tc.want == nil {
				if d != nil {
					t.Fatalf("drift %+v, want none", d)
				}
				return
			}
			if d == nil {
				t.Fatalf("no drift found, want %v", tc.want)
			}
			if fmt.Sprint(d.Objects) != fmt.Sprint(tc.want) {
				t.Errorf("drift objects %v, want %v (examples %q)", d.Objects, tc.want, d.Examples)
			}
			if len(d.Examples) == 0 || !strings.Contains(d.Examples[0], tc.example) {
				t.Errorf("examples %q, want the first to contain %q", d.Examples, tc.example)
			}

			// The next Sync of the same State repairs the table.
			if _, err := b.Sync(ctx, s); err != nil {
				t.Fatalf("repair: %v", err)
			}
			if b.stats.rebuilds != 2 {
				t.Errorf("%d rebuilds, want 2 (the first sync and the repair)", b.stats.rebuilds)
			}
			if got := f.Dump(); got != programmed {
				t.Errorf("after the repair the table differs from the programmed one:\n%s", lineDiff(programmed, got))
			}
			if d, err := b.CheckDrift(ctx); err != nil || d != nil {
				t.Fatalf("check after the repair: %+v, %v; want no drift", d, err)
			}
		})
	}
}

// TestCheckDriftAfterOwnSyncs: the Backend's own transactions keep the
// table verified, so checks between syncs need no read-back; a commit of
// another process between them does.
func TestCheckDriftAfterOwnSyncs(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	b, err := NewWithFake(Opts{Family: backends.IPv4}, f)
	if err != nil {
		t.Fatal(err)
	}
	states := transitionStates()
	if _, err := b.Sync(ctx, states[0]); err != nil {
		t.Fatal(err)
	}
	if d, err := b.CheckDrift(ctx); err != nil || d != nil {
		t.Fatalf("first check: %+v, %v", d, err)
	}
	readbacks := b.stats.driftReadbacks
	for i, s := range states[1:] {
		if _, err := b.Sync(ctx, s); err != nil {
			t.Fatalf("state %d: %v", i+1, err)
		}
		if d, err := b.CheckDrift(ctx); err != nil || d != nil {
			t.Fatalf("state %d: %+v, %v; want no drift", i+1, d, err)
		}
	}
	if b.stats.driftReadbacks != readbacks {
		t.Errorf("%d read-backs between own syncs, want none", b.stats.driftReadbacks-readbacks)
	}
	// Every state of the sequence reads back clean, in both orders.
	for i := range states {
		for _, s := range []*backends.State{states[i], states[len(states)-1-i]} {
			if _, err := b.Sync(ctx, s); err != nil {
				t.Fatalf("state %d: %v", i, err)
			}
			b.verified = false // as after a foreign commit
			if d, err := b.CheckDrift(ctx); err != nil || d != nil {
				t.Fatalf("state %d read back: %+v, %v; want no drift", i, d, err)
			}
		}
	}
	readbacks = b.stats.driftReadbacks

	// Another process commits between the read of the generation before
	// a transaction and the transaction: the table is not verified.
	if err := f.apply(ctx, &Transaction{Family: backends.IPv4, Table: "other", ops: []op{{kind: opAddTable}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Sync(ctx, states[0]); err != nil {
		t.Fatal(err)
	}
	if d, err := b.CheckDrift(ctx); err != nil || d != nil {
		t.Fatalf("after a foreign commit: %+v, %v", d, err)
	}
	if b.stats.driftReadbacks != readbacks+1 {
		t.Errorf("%d read-backs after a foreign commit, want 1", b.stats.driftReadbacks-readbacks)
	}
}

// TestCheckDriftBoundsExamples: many differences are counted in full but
// described by at most backends.MaxDriftExamples examples, one per set.
func TestCheckDriftBoundsExamples(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	b, err := NewWithFake(Opts{Family: backends.IPv4}, f)
	if err != nil {
		t.Fatal(err)
	}
	// NodePorts: service ports with chains of their own, not simple.
	s := largeState(50, 4)
	for i := range s.Services {
		s.Services[i].NodePort = uint16(30000 + i)
	}
	if _, err := b.Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	var chains []string
	for name := range f.tables[tableID{backends.IPv4, DefaultTable}].chains {
		if strings.HasPrefix(name, clusterChainPrefix) {
			chains = append(chains, name)
		}
	}
	for _, c := range chains {
		if err := f.FlushChain(backends.IPv4, DefaultTable, c); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		if err := f.DeleteElement(backends.IPv4, DefaultTable, serviceIPsMap, fmt.Sprintf("10.96.0.%d . tcp . 80", i)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := b.CheckDrift(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Objects[backends.DriftElement] != 30 || d.Objects[backends.DriftRule] < len(chains) {
		t.Errorf("objects %v, want 30 elements and at least %d rules", d.Objects, len(chains))
	}
	if len(d.Examples) != backends.MaxDriftExamples {
		t.Errorf("%d examples, want %d", len(d.Examples), backends.MaxDriftExamples)
	}
}

// syncingKernel is a Fake whose rule listing runs a Sync of the Backend
// first, as a Sync that lands during a drift check's read-back.
type syncingKernel struct {
	*Fake
	during func()
}

func (k *syncingKernel) rules(ctx context.Context, family backends.Family, table string, fn func(chain string, tag uint64)) error {
	if k.during != nil {
		k.during()
	}
	return k.Fake.rules(ctx, family, table, fn)
}

// TestCheckDriftOverlappingSync: a Sync during a check's read-back is not
// held up by it, makes the check conclude nothing (the table it read is
// the new one, not the one it compares with), and the next check reads
// back, holding the lock, and finds no drift.
func TestCheckDriftOverlappingSync(t *testing.T) {
	ctx := context.Background()
	k := &syncingKernel{Fake: NewFake()}
	cfg, err := Opts{Family: backends.IPv4}.config()
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(cfg, k)
	states := transitionStates()
	if _, err := b.Sync(ctx, states[0]); err != nil {
		t.Fatal(err)
	}
	synced := false
	k.during = func() {
		k.during = nil
		_, err := b.Sync(ctx, states[2])
		synced = err == nil // would deadlock under the check's lock
	}
	if d, err := b.CheckDrift(ctx); err != nil || d != nil {
		t.Fatalf("overlapped check: %+v, %v; want nothing", d, err)
	}
	if !synced {
		t.Fatal("the Sync during the read-back failed")
	}
	if b.programmed == nil || !b.readbackLocked {
		t.Fatalf("after an overlapped check: programmed %v, readbackLocked %v; want kept, true", b.programmed != nil, b.readbackLocked)
	}
	readbacks := b.stats.driftReadbacks
	if d, err := b.CheckDrift(ctx); err != nil || d != nil || b.stats.driftReadbacks != readbacks+1 {
		t.Fatalf("next check: %+v, %v, %d read-backs; want no drift after one read-back", d, err, b.stats.driftReadbacks-readbacks)
	}
	if b.readbackLocked || !b.verified {
		t.Errorf("after the locked check: readbackLocked %v, verified %v; want false, true", b.readbackLocked, b.verified)
	}
	if b.stats.rebuilds != 1 {
		t.Errorf("%d rebuilds, want 1: no repair", b.stats.rebuilds)
	}
}
