//go:build linux

package worker

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/modules"
)

// The benchmarks measure a module in a worker against the same module in
// this process, in alternating rounds of the same run, so that the
// machine's other work slows both alike; the ratios are of the fastest
// rounds (x-in-process-fastest) and of the medians (x-in-process). The
// modules are those of the build wasp embeds.

// alternate runs local and worker in turn, once each per iteration, and
// reports their fastest and median rounds and the ratios.
func alternate(b *testing.B, local, worker func()) {
	local() // warm up: instances, buffers
	worker()
	var dl, dw []time.Duration
	for b.Loop() {
		start := time.Now()
		local()
		mid := time.Now()
		worker()
		dl, dw = append(dl, mid.Sub(start)), append(dw, time.Since(mid))
	}
	slices.Sort(dl)
	slices.Sort(dw)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(dl[0]), "in-process-fastest-µs")
	b.ReportMetric(us(dw[0]), "worker-fastest-µs")
	b.ReportMetric(us(dl[len(dl)/2]), "in-process-median-µs")
	b.ReportMetric(us(dw[len(dw)/2]), "worker-median-µs")
	b.ReportMetric(us(dw[0])/us(dl[0]), "x-in-process-fastest")
	b.ReportMetric(us(dw[len(dw)/2])/us(dl[len(dl)/2]), "x-in-process")
	b.ReportMetric(0, "ns/op") // the sum of both rounds: meaningless
}

// BenchmarkCall: one topology call of a batch of 1 and of 1024 service
// ports of 10 endpoints, in a worker against in this process.
func BenchmarkCall(b *testing.B) {
	wasm := builtin(b, modules.Build, abi.StageTopology)
	limits := runtime.Limits{Instances: 1}
	local, m := inProcess(b, "m", wasm, limits), load(b, "m", wasm, limits)
	for _, n := range []int{1, 1024} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			node, sps := referencetest.Batch(1, n, 10)
			in, err := new(abi.Encoder).Encode(nil, &abi.Batch{Stage: abi.StageTopology, Node: node, Ports: sps})
			if err != nil {
				b.Fatal(err)
			}
			var outL, outW []byte
			call := func(m pipeline.Module, out *[]byte) func() {
				return func() {
					var err error
					if *out, err = m.Call(context.Background(), abi.StageTopology, in, (*out)[:0]); err != nil {
						b.Fatal(err)
					}
				}
			}
			alternate(b, call(local, &outL), call(m, &outW))
			b.ReportMetric(float64(len(in))/1024, "input-KiB")
		})
	}
}

// BenchmarkFullRecompute: 1,000 and 10,000 service ports of 10
// endpoints through the three default stages (as host/pipeline's
// BenchmarkFullRecompute), every stage's module in a worker against in
// this process, and the workers' memory after, each worker's on average:
// resident (VmRSS, VmHWM) and proportional (Pss: the pages it shares
// with wasp, the executable's among them, counted in part).
func BenchmarkFullRecompute(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) { benchRecompute(b, n) })
	}
}

func benchRecompute(b *testing.B, n int) {
	node, sps := referencetest.Batch(1, n, 10)
	ps := make([]pipeline.Port, len(sps))
	for i, sp := range sps {
		ps[i] = pipeline.Port{Key: fmt.Sprint(i), ServicePort: sp}
	}
	var localOpts, workerOpts pipeline.Options
	var workers []*Module
	for _, stage := range abi.Stages {
		wasm := builtin(b, modules.Build, stage)
		name := "builtin:" + modules.Default(stage).Name
		w := load(b, name, wasm, runtime.Limits{})
		localOpts.Modules[stage], workerOpts.Modules[stage] = inProcess(b, name, wasm, runtime.Limits{}), w
		workers = append(workers, w)
	}
	local, worker := pipeline.New(localOpts), pipeline.New(workerOpts)
	run := func(p *pipeline.Pipeline) func() {
		return func() {
			for _, r := range p.Run(context.Background(), node, ps) {
				if r.Source != pipeline.SourceModules {
					b.Fatalf("%s: %v", r.Source, r.Err)
				}
			}
		}
	}
	alternate(b, run(local), run(worker))
	var rss, peak, pss uint64
	for _, w := range workers {
		st := w.Stats()
		rss, peak, pss = rss+st.ResidentBytes, peak+st.PeakResidentBytes, pss+proportional(st.PID)
	}
	mib := func(v uint64) float64 { return float64(v) / (1 << 20) / float64(len(workers)) }
	b.ReportMetric(mib(rss), "worker-rss-MiB")
	b.ReportMetric(mib(peak), "worker-peak-rss-MiB")
	b.ReportMetric(mib(pss), "worker-pss-MiB")
	// After the pipeline's Release, as after a full sync.
	worker.Release(context.Background())
	rss, pss = 0, 0
	for _, w := range workers {
		st := w.Stats()
		rss, pss = rss+st.ResidentBytes, pss+proportional(st.PID)
	}
	b.ReportMetric(mib(rss), "worker-rss-released-MiB")
	b.ReportMetric(mib(pss), "worker-pss-released-MiB")
}

// proportional is the Pss of process pid, 0 if it cannot be read.
func proportional(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
