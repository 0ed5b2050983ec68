package proxy

import (
	"context"
	goruntime "runtime"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// TestAfterFullSync: the hook runs after full syncs only.
func TestAfterFullSync(t *testing.T) {
	ctx := context.Background()
	calls := 0
	p, slices := benchProxy(t, 3, Opts{AfterFullSync: func() { calls++ }})
	name := types.NamespacedName{Namespace: "ns-1", Name: "svc-1"}
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"first sync", func() {}, 1},
		{"one Service changed", func() {
			if err := slices.Update(benchSlice(name.Namespace, name.Name, 1, 101)); err != nil {
				t.Fatal(err)
			}
			p.tracker.markServices(name)
		}, 1},
		{"resync", p.Resync, 2},
	}
	for _, st := range steps {
		st.do()
		if err := p.sync(ctx); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if calls != st.want {
			t.Errorf("%s: AfterFullSync called %d times in all; want %d", st.name, calls, st.want)
		}
	}
}

// liveHeap returns the heap in use after two collections: what is
// reachable.
func liveHeap() uint64 {
	goruntime.GC()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkSyncMemory: the heap the sync loop keeps at 10k Services, after
// a full sync and after partial ones (each b.Loop iteration: one Service's
// endpoints change), against its input measured in the same run: the heap
// of the listers' 10k Services and EndpointSlices, which the informers
// hold in any case. The backend is a no-op: what the nftables backend
// keeps is its own (docs/performance.md). Metrics, in MiB of live heap:
// input-MiB; full-MiB and partial-MiB, kept beyond the input after the
// first full sync and after the partial ones; full-alloc-MiB, allocated by
// one full sync (the transient the collector has to absorb); and
// x-input-full, full-MiB against input-MiB.
func BenchmarkSyncMemory(b *testing.B) {
	b.Run("native", func(b *testing.B) { benchSyncMemory(b, false) })
	b.Run("wasm", func(b *testing.B) { benchSyncMemory(b, true) })
}

func benchSyncMemory(b *testing.B, wasm bool) {
	ctx := context.Background()
	var pl *pipeline.Pipeline
	if wasm {
		rt, err := runtime.New(runtime.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rt.Close(ctx) })
		ch, err := chain.Load(ctx, rt, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(ch.Close)
		pl = pipeline.New(pipeline.Options{Modules: ch.PipelineModules()})
	}
	before := liveHeap()
	p, slices := benchProxy(b, benchServices, Opts{Pipeline: pl})
	input := liveHeap() - before

	var ms0, ms1 goruntime.MemStats
	goruntime.ReadMemStats(&ms0)
	if err := p.sync(ctx); err != nil {
		b.Fatal(err)
	}
	goruntime.ReadMemStats(&ms1)
	full := liveHeap() - before - input

	name := types.NamespacedName{Namespace: "ns-7", Name: "svc-7"}
	versions := [2]*discoveryv1.EndpointSlice{benchSlice(name.Namespace, name.Name, 7, 101), benchSlice(name.Namespace, name.Name, 7, 1)}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if err := slices.Update(versions[i%2]); err != nil {
			b.Fatal(err)
		}
		p.tracker.markServices(name)
		if err := p.sync(ctx); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	partial := liveHeap() - before - input
	const mib = 1 << 20
	b.ReportMetric(float64(input)/mib, "input-MiB")
	b.ReportMetric(float64(full)/mib, "full-MiB")
	b.ReportMetric(float64(partial)/mib, "partial-MiB")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/mib, "full-alloc-MiB")
	b.ReportMetric(float64(full)/float64(input), "x-input-full")
	goruntime.KeepAlive(p)
}
