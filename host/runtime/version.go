package runtime

import (
	"strconv"
	"strings"
)

// HostVersion is the wasp version modules are checked against: a module
// whose metadata names a newer minHostVersion is refused.
const HostVersion = "0.1.0"

// versionAtLeast reports whether semantic version v is at least min,
// comparing major.minor.patch numerically and ignoring pre-release and
// build suffixes. Both were validated as semantic versions.
func versionAtLeast(v, min string) bool {
	a, b := versionParts(v), versionParts(min)
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}

func versionParts(v string) (p [3]int) {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	for i, s := range strings.SplitN(v, ".", 3) {
		p[i], _ = strconv.Atoi(s)
	}
	return p
}
