package pipeline

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/wasp-proxy/wasp/abi"
)

// Guardrails relax, for one module, the invariants the host enforces on
// every decision of the traffic-policy stage, the stage that puts
// endpoints into the cluster, local and all sets (the others cannot:
// topology only narrows what is eligible, and endpoint-selection may only
// weigh members of those sets). The zero value enforces them all:
//
//   - a set holds only serving endpoints: Serving, or Ready (which the
//     EndpointSlice API says implies serving). Upstream's fallback to
//     terminating endpoints uses those that are serving too, so no
//     upstream semantics needs a non-serving one;
//   - the local set holds only endpoints on this node (Local), which is
//     what internalTrafficPolicy and externalTrafficPolicy Local mean.
//
// A record that breaks one fails its port with ReasonInvalidOutput, naming
// the endpoint and the rule, and the port gets its stage's failure policy.
type Guardrails struct {
	// AllowNotServing lets the module put endpoints that are neither
	// serving nor ready into the sets.
	AllowNotServing bool
	// AllowRemoteInLocal lets the module put endpoints of other nodes
	// into the local set.
	AllowRemoteInLocal bool
}

// Relaxed is a Module whose guardrails are relaxed; Relax makes one.
type Relaxed interface {
	Module
	// Guardrails returns what is relaxed.
	Guardrails() Guardrails
}

// Relax returns m with the guardrails g relaxed, or m itself when g
// relaxes nothing.
func Relax(m Module, g Guardrails) Module {
	if g == (Guardrails{}) || m == nil {
		return m
	}
	return &relaxed{Module: m, g: g}
}

// relaxed is a Module with relaxed guardrails.
type relaxed struct {
	Module
	g Guardrails
}

var (
	_ Relaxed  = (*relaxed)(nil)
	_ shrinker = (*relaxed)(nil)
)

func (r *relaxed) Guardrails() Guardrails { return r.g }

// String names the module, as the module itself does.
func (r *relaxed) String() string { return nameOf(r.Module) }

// Shrink shrinks the module's instance pool, if it has one.
func (r *relaxed) Shrink(ctx context.Context) error {
	if s, ok := r.Module.(shrinker); ok {
		return s.Shrink(ctx)
	}
	return nil
}

// guardrailsOf returns the guardrails relaxed for m: none unless m is
// Relaxed.
func guardrailsOf(m Module) Guardrails {
	if r, ok := m.(Relaxed); ok {
		return r.Guardrails()
	}
	return Guardrails{}
}

// check returns the first invariant the decision d of stage, for sp,
// breaks, or nil. flags holds the abi.EndpointFlag* of sp's endpoints, in
// order: a compact copy the encoding of the batch made, read instead of
// the endpoints themselves.
func (g Guardrails) check(stage abi.Stage, sp *abi.ServicePort, d *abi.Decision, flags []byte) error {
	if stage != abi.StageTrafficPolicy {
		return nil
	}
	if err := g.checkSet("cluster", sp, d.Cluster, flags, false); err != nil {
		return err
	}
	if err := g.checkSet("local", sp, d.Local, flags, true); err != nil {
		return err
	}
	return g.checkSet("all", sp, d.All, flags, false)
}

// checkSet checks the set called name, the local set if local.
func (g Guardrails) checkSet(name string, sp *abi.ServicePort, idx abi.Indices, flags []byte, local bool) error {
	for _, i := range idx {
		f := flags[i] // DecodeOutput checked that i < len(sp.Endpoints)
		if !g.AllowNotServing && f&(abi.EndpointFlagServing|abi.EndpointFlagReady) == 0 {
			// Serving, or Ready, which implies it: serving(ep).
			return fmt.Errorf("guardrail: endpoint %d (%s) in the %s set is not serving (allow it with guardrails.allowNotServing)",
				i, endpointString(&sp.Endpoints[i]), name)
		}
		if local && !g.AllowRemoteInLocal && f&abi.EndpointFlagLocal == 0 {
			ep := &sp.Endpoints[i]
			return fmt.Errorf("guardrail: endpoint %d (%s, node %q) in the local set is not on this node (allow it with guardrails.allowRemoteInLocal)",
				i, endpointString(ep), ep.NodeName)
		}
	}
	return nil
}

// endpointString is ip:port.
func endpointString(ep *abi.Endpoint) string {
	return netip.AddrPortFrom(ep.Addr, ep.Port).String()
}
