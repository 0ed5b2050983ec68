package nodesetup

import (
	"context"
	"errors"
	"io/fs"

	"github.com/wasp-proxy/wasp/backends"
)

// Outcome is a probe's verdict.
type Outcome = backends.ProbeOutcome

const (
	// Supported: the kernel did what wasp will ask of it.
	Supported = backends.ProbeSupported
	// NotSupported: the kernel refused; Reason says how.
	NotSupported = backends.ProbeNotSupported
	// Inconclusive: the probe could not ask (no permission, an
	// interrupted call, a probe it depends on failed); Reason says why.
	Inconclusive = backends.ProbeInconclusive
)

// ProbeResult is the verdict of one kernel probe.
type ProbeResult = backends.ProbeResult

// ErrNotSupported is wrapped by Run's error for every probe whose outcome
// is NotSupported: wasp's dataplane needs each of them.
var ErrNotSupported = errors.New("not supported by this kernel")

// The probes of every mode, by name. The dataplane's own belong to its
// backend.
const (
	probeConntrackNL  = "conntrack-netlink"
	probeConntrackMod = "nf_conntrack"
)

// A probe asks the kernel one question. It changes nothing that outlives
// it.
type probe = backends.Probe

// moduleProbe reports whether nf_conntrack is loaded, from the presence of
// its per-namespace sysctls.
func moduleProbe(f files) probe {
	return probe{
		Name:   probeConntrackMod,
		Checks: "the nf_conntrack module is loaded (" + settingConntrackMax.name + " exists)",
		Run: func(context.Context) (Outcome, string) {
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
