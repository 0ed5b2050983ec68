//go:build linux

package iptables

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
	"github.com/wasp-proxy/wasp/internal/netlab"
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
	if testing.Short() {
		b.Skip("kernel benchmark: skipped in -short mode")
	}
	if err := netlab.Probe(); err != nil {
		b.Skipf("kernel benchmark: %v", err)
	}
	ns, err := netlab.NewForTest(b).AddNS("bench")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := xtables.New(v, backends.IPv4, ns.Path()); err != nil {
		b.Skipf("kernel benchmark: iptables %s: %v", v, err)
	}
	return ns.Path()
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
// wasp runs: "full", a first Sync into empty tables, and "restart", a new
// Backend's first Sync on tables that already hold the State (it reads
// them back and writes nothing). "retained" is the live heap after a
// collection with the Backend kept, "peak" the largest heap of objects
// (live or not yet collected) sampled every millisecond during the Sync,
// both against the heap before the Backend was created; "alloc" is what
// the Sync allocated.
//
//	go test -run '^$' -bench KernelSyncMemory -benchtime 3x ./backends/iptables/
func BenchmarkKernelSyncMemory(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	for _, v := range []xtables.Variant{xtables.Legacy, xtables.NFT} {
		b.Run(fmt.Sprintf("%s/full", v), func(b *testing.B) {
			var m heapMeter
			for b.Loop() {
				b.StopTimer()
				ns := kernelBenchNS(b, v)
				m.start()
				be := kernelBenchBackend(b, v, ns)
				b.StartTimer()
				if err := be.Sync(context.Background(), s); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				m.stop()
				b.StartTimer()
			}
			m.report(b)
		})
		b.Run(fmt.Sprintf("%s/restart", v), func(b *testing.B) {
			ns := kernelBenchNS(b, v)
			if err := kernelBenchBackend(b, v, ns).Sync(context.Background(), s); err != nil {
				b.Fatal(err)
			}
			var m heapMeter
			for b.Loop() {
				b.StopTimer()
				m.start()
				be := kernelBenchBackend(b, v, ns)
				b.StartTimer()
				if err := be.Sync(context.Background(), s); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				m.stop()
				b.StartTimer()
			}
			m.report(b)
		})
	}
}

// heapMeter measures the heap between start and stop (see
// BenchmarkKernelSyncMemory), summed over rounds.
type heapMeter struct {
	before                runtime.MemStats
	stopc                 chan struct{}
	top                   chan uint64
	retained, peak, alloc float64
	rounds                int
}

func (m *heapMeter) start() {
	runtime.GC()
	runtime.ReadMemStats(&m.before)
	m.stopc, m.top = make(chan struct{}), make(chan uint64)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var top uint64
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			top = max(top, sample[0].Value.Uint64())
			select {
			case <-m.stopc:
				m.top <- top
				return
			case <-t.C:
			}
		}
	}()
}

// stop ends a round; what start's caller allocated since must still be
// reachable for "retained" to count it.
func (m *heapMeter) stop() {
	const mib = 1 << 20
	close(m.stopc)
	m.peak += float64(<-m.top-m.before.HeapAlloc) / mib
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	m.alloc += float64(after.TotalAlloc-m.before.TotalAlloc) / mib
	runtime.GC()
	runtime.ReadMemStats(&after)
	m.retained += (float64(after.HeapAlloc) - float64(m.before.HeapAlloc)) / mib
	m.rounds++
}

func (m *heapMeter) report(b *testing.B) {
	n := float64(m.rounds)
	b.ReportMetric(m.retained/n, "retained-MiB")
	b.ReportMetric(m.peak/n, "peak-MiB")
	b.ReportMetric(m.alloc/n, "alloc-MiB")
}
