//go:build !linux

package nodesetup

import "context"

// kernelProbes returns the probes of the Linux build, each NotSupported:
// nftables and conntrack are Linux facilities.
func kernelProbes(string) []probe {
	var out []probe
	for _, name := range []string{probeNFTables, probeNFTNAT, probeNFTNumgen, probeNFTConcatMaps, probeNFTStaleChains, probeConntrackNL} {
		out = append(out, probe{name: name, checks: name, run: func(context.Context) (Outcome, string) {
			return NotSupported, "needs Linux"
		}})
	}
	return out
}
