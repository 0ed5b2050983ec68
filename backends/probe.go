package backends

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// ProbeOutcome is a kernel probe's verdict. Each mode's backend owns the
// probes of what it asks of the kernel; the node setup (host/nodesetup)
// runs the chosen mode's and reports them.
type ProbeOutcome string

const (
	// ProbeSupported: the kernel did what wasp will ask of it.
	ProbeSupported ProbeOutcome = "supported"
	// ProbeNotSupported: the kernel refused; the Reason says how.
	ProbeNotSupported ProbeOutcome = "not supported"
	// ProbeInconclusive: the probe could not ask (no permission, an
	// interrupted call, a probe it depends on failed); the Reason says
	// why.
	ProbeInconclusive ProbeOutcome = "inconclusive"
)

// ProbeResult is the verdict of one kernel probe.
type ProbeResult struct {
	Name    string       `json:"name"`             // e.g. nftables-numgen
	Checks  string       `json:"checks"`           // what the probe asks of the kernel
	Outcome ProbeOutcome `json:"outcome"`          //
	Reason  string       `json:"reason,omitempty"` // "" when supported
}

// A Probe asks the kernel one question. It changes nothing that outlives
// it.
type Probe struct {
	Name   string
	Checks string
	// After names the probe that must be ProbeSupported for this one to
	// be asked; "" for none.
	After string
	Run   func(ctx context.Context) (ProbeOutcome, string)
}

// RunProbes runs ps in order. A probe whose prerequisite is not
// ProbeSupported, or whose turn comes after ctx is done, is
// ProbeInconclusive without being asked.
func RunProbes(ctx context.Context, ps []Probe) []ProbeResult {
	out := make([]ProbeResult, 0, len(ps))
	done := map[string]ProbeOutcome{}
	for _, p := range ps {
		r := ProbeResult{Name: p.Name, Checks: p.Checks}
		switch dep, ok := done[p.After]; {
		case p.After != "" && !ok:
			r.Outcome, r.Reason = ProbeInconclusive, fmt.Sprintf("not asked: %s was not probed", p.After)
		case p.After != "" && dep != ProbeSupported:
			r.Outcome, r.Reason = ProbeInconclusive, fmt.Sprintf("not asked: %s is %s", p.After, dep)
		case ctx.Err() != nil:
			r.Outcome, r.Reason = ProbeInconclusive, ctx.Err().Error()
		default:
			r.Outcome, r.Reason = p.Run(ctx)
		}
		done[p.Name] = r.Outcome
		out = append(out, r)
	}
	return out
}

// ProbeOutcomeOf turns the error of a kernel request into an outcome and
// its reason: the kernel refusing is ProbeNotSupported, not being able to
// ask (no permission, a transient errno, an error that is no errno) is
// ProbeInconclusive.
func ProbeOutcomeOf(err error) (ProbeOutcome, string) {
	if err == nil {
		return ProbeSupported, ""
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return ProbeInconclusive, err.Error()
	}
	switch errno {
	case syscall.EPERM, syscall.EACCES:
		return ProbeInconclusive, err.Error() + " (needs CAP_NET_ADMIN)"
	case syscall.ENOBUFS, syscall.ENOMEM, syscall.EINTR, syscall.EAGAIN, syscall.ETIMEDOUT:
		return ProbeInconclusive, err.Error()
	}
	return ProbeNotSupported, err.Error()
}
