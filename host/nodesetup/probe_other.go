//go:build !linux

package nodesetup

import "context"

// conntrackProbes returns the conntrack probe of the Linux build,
// NotSupported.
func conntrackProbes(string) []probe {
	return []probe{{Name: probeConntrackNL, Checks: probeConntrackNL, Run: func(context.Context) (Outcome, string) {
		return NotSupported, "needs Linux"
	}}}
}
