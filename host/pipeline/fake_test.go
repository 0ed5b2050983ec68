package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/reference"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// fake is a Module in Go that decides as the native reference does,
// except for the ports whose wasp.test/behaviour annotation says
// otherwise:
//
//	spin   the whole call blocks until its deadline (timeout, as the
//	       runtime's per-call limit) and fails with ReasonTimeout
//	trap   the whole call fails at once with ReasonTrap
//	host-panic  the call panics, as a fault of the host's own code would
//	error  the port gets an error record
//	every-endpoint  (traffic-policy) every set holds every endpoint
//
// A port named in fixed behaves, whatever its annotation. It records the
// ports (by name) of every call.
type fake struct {
	timeout   time.Duration // of a spinning call
	instances int

	mu    sync.Mutex
	calls [][]string
	fixed map[string]bool
	// instantiate fails this many of the next calls with
	// ReasonInstantiate before they look at their ports.
	instantiate int
}

var _ pipeline.Module = (*fake)(nil)

func (f *fake) String() string { return "fake" }

func (f *fake) Instances() int { return max(1, f.instances) }

func (f *fake) Call(ctx context.Context, stage abi.Stage, input, dst []byte) ([]byte, error) {
	b, err := abi.DecodeBatch(input)
	if err != nil {
		return dst, err
	}
	names := make([]string, len(b.Ports))
	for i := range b.Ports {
		names[i] = b.Ports[i].Name
	}
	f.mu.Lock()
	f.calls = append(f.calls, names)
	fixed := f.fixed
	inst := f.instantiate > 0
	if inst {
		f.instantiate--
	}
	f.mu.Unlock()
	if inst {
		return dst, &runtime.CallError{Module: "fake", Stage: stage, Reason: runtime.ReasonInstantiate, Err: errors.New("_initialize failed")}
	}
	var w abi.OutputWriter
	w.Reset(stage)
	for i := range b.Ports {
		sp := &b.Ports[i]
		behaviour := ""
		if !fixed[sp.Name] {
			for _, a := range sp.Annotations {
				if a.Key == "wasp.test/behaviour" {
					behaviour = a.Value
				}
			}
		}
		switch behaviour {
		case "spin":
			cctx, cancel := context.WithTimeout(ctx, f.timeout)
			<-cctx.Done()
			cancel()
			return dst, &runtime.CallError{Module: "fake", Stage: stage, Reason: runtime.ReasonTimeout, Err: cctx.Err()}
		case "trap":
			return dst, &runtime.CallError{Module: "fake", Stage: stage, Reason: runtime.ReasonTrap, Err: errors.New("unreachable")}
		case "host-panic":
			panic("index out of range")
		case "error":
			w.Error("declined")
			continue
		case "every-endpoint":
			// Every endpoint in every set, whatever its conditions
			// and node (traffic-policy only).
			all := make(abi.Indices, len(sp.Endpoints))
			for k := range all {
				all[k] = uint32(k)
			}
			w.TrafficPolicy(len(all) > 0, all, all, all)
			continue
		}
		var prev abi.Decision
		if len(b.Decisions) > 0 {
			prev = b.Decisions[i]
		}
		switch stage {
		case abi.StageTopology:
			d := reference.Topology(&b.Node, sp)
			w.Topology(d.Mode, d.Eligible)
		case abi.StageTrafficPolicy:
			d := reference.TrafficPolicy(&b.Node, sp, prev)
			w.TrafficPolicy(d.HasAnyEndpoints, d.Cluster, d.Local, d.All)
		default:
			w.Selection(reference.EndpointSelection(&b.Node, sp, prev).Weights)
		}
	}
	return append(dst, w.Bytes()...), nil
}

// take returns the calls made since the last take, each as its sorted
// port names.
func (f *fake) take() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	for _, c := range out {
		slices.Sort(c)
	}
	return out
}

// fix makes the named ports behave from now on.
func (f *fake) fix(names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fixed == nil {
		f.fixed = map[string]bool{}
	}
	for _, n := range names {
		f.fixed[n] = true
	}
}

// clock is a settable clock for the quarantine's retry times.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// name is the name behaving gives port i.
func name(i int) string { return fmt.Sprint("svc-", i) }
