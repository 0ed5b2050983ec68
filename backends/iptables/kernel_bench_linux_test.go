//go:build linux

package iptables

import (
	"context"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// The kernel benchmarks program 10k service ports × 10 endpoints into
// the iptables of a throwaway network namespace, with each variant (root
// only; skipped otherwise and in -short mode), and report a ratio against
// a baseline measured in the same run; none asserts a time:
//
//   - BenchmarkKernelFullSync/<variant>: a first Sync into empty tables.
//   - BenchmarkKernelOneServiceChange/<variant>: one service port's
//     endpoints change, a partial Sync; "ratio" is its cost against the
//     full sync of the same 10k in the same namespace, measured first.
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

func BenchmarkKernelFullSync(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	for _, v := range []xtables.Variant{xtables.Legacy, xtables.NFT} {
		b.Run(string(v), func(b *testing.B) {
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

func BenchmarkKernelOneServiceChange(b *testing.B) {
	s := largeState(benchServices, benchEndpoints)
	for _, v := range []xtables.Variant{xtables.Legacy, xtables.NFT} {
		b.Run(string(v), func(b *testing.B) {
			ctx := context.Background()
			be := kernelBenchBackend(b, v, kernelBenchNS(b, v))
			start := time.Now()
			if err := be.Sync(ctx, s); err != nil {
				b.Fatal(err)
			}
			full := time.Since(start)
			syncChanges(b, be, s, full)
			b.ReportMetric(full.Seconds(), "full-s")
		})
	}
}
