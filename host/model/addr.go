package model

import (
	"net/netip"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// parseIP parses an IP address the way kube-proxy's ParseIPSloppy does and
// canonicalises it: IPv4-mapped IPv6 addresses become IPv4, and IPv4
// octets with leading zeros are read as decimal ("010.0.0.1" is 10.0.0.1,
// as in Go before 1.17; the apiserver still holds such legacy values).
// Zoned addresses ("fe80::1%eth0") are invalid, as for net.ParseIP.
func parseIP(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	return parseIPv4Sloppy(s)
}

// parseIPv4Sloppy parses a dotted quad whose octets may have leading zeros.
func parseIPv4Sloppy(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return netip.Addr{}, false
		}
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return netip.Addr{}, false
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), true
}

// parsePrefix parses a CIDR as net.ParseCIDR does: the address is masked,
// and an IPv4-mapped address gives an IPv4 prefix. Invalid CIDRs give
// false.
func parsePrefix(s string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), true
}

// familyOf returns the IP family of a canonical (unmapped) address.
func familyOf(a netip.Addr) v1.IPFamily {
	if a.Is4() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}
