package pipeline_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// spinners returns n ports of which every fifth spins.
func spinners(n int) ([]pipeline.Port, map[int]string) {
	bad := map[int]string{}
	for i := 0; i < n; i += 5 {
		bad[i] = "spin"
	}
	return behaving(n, 1, bad), bad
}

// mixed reports the calls that carry a port of bad together with another
// port.
func mixed(calls [][]string, bad map[int]string) [][]string {
	var out [][]string
	for _, c := range calls {
		if len(c) < 2 {
			continue
		}
		for i := range bad {
			if slices.Contains(c, name(i)) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// alone reports whether calls hold a call of port i alone.
func alone(calls [][]string, i int) bool {
	return slices.ContainsFunc(calls, func(c []string) bool { return len(c) == 1 && c[0] == name(i) })
}

// TestQuarantine: 16 spinning ports among 80. The first Run isolates them
// and gives all 64 others their modules' decision; later Runs never put a
// known-bad port in a call with another, skip a known-bad port whose input
// and module are unchanged, and call it alone again once its retry is due
// (with a backoff that doubles), when its input changed, or when its
// module did. A port the module no longer fails for leaves the quarantine.
func TestQuarantine(t *testing.T) {
	const retry = time.Minute
	node := abi.Node{Name: "node-a"}
	for _, stage := range abi.Stages {
		t.Run(stage.String(), func(t *testing.T) {
			f := &fake{timeout: 5 * time.Millisecond, instances: 2}
			clk := newClock()
			var opts pipeline.Options
			opts.Modules[stage] = f
			opts.QuarantineRetry = retry
			p := pipeline.New(opts)
			pipeline.SetClock(p, clk.now)
			in, bad := spinners(80)

			run := func(round string, wantSkipped bool) [][]string {
				t.Helper()
				for i, r := range p.Run(context.Background(), node, in) {
					_, isBad := bad[i]
					switch {
					case !isBad && r.Source != pipeline.SourceModules:
						t.Errorf("%s: good port %d: source %s: %v", round, i, r.Source, r.Err)
					case isBad && (r.Source != pipeline.SourceBuiltin || runtime.ReasonOf(r.Err) != runtime.ReasonTimeout):
						t.Errorf("%s: spinning port %d: source %s, err %v; want builtin with the timeout", round, i, r.Source, r.Err)
					case isBad && errors.Is(r.Err, pipeline.ErrQuarantined) != wantSkipped:
						t.Errorf("%s: spinning port %d: err %v, want quarantined (not called): %t", round, i, r.Err, wantSkipped)
					}
				}
				calls := f.take()
				if m := mixed(calls, bad); len(m) > 0 && round != "first" {
					t.Errorf("%s: %d calls mix a known-bad port with others, e.g. %v", round, len(m), m[0])
				}
				return calls
			}
			// expect checks that calls are one call of every good port
			// but those of alones, and one call of each of alones.
			expect := func(round string, calls [][]string, alones ...int) {
				t.Helper()
				var batch []string
				for i := range in {
					if _, isBad := bad[i]; !isBad && !slices.Contains(alones, i) {
						batch = append(batch, name(i))
					}
				}
				slices.Sort(batch)
				want := [][]string{batch}
				for _, i := range alones {
					want = append(want, []string{name(i)})
				}
				got := slices.Clone(calls)
				slices.SortFunc(got, func(a, b []string) int { return len(b) - len(a) })
				slices.SortFunc(want, func(a, b []string) int { return len(b) - len(a) })
				if len(got) != len(want) || !slices.EqualFunc(got[:1], want[:1], slices.Equal) {
					t.Errorf("%s: %d calls, want %d: one of the %d good ports, and %v alone", round, len(got), len(want), len(batch), alones)
					return
				}
				for _, i := range alones {
					if !alone(calls, i) {
						t.Errorf("%s: no call of port %d alone", round, i)
					}
				}
			}
			badPorts := func() []int {
				var out []int
				for i := range bad {
					if !f.fixed[name(i)] {
						out = append(out, i)
					}
				}
				return out
			}

			calls := run("first", false)
			for i := range bad {
				if !alone(calls, i) {
					t.Errorf("first: spinning port %d never called alone", i)
				}
			}
			expect("second", run("second", true))
			clk.add(retry)
			expect("retry due", run("retry due", false), badPorts()...)
			clk.add(retry) // the backoff doubled: not due yet
			expect("backoff doubled", run("backoff doubled", true))
			clk.add(retry)
			f.fix(name(0))
			delete(bad, 0)
			expect("fixed", run("fixed", false), 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 0)
			expect("fixed port batched", run("fixed port batched", true))

			// A new input is tried at once, alone.
			in[5].Endpoints[0].Addr = netip.MustParseAddr("10.9.9.9")
			res := p.Run(context.Background(), node, in)
			calls = f.take()
			expect("input changed", calls, 5)
			if errors.Is(res[5].Err, pipeline.ErrQuarantined) {
				t.Errorf("input changed: port 5 not called: %v", res[5].Err)
			}

			// A new module is tried at once, each known-bad port alone.
			var mods [len(abi.Stages) + 1]pipeline.Module
			mods[stage] = f2(f)
			p.SetModules(mods, opts.Policies)
			run("module swapped", false)
		})
	}
}

// f2 is another module of the same behaviour.
func f2(f *fake) *fake {
	return &fake{timeout: f.timeout, instances: f.instances, fixed: f.fixed}
}

// TestBisectBudgetSpent: when the bisect budget runs out before the
// failing ports are isolated, the ports not isolated are not blamed: they
// get the failure policy's fallback with ErrNotIsolated, are not
// quarantined, and are evaluated alone next time, so that every good
// port gets its modules' decision after a few Runs, even with a budget
// that allows a single failing call per Run (a machine so loaded that
// every call takes the budget).
func TestBisectBudgetSpent(t *testing.T) {
	node := abi.Node{Name: "node-a"}
	f := &fake{timeout: time.Millisecond, instances: 2}
	var opts pipeline.Options
	opts.Modules[abi.StageEndpointSelection] = f
	opts.BisectBudget = time.Nanosecond
	opts.QuarantineRetry = time.Minute
	p := pipeline.New(opts)
	clk := newClock()
	pipeline.SetClock(p, clk.now)
	in, bad := spinners(80)
	known := map[int]bool{} // isolated: failed alone
	for round := 1; ; round++ {
		if round > 40 {
			t.Fatalf("good ports still without their modules' decision after %d Runs", round-1)
		}
		res := p.Run(context.Background(), node, in)
		for _, c := range f.take() {
			if len(c) < 2 {
				continue
			}
			for i := range known {
				if slices.Contains(c, name(i)) {
					t.Fatalf("round %d: known-bad port %d called with %d others", round, i, len(c)-1)
				}
			}
		}
		pending := 0
		for i, r := range res {
			_, isBad := bad[i]
			switch {
			case r.Source == pipeline.SourceModules && isBad:
				t.Fatalf("round %d: spinning port %d got a decision", round, i)
			case r.Source == pipeline.SourceModules:
			case errors.Is(r.Err, pipeline.ErrNotIsolated):
				pending++
			case !isBad:
				t.Fatalf("round %d: good port %d blamed: %v", round, i, r.Err)
			default:
				known[i] = true
			}
		}
		t.Logf("round %d: %d isolated, %d not isolated", round, len(known), pending)
		if pending == 0 {
			if len(known) != len(bad) {
				t.Fatalf("round %d: %d spinning ports isolated, want %d", round, len(known), len(bad))
			}
			break
		}
	}
	// Their retries are due, but the budget allows one failed call: the
	// others wait for a later evaluation, still quarantined.
	clk.add(time.Minute)
	waiting := 0
	for i, r := range p.Run(context.Background(), node, in) {
		_, isBad := bad[i]
		switch {
		case !isBad && r.Source != pipeline.SourceModules:
			t.Errorf("retries: good port %d: %s: %v", i, r.Source, r.Err)
		case isBad && errors.Is(r.Err, pipeline.ErrQuarantined):
			waiting++
		}
	}
	if alone := len(f.take()) - 1; waiting == 0 || alone+waiting != len(bad) || alone > f.Instances() {
		t.Errorf("retries: %d bad ports called alone, %d waiting; want at most one per instance called, the other %d waiting", alone, waiting, len(bad))
	}
}

// TestInstantiateRetried: a call whose instance could not start did not
// run the ports; it is tried again, and no port is blamed.
func TestInstantiateRetried(t *testing.T) {
	node := abi.Node{Name: "node-a"}
	f := &fake{instances: 2, instantiate: 1}
	var opts pipeline.Options
	opts.Modules[abi.StageEndpointSelection] = f
	p := pipeline.New(opts)
	for i, r := range p.Run(context.Background(), node, behaving(10, 1, nil)) {
		if r.Source != pipeline.SourceModules {
			t.Errorf("port %d: %s: %v", i, r.Source, r.Err)
		}
	}
	if calls := f.take(); len(calls) != 2 || len(calls[1]) != 10 {
		t.Errorf("calls %v, want the batch twice", calls)
	}
	f.instantiate = 2
	for i, r := range p.Run(context.Background(), node, behaving(10, 1, nil)) {
		if r.Source != pipeline.SourceLastGood || runtime.ReasonOf(r.Err) != runtime.ReasonInstantiate {
			t.Errorf("port %d: %s: %v, want its last good decision, for the failed instantiation", i, r.Source, r.Err)
		}
	}
	if calls := f.take(); len(calls) != 2 {
		t.Errorf("%d calls, want the batch twice and no bisection: %v", len(calls), calls)
	}
}
