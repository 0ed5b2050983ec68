//go:build !linux

package nftables

import (
	"context"

	"github.com/wasp-proxy/wasp/backends"
)

// Probes returns the nftables probes of the Linux build, each
// NotSupported: nftables is a Linux facility.
func Probes(ctx context.Context, _ string) []backends.ProbeResult {
	var ps []backends.Probe
	for _, name := range []string{nftProbeTables, nftProbeNAT, nftProbeNumgen, nftProbeConcatMaps, nftProbeStaleChains} {
		ps = append(ps, backends.Probe{Name: name, Checks: name, Run: func(context.Context) (backends.ProbeOutcome, string) {
			return backends.ProbeNotSupported, "needs Linux"
		}})
	}
	return backends.RunProbes(ctx, ps)
}
