package wasp

import (
	"slices"

	"github.com/wasp-proxy/wasp/abi"
)

// Set is an index set a stage writes. The zero Set is nil (not used); Use or
// Add makes it used.
type Set struct {
	idx  []uint32
	used bool
}

// Use marks the set as used, so that it is written as empty rather than nil
// when nothing is added.
func (s *Set) Use() { s.used = true }

// Add adds endpoint index i and marks the set used.
func (s *Set) Add(i int) {
	s.used = true
	s.idx = append(s.idx, uint32(i))
}

// Len returns the number of indices added (duplicates included).
func (s *Set) Len() int { return len(s.idx) }

// Indices returns the indices added so far, in the order added. The slice
// is valid until the next Add.
func (s *Set) Indices() []uint32 { return s.idx }

// IsNil reports whether the set is unused.
func (s *Set) IsNil() bool { return !s.used }

func (s *Set) reset() { s.idx, s.used = s.idx[:0], false }

// indices returns the set sorted and without duplicates, nil if unused.
func (s *Set) indices() abi.Indices {
	if !s.used {
		return nil
	}
	for k := 1; k < len(s.idx); k++ {
		if s.idx[k] <= s.idx[k-1] {
			slices.Sort(s.idx)
			s.idx = slices.Compact(s.idx)
			break
		}
	}
	if s.idx == nil {
		s.idx = make([]uint32, 0, 8)
	}
	return s.idx
}

// TopologyResult is the topology stage's output for one service port.
type TopologyResult struct {
	// Mode is the topology mode in effect (informational for later stages).
	Mode abi.TopologyMode
	// Eligible are the endpoints available for cluster traffic on this node.
	Eligible Set
}

// Add marks endpoint i eligible.
func (r *TopologyResult) Add(i int) { r.Eligible.Add(i) }

// PolicyResult is the traffic-policy stage's output for one service port.
type PolicyResult struct {
	Cluster, Local, All Set
	HasAnyEndpoints     bool
}

// SelectionResult is the endpoint-selection stage's output: a weight for
// each chosen endpoint, in [1, abi.MaxWeight].
type SelectionResult struct {
	weights []abi.Weight
}

// Set gives endpoint i the weight w. Setting the same endpoint again
// replaces its weight.
func (r *SelectionResult) Set(i int, w uint32) {
	r.weights = append(r.weights, abi.Weight{Index: uint32(i), Weight: w})
}

// sorted returns the weights by ascending index, the last one set winning
// for an index set more than once.
func (r *SelectionResult) sorted() []abi.Weight {
	w := r.weights
	for k := 1; k < len(w); k++ {
		if w[k].Index <= w[k-1].Index {
			slices.SortStableFunc(w, byIndex)
			break
		}
	}
	out := w[:0]
	for k := range w {
		if k+1 < len(w) && w[k+1].Index == w[k].Index {
			continue
		}
		out = append(out, w[k])
	}
	r.weights = out
	return out
}

func byIndex(a, b abi.Weight) int { return int(a.Index) - int(b.Index) }

// TopologyFunc implements the topology stage for one service port.
type TopologyFunc func(node Node, sp ServicePort, out *TopologyResult) error

// TrafficPolicyFunc implements the traffic-policy stage for one service port.
type TrafficPolicyFunc func(node Node, sp ServicePort, out *PolicyResult) error

// EndpointSelectionFunc implements the endpoint-selection stage for one
// service port.
type EndpointSelectionFunc func(node Node, sp ServicePort, out *SelectionResult) error

var handlers struct {
	topology  TopologyFunc
	policy    TrafficPolicyFunc
	selection EndpointSelectionFunc
}

// HandleTopology registers the module's topology stage.
func HandleTopology(fn TopologyFunc) { handlers.topology = fn }

// HandleTrafficPolicy registers the module's traffic-policy stage.
func HandleTrafficPolicy(fn TrafficPolicyFunc) { handlers.policy = fn }

// HandleEndpointSelection registers the module's endpoint-selection stage.
func HandleEndpointSelection(fn EndpointSelectionFunc) { handlers.selection = fn }

// Reusable state: a module instance runs one call at a time.
var (
	in     batch
	writer abi.OutputWriter
	topo   TopologyResult
	policy PolicyResult
	sel    SelectionResult
)

// Run runs the registered handler of stage over an encoded input batch and
// returns the encoded output, or nil when the batch is malformed or the
// stage has no handler. The output is valid until the next call. The
// exported Wasm functions call Run; package wasptest calls it natively.
func Run(stage abi.Stage, input []byte) []byte {
	if in.parse(input) != nil || in.stage != stage {
		return nil
	}
	switch stage {
	case abi.StageTopology:
		if handlers.topology == nil {
			return nil
		}
	case abi.StageTrafficPolicy:
		if handlers.policy == nil {
			return nil
		}
	case abi.StageEndpointSelection:
		if handlers.selection == nil {
			return nil
		}
	default:
		return nil
	}
	writer.Reset(stage)
	node := Node{x: &in}
	// A panic fails only the port at hand: runFrom recovers, writes that
	// port's error record and says where to resume. One deferred recover
	// per batch rather than per port keeps the per-port cost down.
	for next := 0; next < int(in.portCount); {
		next = runFrom(stage, node, next)
	}
	return writer.Bytes()
}

// runFrom runs the handler for ports from, from+1, ... and returns the
// port count, or, after a panic, the index of the port after the one that
// panicked.
func runFrom(stage abi.Stage, node Node, from int) (next int) {
	i := from
	defer func() {
		if r := recover(); r != nil {
			writer.Error(panicMessage(r))
			next = i + 1
		}
	}()
	for ; i < int(in.portCount); i++ {
		o := in.ports + i*abi.PortSize
		sp := ServicePort{
			x: &in, o: o, i: i,
			first: int(le.Uint32(in.b[o+portEndpointFirst:])),
			n:     int(le.Uint32(in.b[o+portEndpointCount:])),
		}
		if err := runPort(stage, node, sp); err != nil {
			writer.Error(err.Error())
		}
	}
	return i
}

// runPort runs the handler for one port and writes its record unless the
// handler fails.
func runPort(stage abi.Stage, node Node, sp ServicePort) error {
	switch stage {
	case abi.StageTopology:
		topo.Mode = abi.TopologyNone
		topo.Eligible.reset()
		topo.Eligible.Use()
		if err := handlers.topology(node, sp, &topo); err != nil {
			return err
		}
		writer.Topology(topo.Mode, topo.Eligible.indices())
	case abi.StageTrafficPolicy:
		policy.Cluster.reset()
		policy.Local.reset()
		policy.All.reset()
		policy.HasAnyEndpoints = false
		if err := handlers.policy(node, sp, &policy); err != nil {
			return err
		}
		writer.TrafficPolicy(policy.HasAnyEndpoints, policy.Cluster.indices(), policy.Local.indices(), policy.All.indices())
	case abi.StageEndpointSelection:
		sel.weights = sel.weights[:0]
		if err := handlers.selection(node, sp, &sel); err != nil {
			return err
		}
		writer.Selection(sel.sorted())
	}
	return nil
}

func panicMessage(r any) string {
	switch v := r.(type) {
	case string:
		return "panic: " + v
	case error:
		return "panic: " + v.Error()
	}
	return "panic"
}
