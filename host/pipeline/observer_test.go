package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// flaky is a module that fails every call with a trap while fail is set,
// and otherwise runs the default module.
type flaky struct {
	pipeline.Module
	fail bool
}

func (f *flaky) Call(ctx context.Context, stage abi.Stage, input, dst []byte) ([]byte, error) {
	if f.fail {
		return dst, &runtime.CallError{Module: "flaky", Stage: stage, Reason: runtime.ReasonTrap, Err: errors.New("unreachable")}
	}
	return f.Module.Call(ctx, stage, input, dst)
}

func (f *flaky) String() string { return "flaky" }

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu        sync.Mutex
	calls     map[string]int // "module stage ok|error"
	failed    map[string]int // "module stage source reason"
	fallbacks pipeline.Fallbacks
	reports   int
}

func (r *recorder) Call(module string, stage abi.Stage, ports int, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := "ok"
	if err != nil {
		res = "error"
	}
	r.calls[module+" "+stage.String()+" "+res]++
}

func (r *recorder) PortFailed(module string, stage abi.Stage, key string, src pipeline.Source, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed[module+" "+stage.String()+" "+src.String()+" "+string(runtime.ReasonOf(err))]++
}

func (r *recorder) Fallbacks(n *pipeline.Fallbacks) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fallbacks = *n
	r.reports++
}

// TestObserver: the Observer hears of every call, of every port that
// falls back, and keeps a count of the ports on a fallback that follows
// failures, recoveries and Forget; Observers tells each of its observers.
func TestObserver(t *testing.T) {
	_, mods := defaults(t, embedded, runtime.Config{}, runtime.Limits{})
	stage := abi.StageEndpointSelection
	mod := &flaky{Module: mods[stage]}
	rec := &recorder{calls: map[string]int{}, failed: map[string]int{}}
	var opts pipeline.Options
	opts.Modules[stage] = mod
	opts.Observer = pipeline.Observers(nil, rec)
	opts.QuarantineRetry = time.Minute
	p := pipeline.New(opts)
	clk := newClock()
	pipeline.SetClock(p, clk.now)
	node, sps := referencetest.Batch(1, 8, 3)
	pp := ports(sps)
	n := len(pp)

	steps := []struct {
		name    string
		do      func()
		fail    bool
		builtin int // ports on the builtin fallback afterwards
		good    int // ports on their last good decision afterwards
		failed  string
	}{
		{name: "first run fails", fail: true, builtin: n, failed: "flaky endpoint-selection builtin trap"},
		// Every port failed alone: in quarantine, they are called again
		// (alone) once their retry is due.
		{name: "quarantined", builtin: n, failed: "flaky endpoint-selection builtin trap"},
		{name: "recovers", do: func() { clk.add(time.Minute); p.Run(context.Background(), node, pp) }},
		{name: "fails again", fail: true, good: n, failed: "flaky endpoint-selection last-good trap"},
		{name: "forget one port", do: func() { p.Forget(pp[0].Key) }, good: n - 1},
	}
	for _, st := range steps {
		rec.failed = map[string]int{}
		reports := rec.reports
		if st.do != nil {
			st.do()
		} else {
			mod.fail = st.fail
			p.Run(context.Background(), node, pp)
		}
		if rec.reports != reports+1 {
			t.Errorf("%s: Fallbacks reported %d times, want once", st.name, rec.reports-reports)
		}
		if got := rec.fallbacks[stage][pipeline.SourceBuiltin]; got != st.builtin {
			t.Errorf("%s: %d ports on builtin, want %d", st.name, got, st.builtin)
		}
		if got := rec.fallbacks[stage][pipeline.SourceLastGood]; got != st.good {
			t.Errorf("%s: %d ports on last-good, want %d", st.name, got, st.good)
		}
		if st.failed != "" && rec.failed[st.failed] != n {
			t.Errorf("%s: PortFailed %v, want %d × %q", st.name, rec.failed, n, st.failed)
		}
		if st.failed == "" && len(rec.failed) > 0 {
			t.Errorf("%s: PortFailed %v, want none", st.name, rec.failed)
		}
	}
	// Each failing run splits its batch into single ports (n ≤ 256): n+1
	// failed calls; the quarantined run makes none, the recovery one per
	// port.
	if got, want := rec.calls["flaky endpoint-selection error"], 2*(n+1); got != want {
		t.Errorf("failed calls reported: %d, want %d (every call of two isolations)", got, want)
	}
	if got := rec.calls["flaky endpoint-selection ok"]; got != n {
		t.Errorf("successful calls reported: %d, want %d", got, n)
	}
}
