package iptables

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
)

// The benchmarks plan and program 10k service ports of 10 endpoints each
// (120k chains in nat) on the Fake, and report how long a one-service
// change takes as a ratio of a full sync measured in the same run
// ("ratio"), so their numbers compare across machines. "bytes/restore" is
// the size of the iptables-restore input.

const benchServices, benchEndpoints = 10000, 10

// changedCopy returns s with service port i's endpoints changed; the
// other service ports share their memory with s.
func changedCopy(s *backends.State, i int) *backends.State {
	c := *s
	c.Services = slices.Clone(s.Services)
	c.Services[i].Cluster = c.Services[i].Cluster[:len(c.Services[i].Cluster)-1]
	return &c
}

// timeMean returns the mean time of f over a few runs.
func timeMean(f func()) time.Duration {
	const runs = 3
	start := time.Now()
	for range runs {
		f()
	}
	return time.Since(start) / runs
}

var benchOpts = Opts{Family: backends.IPv4}

func BenchmarkFullPlan(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	var n int
	for b.Loop() {
		n = len(mustPlan(b, benchOpts, s).Restore())
	}
	b.ReportMetric(float64(n), "bytes/restore")
}

// fullSync programs s on a new Fake and returns the restore's size.
func fullSync(b *testing.B, s *backends.State) int {
	f := NewFake()
	be := newFakeBackend(b, f, benchOpts)
	if _, err := be.Sync(context.Background(), s); err != nil {
		b.Fatal(err)
	}
	return len(f.lastRestore())
}

func BenchmarkFullSyncFake(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	var n int
	for b.Loop() {
		n = fullSync(b, s)
	}
	b.ReportMetric(float64(n), "bytes/restore")
}

// BenchmarkOneServiceChangePlan: the planner and the partial restore's
// input for a one-service change, against a full plan and restore input.
func BenchmarkOneServiceChangePlan(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	full := timeMean(func() { mustPlan(b, benchOpts, s).Restore() })
	states := []*backends.State{changedCopy(s, len(s.Services)/2), s}
	cfg, _ := benchOpts.config()
	p := newPlanner(cfg)
	prev := p.plan(s)
	var n, size int
	for b.Loop() {
		rs := p.plan(states[n%2])
		var in bytes.Buffer
		partialInput(prev, rs).write(&in)
		size = in.Len()
		prev = rs
		n++
	}
	b.ReportMetric(float64(size), "bytes/restore")
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(full), "ratio")
}

// BenchmarkOneServiceChangeSyncFake: a partial Sync of a one-service
// change on the Fake, against a full Sync on a new one.
func BenchmarkOneServiceChangeSyncFake(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	full := timeMean(func() { fullSync(b, s) })
	f := NewFake()
	be := newFakeBackend(b, f, benchOpts)
	ctx := context.Background()
	if _, err := be.Sync(ctx, s); err != nil {
		b.Fatal(err)
	}
	syncChanges(b, be, s, full)
	b.ReportMetric(float64(len(f.lastRestore())), "bytes/restore")
}

// syncChanges is the loop of the one-service-change benchmarks: be, which
// synced s, syncs s with one service port changed and s in turn, each a
// partial sync; "ratio" is their mean time against full.
func syncChanges(b *testing.B, be *Backend, s *backends.State, full time.Duration) {
	states := []*backends.State{changedCopy(s, len(s.Services)/2), s}
	n := 0
	for b.Loop() {
		if _, err := be.Sync(context.Background(), states[n%2]); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if be.stats.full != 1 {
		b.Fatalf("stats %+v: want one full sync", be.stats)
	}
	b.ReportMetric(float64(be.stats.written), "chains/restore")
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(full), "ratio")
}
