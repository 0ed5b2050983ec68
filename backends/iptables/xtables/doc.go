// Package xtables runs the iptables binaries for wasp's iptables backend:
// one Runner per variant (iptables-nft or iptables-legacy) and IP family
// (iptables or ip6tables), optionally inside a network namespace.
//
// # Variants
//
// iptables 1.8 ships two implementations of the same command line:
// iptables-nft keeps xtables rules in nf_tables, iptables-legacy uses the
// x_tables kernel API. Each sees only its own rules, so a node's iptables
// users must all use the same one: Detect picks the one kubelet (and so
// the node's other iptables users) chose, the way the kube-proxy image's
// wrapper does, and says which evidence decided. A Runner never falls
// back to the other variant. RATIONALE.md says why.
//
// # Calls
//
// Restore feeds a whole ruleset to <family>-<variant>-restore --noflush
// --counters, waiting up to 5 s for the xtables lock (-w 5 -W 100000).
// Each table in its input is committed at its COMMIT line, atomically;
// tables before a failing one stay committed (both variants do this). A
// failure is a *RestoreError with the input line the binary named, the
// lines around it and the binary's message.
//
// The single-rule calls (EnsureChain, EnsureRule, DeleteRule, ChainExists,
// DeleteChain) run <family>-<variant> -w 5 for the jump rules in built-in
// chains and the canary chains. Missing rules and chains are no error
// where the call's purpose is already met: DeleteRule of a rule that is
// not there (its chain, or the chain it jumps to, gone) and DeleteChain
// of a missing chain return nil.
//
// For an iptables older than 1.6.2, whose restore cannot wait for the
// lock, Restore takes /run/xtables.lock itself; older than 1.6.0 is
// refused.
//
// # Namespaces
//
// With a namespace path (such as /run/netns/NAME), every binary runs
// inside that network namespace: it is started from an OS thread that
// entered the namespace and is thrown away afterwards
// (internal/nsthread), so nothing else in the process moves.
//
// # Sysctls
//
// ReadSysctl and SetSysctl read and write /proc/sys in a network
// namespace, for the sysctls the backend depends on
// (SysctlRouteLocalnet, SysctlTCPBeLiberal).
//
// # Missing binaries
//
// New looks for the binaries in PATH, then /usr/sbin and /sbin. When any
// is missing it fails with one error, wrapping ErrNotInstalled, that names
// every missing binary and the package to install (Debian and Ubuntu:
// iptables).
package xtables
