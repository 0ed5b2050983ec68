// Package pipeline runs the per-service-port stages — topology,
// traffic-policy, endpoint-selection — over a set of service ports and
// returns each port's final decision.
//
// Each stage is one call per batch into its module (a Wasm module from
// host/runtime, or the native reference implementation), not one call per
// service: a full recompute is split across the module's instance pool and
// the chunks run in parallel; an incremental change is one short call.
//
// Failures are contained to the service ports they concern. A port the
// module declines, or whose record is invalid or breaks a host-enforced
// invariant (Guardrails), fails alone. A call that fails as a whole (trap,
// timeout, memory cap, malformed output) is retried port by port (in 16
// parts when large), on fresh instances in parallel, until the ports that
// cause it are isolated, within a budget of failed-call time; the others
// get their results, and those the budget left unresolved are not blamed
// (ErrNotIsolated) and are called alone next time. A port that failed
// alone is quarantined for the stage: it is never again in a call with
// other ports, and while its input and module are unchanged it is not
// called again until its retry (Options.QuarantineRetry, doubling) but
// gets its failure again (ErrQuarantined). A failed port gets what the
// stage's failure policy says: under KeepLastGood it keeps its last good
// decision, carried over to its current endpoints (those that left or
// stopped serving dropped), or, if it never had one or nothing of it is
// left, gets the native reference decision; under Builtin it gets the
// native reference decision. Either way a broken module never blackholes
// a Service.
package pipeline
