//go:build linux

package iptables

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
)

// The kernel benchmarks program N service ports × 10 endpoints
// (benchSizes) into the iptables of a throwaway network namespace, with
// each variant (root only; skipped otherwise and in -short mode), and
// report a ratio against a baseline measured in the same run; none
// asserts a time:
//
//   - BenchmarkKernelFullSync/<variant>/<N>: a first Sync into empty
//     tables.
//   - BenchmarkKernelOneServiceChange/<variant>/<N>: one service port's
//     endpoints change, a partial Sync; "ratio" is its cost against the
//     full sync of the same N in the same namespace, measured first
//     ("full-s").
//   - BenchmarkKernelRestartSync/<variant>/<N>: a restarted Backend's
//     first Sync on tables that hold its State, against the full sync.
//   - BenchmarkKernelDriftCheck/<variant>: CheckDrift at benchServices,
//     against the full sync.
//
//	go test -run '^$' -bench Kernel -benchtime 3x ./backends/iptables/

// kernelBenchNS returns the path of a fresh network namespace, or skips.
func kernelBenchNS(b *testing.B, v xtables.Variant) string {
	b.Helper()
	ns := kernelNS(b, "kernel benchmark", "bench")
	if _, err := xtables.New(v, backends.IPv4, ns); err != nil {
		b.Skipf("kernel benchmark: iptables %s: %v", v, err)
	}
	return ns
}

func kernelBenchBackend(b *testing.B, v xtables.Variant, netns string) *Backend {
	b.Helper()
	be, err := New(context.Background(), Opts{Family: backends.IPv4, NetNS: netns, Variant: v})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	return be
}

// benchSizes are the numbers of service ports of the kernel benchmarks.
// (With one chain per endpoint, as upstream, iptables-nft-restore of 10k
// service ports, 110k chains, ran for over ten minutes on a two-core
// machine before it was stopped; with one chain per service port it
// takes seconds.)
func benchSizes(v xtables.Variant) []int { return []int{1000, benchServices} }

func BenchmarkKernelFullSync(b *testing.B) {
	for _, v := range []xtables.Variant{xtables.Legacy, xtables.NFT} {
		for _, n := range benchSizes(v) {
			s := largeState(n, benchEndpoints)
			b.Run(fmt.Sprintf("%s/%d", v, n), func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					be := kernelBenchBackend(b, v, kernelBenchNS(b, v))
					b.StartTimer()
					if _, err := be.Sync(context.Background(), s); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkKernelOneServiceChange(b *testing.B) {
	for _, v := range []xtables.Variant{xtables.Legacy, xtables.NFT} {
		for _, n := range benchSizes(v) {
			s := largeState(n, benchEndpoints)
			b.Run(fmt.Sprintf("%s/%d", v, n), func(b *testing.B) {
				be := kernelBenchBackend(b, v, kernelBenchNS(b, v))
				full := timedSync(b, be, s)
				syncChanges(b, be, s, full)
				b.ReportMetric(full.Seconds(), "full-s")
			})
		}
	}
}

// BenchmarkKernelRestartSync: a new Backend's first Sync (a full one)
// on tables that already hold its State, as after a restart: it reads
// both tables back and writes nothing. "ratio" is its cost against the
// first full sync into empty tables of the same run ("full-s").
func BenchmarkKernelRestartSync(b *testing.B) {
	for _, v := range []xtables.Variant{xtables.Legacy, xtables.NFT} {
		for _, n := range benchSizes(v) {
			s := largeState(n, benchEndpoints)
			b.Run(fmt.Sprintf("%s/%d", v, n), func(b *testing.B) {
				ctx := context.Background()
				ns := kernelBenchNS(b, v)
				full := timedSync(b, kernelBenchBackend(b, v, ns), s)
				var written int
				for b.Loop() {
					b.StopTimer() // the binaries' version checks are not the sync's
					be := kernelBenchBackend(b, v, ns)
					b.StartTimer()
					if _, err := be.Sync(ctx, s); err != nil {
						b.Fatal(err)
					}
					written = be.stats.written
				}
				b.ReportMetric(float64(written), "chains/restore")
				b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(full), "ratio")
				b.ReportMetric(full.Seconds(), "full-s")
			})
		}
	}
}

// timedSync syncs be with s and returns how long it took.
func timedSync(b *testing.B, be *Backend, s *backends.State) time.Duration {
	start := time.Now()
	if _, err := be.Sync(context.Background(), s); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkKernelSyncMemory measures the heap of the Backend's two large
// syncs at benchServices service ports × 10 endpoints, with GOGC 50 as
// wasp runs (backendtest.HeapMeter says what each metric is): "full", a
// first Sync into empty tables, and "restart", a new Backend's first Sync
// on tables that already hold the State (it reads them back and writes
// nothing).
//
//	go test -run '^$' -bench KernelSyncMemory -benchtime 3x ./backends/iptables/
func BenchmarkKernelSyncMemory(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	for _, v := range []xtables.Variant{xtables.Legacy, xtables.NFT} {
		// measure runs a first Sync of a new Backend in the namespace
		// that ns returns, for each round.
		measure := func(b *testing.B, ns func() string) {
			var m backendtest.HeapMeter
			for b.Loop() {
				b.StopTimer()
				netns := ns()
				m.Start()
				be := kernelBenchBackend(b, v, netns)
				b.StartTimer()
				if _, err := be.Sync(context.Background(), s); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				m.Stop()
				runtime.KeepAlive(be) // retained until Stop
				b.StartTimer()
			}
			m.Report(b)
		}
		b.Run(fmt.Sprintf("%s/full", v), func(b *testing.B) {
			measure(b, func() string { return kernelBenchNS(b, v) })
		})
		b.Run(fmt.Sprintf("%s/restart", v), func(b *testing.B) {
			ns := kernelBenchNS(b, v)
			if _, err := kernelBenchBackend(b, v, ns).Sync(context.Background(), s); err != nil {
				b.Fatal(err)
			}
			measure(b, func() string { return ns })
		})
	}
}

// BenchmarkKernelDriftCheck measures CheckDrift at benchServices service
// ports × 10 endpoints: both tables read back with iptables-save and
// every rule compared with the plan, which is what every check costs
// (iptables has no generation counter to skip an unchanged table by).
// Measured in the same run and namespace, against the first full sync
// into empty tables: "ratio" (wall time), "cpu-ratio" (the CPU time of
// the process and of the iptables binaries it ran, user and system, for
// a loaded machine; "save-cpu-s" and "go-cpu-s" split a check's between
// the iptables binaries and wasp), and "MiB/check" and "allocs/check" of
// the Go heap against "full-MiB" and "full-allocs". The "first-" metrics
// are of the first check, which parses every rule; the later ones
// compare the lines it found the same by hash.
//
//	go test -run '^$' -bench KernelDriftCheck -benchtime 5x ./backends/iptables/
func BenchmarkKernelDriftCheck(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	for _, v := range []xtables.Variant{xtables.Legacy, xtables.NFT} {
		b.Run(string(v), func(b *testing.B) {
			ctx := context.Background()
			be := kernelBenchBackend(b, v, kernelBenchNS(b, v))
			full := measure(func() {
				if _, err := be.Sync(ctx, s); err != nil {
					b.Fatal(err)
				}
			})
			check1 := func() {
				if d, err := be.CheckDrift(ctx); err != nil || d != nil {
					b.Fatalf("drift check: %+v, %v", d, err)
				}
			}
			first := measure(check1)
			var check cost
			for b.Loop() {
				check.add(measure(check1))
			}
			n := float64(b.N)
			b.ReportMetric(float64(first.wall)/float64(full.wall), "first-ratio")
			b.ReportMetric(float64(first.cpu)/float64(full.cpu), "first-cpu-ratio")
			b.ReportMetric(float64(first.bytes)/(1<<20), "first-MiB")
			b.ReportMetric(float64(check.wall)/n/float64(full.wall), "ratio")
			b.ReportMetric(float64(check.cpu)/n/float64(full.cpu), "cpu-ratio")
			b.ReportMetric(check.children.Seconds()/n, "save-cpu-s")
			b.ReportMetric((check.cpu-check.children).Seconds()/n, "go-cpu-s")
			b.ReportMetric(float64(check.bytes)/n/(1<<20), "MiB/check")
			b.ReportMetric(float64(check.allocs)/n, "allocs/check")
			b.ReportMetric(full.wall.Seconds(), "full-s")
			b.ReportMetric(full.cpu.Seconds(), "full-cpu-s")
			b.ReportMetric(float64(full.bytes)/(1<<20), "full-MiB")
			b.ReportMetric(float64(full.allocs), "full-allocs")
		})
	}
}

// cost is what a piece of work took.
type cost struct {
	wall, cpu     time.Duration // cpu: of the process and its children
	children      time.Duration // cpu of the children (the iptables binaries)
	bytes, allocs uint64        // allocated on the Go heap
}

func (c *cost) add(d cost) {
	c.wall += d.wall
	c.cpu += d.cpu
	c.children += d.children
	c.bytes += d.bytes
	c.allocs += d.allocs
}

// measure returns what f took.
func measure(f func()) cost {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	self0, children0, t0 := cpuTime(syscall.RUSAGE_SELF), cpuTime(syscall.RUSAGE_CHILDREN), time.Now()
	f()
	wall := time.Since(t0)
	children := cpuTime(syscall.RUSAGE_CHILDREN) - children0
	cpu := cpuTime(syscall.RUSAGE_SELF) - self0 + children
	runtime.ReadMemStats(&m1)
	return cost{wall: wall, cpu: cpu, children: children, bytes: m1.TotalAlloc - m0.TotalAlloc, allocs: m1.Mallocs - m0.Mallocs}
}

// cpuTime returns the user and system time of the process
// (syscall.RUSAGE_SELF) or of its children that have been waited for
// (syscall.RUSAGE_CHILDREN: the iptables binaries).
func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
