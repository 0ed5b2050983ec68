package nodesetup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// Outcome is a probe's verdict.
type Outcome string

const (
	// Supported: the kernel did what wasp will ask of it.
	Supported Outcome = "supported"
	// NotSupported: the kernel refused; Reason says how.
	NotSupported Outcome = "not supported"
	// Inconclusive: the probe could not ask (no permission, an
	// interrupted call, a probe it depends on failed); Reason says why.
	Inconclusive Outcome = "inconclusive"
)

// ProbeResult is the verdict of one kernel probe.
type ProbeResult struct {
	Name    string  `json:"name"`             // e.g. nftables-numgen
	Checks  string  `json:"checks"`           // what the probe asks of the kernel
	Outcome Outcome `json:"outcome"`          //
	Reason  string  `json:"reason,omitempty"` // "" when supported
}

// ErrNotSupported is wrapped by Run's error for every probe whose outcome
// is NotSupported: wasp's dataplane needs each of them.
var ErrNotSupported = errors.New("not supported by this kernel")

// The probes, by name.
const (
	probeNFTables       = "nftables"
	probeNFTNAT         = "nftables-nat"
	probeNFTNumgen      = "nftables-numgen"
	probeNFTConcatMaps  = "nftables-concat-maps"
	probeNFTStaleChains = "nftables-delete-referenced-chain"
	probeConntrackNL    = "conntrack-netlink"
	probeConntrackMod   = "nf_conntrack"
)

// A probe asks the kernel one question. It changes nothing that outlives
// it.
type probe struct {
	name   string
	checks string
	// after names the probe that must be Supported for this one to be
	// asked; "" for none.
	after string
	run   func(ctx context.Context) (Outcome, string)
}

// runProbes runs ps in order. A probe whose prerequisite is not
// Supported is Inconclusive without being asked.
func runProbes(ctx context.Context, ps []probe) []ProbeResult {
	out := make([]ProbeResult, 0, len(ps))
	done := map[string]Outcome{}
	for _, p := range ps {
		r := ProbeResult{Name: p.name, Checks: p.checks}
		switch dep, ok := done[p.after]; {
		case p.after != "" && !ok:
			r.Outcome, r.Reason = Inconclusive, fmt.Sprintf("not asked: %s was not probed", p.after)
		case p.after != "" && dep != Supported:
			r.Outcome, r.Reason = Inconclusive, fmt.Sprintf("not asked: %s is %s", p.after, dep)
		case ctx.Err() != nil:
			r.Outcome, r.Reason = Inconclusive, ctx.Err().Error()
		default:
			r.Outcome, r.Reason = p.run(ctx)
		}
		done[p.name] = r.Outcome
		out = append(out, r)
	}
	return out
}

// moduleProbe reports whether nf_conntrack is loaded, from the presence of
// its per-namespace sysctls.
func moduleProbe(f files) probe {
	return probe{
		name:   probeConntrackMod,
		checks: "the nf_conntrack module is loaded (" + settingConntrackMax.name + " exists)",
		run: func(context.Context) (Outcome, string) {
			_, err := f.read(settingConntrackMax.path)
			switch {
			case err == nil:
				return Supported, ""
			case errors.Is(err, fs.ErrNotExist):
				return NotSupported, "nf_conntrack is not loaded: " + err.Error()
			default:
				return Inconclusive, err.Error()
			}
		},
	}
}

// classify turns the error of a kernel request into an outcome: the
// kernel refusing is NotSupported, not being able to ask is Inconclusive.
func classify(err error) (Outcome, string) {
	if err == nil {
		return Supported, ""
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return Inconclusive, err.Error()
	}
	switch errno {
	case syscall.EPERM, syscall.EACCES:
		return Inconclusive, err.Error() + " (needs CAP_NET_ADMIN)"
	case syscall.ENOBUFS, syscall.ENOMEM, syscall.EINTR, syscall.EAGAIN, syscall.ETIMEDOUT:
		return Inconclusive, err.Error()
	}
	return NotSupported, err.Error()
}
