//go:build linux

package iptables

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
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
					if err := be.Sync(context.Background(), s); err != nil {
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
					if err := be.Sync(ctx, s); err != nil {
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
	if err := be.Sync(context.Background(), s); err != nil {
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
				if err := be.Sync(context.Background(), s); err != nil {
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
			if err := kernelBenchBackend(b, v, ns).Sync(context.Background(), s); err != nil {
				b.Fatal(err)
			}
			measure(b, func() string { return ns })
		})
	}
}
