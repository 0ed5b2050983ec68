package xtables

import (
	"fmt"

	"github.com/wasp-proxy/wasp/backends"
)

// Variant is one of the two implementations of the iptables command
// line that iptables 1.8 and later ship side by side: they program
// different kernel subsystems, so rules written with one are invisible
// to the other.
type Variant string

const (
	// NFT is iptables-nft: xtables rules kept in nf_tables tables.
	NFT Variant = "nft"
	// Legacy is iptables-legacy: the x_tables kernel API (ip_tables,
	// ip6_tables).
	Legacy Variant = "legacy"
)

func (v Variant) valid() bool { return v == NFT || v == Legacy }

// The tools of a variant, as the suffix of its binary's name.
const (
	toolMain    = ""         // iptables-nft: single rules and chains
	toolSave    = "-save"    // iptables-nft-save
	toolRestore = "-restore" // iptables-nft-restore
)

// command returns the name of variant v's binary of tool for family f:
// iptables-nft, ip6tables-legacy-restore and so on.
func command(v Variant, f backends.Family, tool string) (string, error) {
	if !v.valid() {
		return "", fmt.Errorf("iptables variant %q: want %q or %q", string(v), NFT, Legacy)
	}
	switch f {
	case backends.IPv4:
		return "iptables-" + string(v) + tool, nil
	case backends.IPv6:
		return "ip6tables-" + string(v) + tool, nil
	}
	return "", fmt.Errorf("iptables family %s: want ipv4 or ipv6", f)
}
