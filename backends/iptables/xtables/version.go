package xtables

import (
	"fmt"
	"strconv"
	"strings"
)

// version is an iptables release number.
type version [3]int

func (v version) less(o version) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] < o[i]
		}
	}
	return false
}

func (v version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// parseVersion reads the output of `iptables --version`:
// "iptables v1.8.9 (nf_tables)", "ip6tables v1.8.9 (legacy)", or, before
// 1.8 and its two variants, "iptables v1.6.1" (legacy).
func parseVersion(out string) (version, Variant, error) {
	out = strings.TrimSpace(out)
	fields := strings.Fields(out)
	if len(fields) < 2 || !strings.HasPrefix(fields[1], "v") {
		return version{}, "", fmt.Errorf("unrecognised version %q", out)
	}
	var v version
	parts := strings.Split(strings.TrimPrefix(fields[1], "v"), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return version{}, "", fmt.Errorf("unrecognised version %q", out)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return version{}, "", fmt.Errorf("unrecognised version %q", out)
		}
		v[i] = n
	}
	mode := Legacy
	if len(fields) > 2 {
		switch m := strings.Trim(fields[2], "()"); m {
		case "nf_tables":
			mode = NFT
		case "legacy":
		default:
			return version{}, "", fmt.Errorf("unrecognised mode %q in version %q", m, out)
		}
	}
	return v, mode, nil
}
