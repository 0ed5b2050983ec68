package wasmbin

import (
	"context"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/reference"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
	"github.com/wasp-proxy/wasp/modules/builds"
)

// stageCall runs one stage of a default module on an encoded batch.
type stageCall struct {
	buffer, stage api.Function
	mem           api.Memory
	stack         []uint64
}

func newStageCall(tb testing.TB, rt wazero.Runtime, wasm []byte, stage abi.Stage) *stageCall {
	tb.Helper()
	mod := instantiate(tb, context.Background(), rt, wasm)
	return &stageCall{
		buffer: mod.ExportedFunction(abi.BufferExport),
		stage:  mod.ExportedFunction(stage.Export()),
		mem:    mod.Memory(),
		stack:  make([]uint64, 2),
	}
}

func (c *stageCall) run(tb testing.TB, input []byte) {
	ctx := context.Background()
	c.stack[0] = uint64(len(input))
	if err := c.buffer.CallWithStack(ctx, c.stack); err != nil {
		tb.Fatal(err)
	}
	ptr := uint32(c.stack[0])
	if !c.mem.Write(ptr, input) {
		tb.Fatal("input does not fit")
	}
	c.stack[0], c.stack[1] = uint64(ptr), uint64(len(input))
	if err := c.stage.CallWithStack(ctx, c.stack); err != nil {
		tb.Fatal(err)
	}
	if uint32(c.stack[0]) == 0 {
		tb.Fatal("no output")
	}
}

// stageInputs encodes, for each stage, a realistic batch of 5,000
// service ports of 10 endpoints (the share of one instance in a 10k full
// recompute), each stage with the decisions of the stages before it, and
// reads the stage's default module in build b.
func stageInputs(tb testing.TB, b builds.Build) map[abi.Stage][2][]byte {
	tb.Helper()
	node, sps := referencetest.Batch(1, 5000, 10)
	decisions := make([]abi.Decision, len(sps))
	modules := map[abi.Stage]string{
		abi.StageTopology:          "topology",
		abi.StageTrafficPolicy:     "trafficpolicy",
		abi.StageEndpointSelection: "selection",
	}
	out := map[abi.Stage][2][]byte{}
	for _, stage := range abi.Stages {
		batch := abi.Batch{Stage: stage, Node: node, Ports: sps, Decisions: decisions}
		var enc abi.Encoder
		input, err := enc.Encode(nil, &batch)
		if err != nil {
			tb.Fatal(err)
		}
		wasm, err := builds.Wasm(b, modules[stage])
		if err != nil {
			tb.Fatal(err)
		}
		out[stage] = [2][]byte{wasm, input}
		for i := range sps {
			switch stage {
			case abi.StageTopology:
				decisions[i] = reference.Topology(&node, &sps[i])
			case abi.StageTrafficPolicy:
				decisions[i] = reference.TrafficPolicy(&node, &sps[i], decisions[i])
			}
		}
	}
	return out
}

// TestCallChecksAreRare counts the checks the default modules run over a
// realistic batch: bounding loop-free code may add few to those before
// backward branches, which every loop iteration runs anyway. (Measured:
// 1 %, 2.6 % and 7 % more for the three stages, mostly around calls
// inside the Go runtime's recursive allocator and collector.)
func TestCallChecksAreRare(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the default modules over 5,000 service ports")
	}
	for _, b := range builds.All {
		t.Run(string(b), func(t *testing.T) { testCallChecksAreRare(t, b) })
	}
}

func testCallChecksAreRare(t *testing.T, b builds.Build) {
	inputs := stageInputs(t, b)
	for _, stage := range abi.Stages {
		t.Run(stage.String(), func(t *testing.T) {
			wasm, input := inputs[stage][0], inputs[stage][1]
			var checks [2]int64
			for i, o := range []options{{loopsOnly: true}, {}} {
				rt, y := newRuntime(t, context.Background(), wazero.NewRuntimeConfig())
				out, err := instrument(wasm, o)
				if err != nil {
					t.Fatal(err)
				}
				c := newStageCall(t, rt, out, stage)
				c.run(t, input)
				y.interval = 0 // every check yields: yields count checks
				y.yields.Store(0)
				c.run(t, input)
				checks[i] = y.yields.Load()
			}
			t.Logf("checks per call: %d before backward branches only, %d in all", checks[0], checks[1])
			if checks[1] > checks[0]+checks[0]/10 {
				t.Errorf("%d checks per call, against %d before backward branches only: more than 10%% added", checks[1], checks[0])
			}
		})
	}
}

// BenchmarkCallChecks measures what bounding loop-free code costs the
// default modules: each stage over stageInputs, instrumented as wasp does and with checks before backward branches
// only, in alternating rounds of the same run. x-loops-only is the ratio
// of the fastest rounds.
func BenchmarkCallChecks(b *testing.B) {
	for _, build := range builds.All {
		b.Run(string(build), func(b *testing.B) { benchCallChecks(b, build) })
	}
}

func benchCallChecks(b *testing.B, build builds.Build) {
	inputs := stageInputs(b, build)
	for _, stage := range abi.Stages {
		wasm, input := inputs[stage][0], inputs[stage][1]
		b.Run(stage.String(), func(b *testing.B) {
			rt, y := newRuntime(b, context.Background(), wazero.NewRuntimeConfig())
			// The checks themselves, not the yields: how often a guest
			// yields is the host's choice (package runtime adapts it to
			// the time between yields).
			y.interval = 1 << 30
			full, err := Instrument(wasm)
			if err != nil {
				b.Fatal(err)
			}
			loops, err := instrument(wasm, options{loopsOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			calls, base := newStageCall(b, rt, full, stage), newStageCall(b, rt, loops, stage)
			calls.run(b, input) // warm up
			base.run(b, input)
			fastest, fastestBase := time.Duration(1<<62), time.Duration(1<<62)
			for b.Loop() {
				start := time.Now()
				calls.run(b, input)
				mid := time.Now()
				base.run(b, input)
				fastest, fastestBase = min(fastest, mid.Sub(start)), min(fastestBase, time.Since(mid))
			}
			b.ReportMetric(float64(fastest.Nanoseconds())/float64(fastestBase.Nanoseconds()), "x-loops-only")
			b.ReportMetric(float64(fastest.Microseconds())/1e3, "fastest-ms")
		})
	}
}
