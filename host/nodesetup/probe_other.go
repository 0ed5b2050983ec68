//go:build !linux

package nodesetup

import "context"

// nftablesProbes returns the nftables probes of the Linux build, each
// NotSupported: nftables is a Linux facility.
func nftablesProbes(string) []probe {
	return notSupported(probeNFTables, probeNFTNAT, probeNFTNumgen, probeNFTConcatMaps, probeNFTStaleChains)
}

// conntrackProbes returns the conntrack probe of the Linux build,
// NotSupported.
func conntrackProbes(string) []probe { return notSupported(probeConntrackNL) }

func notSupported(names ...string) []probe {
	var out []probe
	for _, name := range names {
		out = append(out, probe{name: name, checks: name, run: func(context.Context) (Outcome, string) {
			return NotSupported, "needs Linux"
		}})
	}
	return out
}
