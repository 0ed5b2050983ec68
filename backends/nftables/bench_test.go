package nftables

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
)

// The benchmarks program 10k service ports of 10 endpoints each (110k
// chains, 10k numgen maps) on the fake kernel, and report how long a
// one-service change takes as a ratio of a full build measured in the
// same run ("ratio"), so their numbers compare across machines.

const benchServices, benchEndpoints = 10000, 10

// changedCopy returns s with service port i's endpoints changed; the
// other service ports share their memory with s.
func changedCopy(s *backends.State, i int) *backends.State {
	c := *s
	c.Services = slices.Clone(s.Services)
	c.Services[i].Cluster = c.Services[i].Cluster[:len(c.Services[i].Cluster)-1]
	return &c
}

// fullPlanDiff plans s from scratch and diffs it against an empty table.
func fullPlanDiff(s *backends.State) *Transaction {
	return Diff(nil, Plan(s.Family, DefaultTable, backends.DefaultMasqueradeBit, s))
}

// timeFull returns the mean time of f over a few runs.
func timeFull(f func()) time.Duration {
	const runs = 3
	start := time.Now()
	for range runs {
		f()
	}
	return time.Since(start) / runs
}

func BenchmarkFullPlanDiff(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	var ops int
	for b.Loop() {
		ops = fullPlanDiff(s).Len()
	}
	b.ReportMetric(float64(ops), "ops/tx")
}

func BenchmarkOneServiceChangePlanDiff(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	full := timeFull(func() { fullPlanDiff(s) })
	states := []*backends.State{changedCopy(s, benchServices/2), s}
	p := newPlanner(config{family: s.Family, table: DefaultTable, mark: 1 << backends.DefaultMasqueradeBit})
	prev := p.plan(s)
	var ops, n int
	for b.Loop() {
		rs := p.plan(states[n%2])
		ops = Diff(prev, rs).Len()
		prev = rs
		n++
	}
	b.ReportMetric(float64(ops), "ops/tx")
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(full), "ratio")
}

// newBenchFake returns a fake kernel without the commit-time walk over
// every chain (a check, not part of the cost measured).
func newBenchFake() *Fake {
	f := NewFake()
	f.noCommit = true
	return f
}

func fullSync(b *testing.B, s *backends.State) {
	be, err := NewWithFake(Opts{Family: s.Family}, newBenchFake())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := be.Sync(context.Background(), s); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkFullSyncFake(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	for b.Loop() {
		fullSync(b, s)
	}
}

func BenchmarkOneServiceChangeSyncFake(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	full := timeFull(func() { fullSync(b, s) })
	be, err := NewWithFake(Opts{Family: s.Family}, newBenchFake())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := be.Sync(ctx, s); err != nil {
		b.Fatal(err)
	}
	states := []*backends.State{changedCopy(s, benchServices/2), s}
	n := 0
	for b.Loop() {
		if _, err := be.Sync(ctx, states[n%2]); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if be.stats.rebuilds != 1 {
		b.Fatalf("stats %+v", be.stats)
	}
	b.ReportMetric(float64(be.stats.lastOps), "ops/tx")
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(full), "ratio")
}
