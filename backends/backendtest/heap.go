package backendtest

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// HeapMeter measures the Go heap of a piece of work, a backend's large
// Sync, summed over rounds: each round runs between Start and Stop. What
// it reports, in MiB per round:
//
//   - "retained": the live heap after a collection at Stop, against the
//     heap before Start (what the round allocated and still holds: the
//     caller keeps the Backend reachable until Stop returns);
//   - "peak": the largest heap of objects, live or not yet collected,
//     sampled every millisecond between Start and Stop, against the heap
//     before Start;
//   - "alloc": what the round allocated.
type HeapMeter struct {
	before                runtime.MemStats
	stop                  chan struct{}
	top                   chan uint64
	retained, peak, alloc float64
	rounds                int
}

// Start collects garbage, reads the heap, and starts sampling it.
func (m *HeapMeter) Start() {
	runtime.GC()
	runtime.ReadMemStats(&m.before)
	m.stop, m.top = make(chan struct{}), make(chan uint64)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var top uint64
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			top = max(top, sample[0].Value.Uint64())
			select {
			case <-m.stop:
				m.top <- top
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the round started by Start.
func (m *HeapMeter) Stop() {
	const mib = 1 << 20
	close(m.stop)
	m.peak += float64(<-m.top-m.before.HeapAlloc) / mib
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	m.alloc += float64(after.TotalAlloc-m.before.TotalAlloc) / mib
	runtime.GC()
	runtime.ReadMemStats(&after)
	m.retained += (float64(after.HeapAlloc) - float64(m.before.HeapAlloc)) / mib
	m.rounds++
}

// Report reports the rounds' means as the metrics retained-MiB, peak-MiB
// and alloc-MiB of b.
func (m *HeapMeter) Report(b *testing.B) {
	n := float64(max(1, m.rounds))
	b.ReportMetric(m.retained/n, "retained-MiB")
	b.ReportMetric(m.peak/n, "peak-MiB")
	b.ReportMetric(m.alloc/n, "alloc-MiB")
}
