//go:build linux

package nftables

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// The kernel benchmarks program a table in a throwaway network namespace
// (root only; skipped otherwise and in -short mode). Each reports a ratio
// against a baseline measured in the same run, so that the numbers
// compare across machines and loads; none asserts a time:
//
//   - BenchmarkKernelFullSync/N: a first sync of N service ports × 10
//     endpoints into an empty table. "per-svc-vs-1k" is the cost per
//     service port against that of a 1k full sync measured just before:
//     1 means linear, growing with N means super-linear.
//   - BenchmarkKernelOneServiceChange: one service port's endpoints
//     change at 10k; "ratio" is its cost against the full sync of the
//     same 10k, measured first.
//
// "sys-frac" is the share of system (kernel) time in the measured syncs.
//
//	go test -run '^$' -bench Kernel -benchtime 3x ./backends/nftables/

// kernelBenchNS returns the path of a fresh network namespace, or skips.
func kernelBenchNS(b testing.TB) string {
	b.Helper()
	if testing.Short() {
		b.Skip("kernel benchmark: skipped in -short mode")
	}
	lab := netlab.NewForTest(b)
	ns, err := lab.AddNS("bench")
	if err != nil {
		b.Fatal(err)
	}
	if err := probeNFTables(ns.Path()); err != nil {
		b.Skipf("kernel benchmark: nftables unavailable: %v", err)
	}
	return ns.Path()
}

// cpuTimes returns the process's user and system CPU time.
func cpuTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// kernelFullSync programs s into an empty table of the namespace with a
// new Backend and returns how long the Sync took; the table is deleted
// afterwards, untimed.
func kernelFullSync(b *testing.B, ns string, s *backends.State) time.Duration {
	b.Helper()
	be, err := New(Opts{Family: s.Family, NetNS: ns})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	start := time.Now()
	if _, err := be.Sync(context.Background(), s); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	if err := be.Cleanup(context.Background()); err != nil {
		b.Fatal(err)
	}
	return d
}

func BenchmarkKernelFullSync(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			ns := kernelBenchNS(b)
			base := largeState(1000, benchEndpoints)
			kernelFullSync(b, ns, base) // warm up
			per1k := kernelFullSync(b, ns, base).Seconds() / 1000
			s := largeState(n, benchEndpoints)
			var total, sys time.Duration
			for b.Loop() {
				b.StopTimer()
				_, s0 := cpuTimes()
				b.StartTimer()
				total += kernelFullSync(b, ns, s)
				b.StopTimer()
				_, s1 := cpuTimes()
				sys += s1 - s0
				b.StartTimer()
			}
			b.ReportMetric(total.Seconds()/float64(b.N)/float64(n)/per1k, "per-svc-vs-1k")
			b.ReportMetric(sys.Seconds()/total.Seconds(), "sys-frac")
			b.ReportMetric(total.Seconds()/float64(b.N)*1000, "sync-ms")
		})
	}
}

// largeBackend returns a Backend that programmed the 10k service ports
// of the kernel benchmarks into a fresh namespace, with the wall and CPU
// time (user and system) of that first full sync; it closes when b ends.
func largeBackend(b *testing.B) (be *Backend, s *backends.State, full, fullCPU time.Duration) {
	b.Helper()
	ns := kernelBenchNS(b)
	s = largeState(benchServices, benchEndpoints)
	be, err := New(Opts{Family: s.Family, NetNS: ns})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	start, c0 := time.Now(), cpuTime()
	if _, err := be.Sync(context.Background(), s); err != nil {
		b.Fatal(err)
	}
	return be, s, time.Since(start), cpuTime() - c0
}

// cpuTime returns the process's user and system CPU time together.
func cpuTime() time.Duration {
	u, s := cpuTimes()
	return u + s
}

func BenchmarkKernelOneServiceChange(b *testing.B) {
	be, s, full, _ := largeBackend(b)
	ctx := context.Background()
	states := []*backends.State{changedCopy(s, benchServices/2), s}
	n := 0
	_, s0 := cpuTimes()
	for b.Loop() {
		if _, err := be.Sync(ctx, states[n%2]); err != nil {
			b.Fatal(err)
		}
		n++
	}
	_, s1 := cpuTimes()
	if be.stats.rebuilds != 1 {
		b.Fatalf("stats %+v", be.stats)
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(be.stats.lastOps), "ops/tx")
	b.ReportMetric(float64(per)/float64(full), "ratio")
	b.ReportMetric(float64(full.Milliseconds()), "full-ms")
	b.ReportMetric((s1-s0).Seconds()/b.Elapsed().Seconds(), "sys-frac")
	if err := be.Cleanup(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkKernelNewService: one Sync after another in a table of N
// service ports × 10 endpoints, where "new" adds a service port (10
// endpoints) and deletes it, and "endpoints" takes one endpoint from a
// service port and gives it back (10 → 9 → 10: its number of buckets
// changes). "sync-ms" is the mean Sync; "vs-1k" the same against the 1k
// case of the same run: 1 means a change costs the same at any scale.
//
//	go test -run '^$' -bench KernelNewService -benchtime 20x ./backends/nftables/
func BenchmarkKernelNewService(b *testing.B) {
	cases := []struct {
		name   string
		states func(n int) (from, to *backends.State)
	}{
		{"new", func(n int) (from, to *backends.State) {
			with := largeState(n+1, benchEndpoints)
			without := *with
			without.Services = with.Services[:n]
			return &without, with
		}},
		{"endpoints", func(n int) (from, to *backends.State) {
			from = largeState(n, benchEndpoints)
			fewer := *from
			fewer.Services = slices.Clone(from.Services)
			last := &fewer.Services[n-1]
			last.Cluster = last.Cluster[:len(last.Cluster)-1]
			return from, &fewer
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var at1k time.Duration
			for _, n := range []int{1000, 10000, 30000} {
				b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
					ns := kernelBenchNS(b)
					from, to := c.states(n)
					be, err := New(Opts{Family: from.Family, NetNS: ns})
					if err != nil {
						b.Fatal(err)
					}
					defer be.Close()
					ctx := context.Background()
					if _, err := be.Sync(ctx, from); err != nil {
						b.Fatal(err)
					}
					// The full sync's garbage, whose collection would
					// otherwise run during the changes, in proportion
					// to N (wasp collects after a full sync too).
					runtime.GC()
					states := []*backends.State{to, from}
					i := 0
					start := time.Now()
					for b.Loop() {
						if _, err := be.Sync(ctx, states[i%2]); err != nil {
							b.Fatal(err)
						}
						i++
					}
					per := time.Since(start) / time.Duration(i)
					if be.stats.rebuilds != 1 {
						b.Fatalf("stats %+v: a change rebuilt the table", be.stats)
					}
					if n == 1000 {
						at1k = per
					}
					b.ReportMetric(float64(be.stats.lastOps), "ops/tx")
					b.ReportMetric(float64(per.Microseconds())/1000, "sync-ms")
					if at1k > 0 {
						b.ReportMetric(float64(per)/float64(at1k), "vs-1k")
					}
					if err := be.Cleanup(ctx); err != nil {
						b.Fatal(err)
					}
				})
			}
		})
	}
}

// BenchmarkKernelFullSyncMemory measures the heap of a first full sync of
// 10k service ports with wasp's GC target (GOGC 50): "retained-MiB", the
// live heap after a collection with the Backend kept, against before it
// was created; "peak-MiB", the largest heap of objects (live or not yet
// collected) sampled every millisecond during the Sync, against the same
// base; "alloc-MiB", the bytes the Sync allocated.
//
//	go test -run '^$' -bench KernelFullSyncMemory -benchtime 3x ./backends/nftables/
func BenchmarkKernelFullSyncMemory(b *testing.B) {
	ns := kernelBenchNS(b)
	s := largeState(benchServices, benchEndpoints)
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	var m backendtest.HeapMeter
	for b.Loop() {
		b.StopTimer()
		m.Start()
		be, err := New(Opts{Family: s.Family, NetNS: ns})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := be.Sync(context.Background(), s); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		m.Stop()
		if err := be.Cleanup(context.Background()); err != nil {
			b.Fatal(err)
		}
		be.Close()
		b.StartTimer()
	}
	m.Report(b)
}

// BenchmarkKernelDriftCheck measures CheckDrift at 10k service ports × 10
// endpoints, against a one-service-port change and the first full sync
// of the same table, both measured in the same run:
//
//   - "readback": the table read back and compared in full, as after a
//     commit by anyone (the generation moved); "readback-vs-full" and
//     "readback-vs-change" are its cost against the full sync and the
//     change; "readback-MiB" what it allocates.
//   - "unchanged": no commit since the last check, one generation round
//     trip; "unchanged-vs-change" against the change.
//
// "-cpu" ratios compare the process's CPU time (user and system, which
// includes the kernel's work for the netlink calls) rather than wall time,
// for a loaded machine.
//
//	go test -run '^$' -bench KernelDriftCheck -benchtime 5x ./backends/nftables/
func BenchmarkKernelDriftCheck(b *testing.B) {
	be, s, full, fullCPU := largeBackend(b)
	ctx := context.Background()
	changed := changedCopy(s, benchServices/2)
	const changes = 10
	start := time.Now()
	for i := range changes {
		if _, err := be.Sync(ctx, []*backends.State{changed, s}[i%2]); err != nil {
			b.Fatal(err)
		}
	}
	change := time.Since(start) / changes

	check := func() {
		if d, err := be.CheckDrift(ctx); err != nil || d != nil {
			b.Fatalf("drift check: %+v, %v", d, err)
		}
	}
	var readback, readbackCPU, unchanged time.Duration
	var alloc uint64
	for b.Loop() {
		be.verified = false // as after another process's commit
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		t0, c0 := time.Now(), cpuTime()
		check()
		readback += time.Since(t0)
		readbackCPU += cpuTime() - c0
		runtime.ReadMemStats(&m1)
		alloc += m1.TotalAlloc - m0.TotalAlloc
		t0 = time.Now()
		check()
		unchanged += time.Since(t0)
	}
	if be.stats.driftReadbacks != b.N+1 && be.stats.driftReadbacks != b.N {
		b.Fatalf("%d read-backs in %d iterations", be.stats.driftReadbacks, b.N)
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64((readback/n).Microseconds())/1000, "readback-ms")
	b.ReportMetric(float64(readback/n)/float64(full), "readback-vs-full")
	b.ReportMetric(float64(readbackCPU/n)/float64(fullCPU), "readback-vs-full-cpu")
	b.ReportMetric(float64((readbackCPU/n).Microseconds())/1000, "readback-cpu-ms")
	b.ReportMetric(float64(readback/n)/float64(change), "readback-vs-change")
	b.ReportMetric(float64(alloc)/float64(b.N)/(1<<20), "readback-MiB")
	b.ReportMetric(float64((unchanged/n).Microseconds())/1000, "unchanged-ms")
	b.ReportMetric(float64(unchanged/n)/float64(change), "unchanged-vs-change")
	b.ReportMetric(float64(full.Milliseconds()), "full-ms")
	b.ReportMetric(float64(change.Microseconds())/1000, "change-ms")
	if err := be.Cleanup(ctx); err != nil {
		b.Fatal(err)
	}
}
