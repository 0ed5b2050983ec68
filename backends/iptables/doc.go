// Package iptables is wasp's iptables dataplane: a backends.Backend that
// programs the filter and nat tables of one IP family with
// iptables-restore (ip6tables-restore for IPv6), with the layout and
// semantics of upstream kube-proxy's iptables mode, on nodes that use
// iptables-nft and on nodes that use iptables-legacy (xtables runs the
// binaries of the variant the node uses, never both). README.md lists
// every chain and rule it owns.
//
// # Layout
//
// Every chain wasp owns is named with Prefix, "WASP-", where upstream
// writes "KUBE-": WASP-SERVICES, WASP-NODEPORTS, WASP-POSTROUTING and
// WASP-MARK-MASQ in nat; WASP-SERVICES, WASP-EXTERNAL-SERVICES,
// WASP-NODEPORTS, WASP-FORWARD, WASP-PROXY-FIREWALL (and WASP-FIREWALL
// with localhost NodePorts) in filter; and per service port, in nat,
// WASP-SVC- (Cluster endpoints), WASP-SVL- (Local endpoints), WASP-EXT-
// (external traffic) and WASP-FW- (load-balancer source ranges),
// followed by 16 characters of the base32 of a SHA-256 of the service
// port's name and protocol, the input upstream hashes: each name is
// upstream's with the prefix changed. So wasp and kube-proxy never touch
// each other's chains, and a node can move from one to the other without
// a failed connection. The built-in chains jump to wasp's with rules of
// their own, which a full sync adds (one iptables call each, after its
// restore) when it does not find them in what it reads back.
//
// There is no chain per endpoint. A policy chain (WASP-SVC-, WASP-SVL-)
// holds one rule per endpoint that DNATs to it. Weighted endpoints: rule
// i takes "-m statistic --mode random --probability w_i/(w_i+...+w_n-1)",
// the last none, so endpoint i gets w_i/Σw of new connections
// (Probabilities); equal weights give upstream's 1/n, 1/(n-1), ..., 1/2.
// ClientIP affinity puts first one rule per endpoint, "-m recent --name
// WASP-SEP-<h> --rcheck --seconds T --reap -m recent --name WASP-SEP-<h>
// --set -j DNAT" (the second match refreshes the client's entry, as
// upstream's endpoint chain does), and gives each statistic rule a
// "-m recent --name WASP-SEP-<h> --set" after the statistic match, so
// that it records only the connections the rule took. The affinity list
// of an endpoint is named as upstream names its chain (the hash of the
// service port's name, protocol and endpoint), so the lists of an
// earlier wasp, which had those chains, still hold.
//
// Hairpin traffic (a pod reaching itself through its Service) is
// masqueraded as upstream's ipvs mode does it: an ipset of type
// hash:ip,port,ip per family (SetHairpin4 "WASP-HAIRPIN", SetHairpin6
// "WASP-HAIRPIN6") holds (endpoint, protocol:port, endpoint) for every
// endpoint, and the first rule of WASP-POSTROUTING masquerades what
// matches it "dst,dst,src": a connection DNATed to the endpoint that
// opened it. The set is managed over netlink (ipset_linux.go), in the
// Backend's network namespace; a Sync adds the entries of new endpoints
// before its restore and deletes those of endpoints that left after it,
// so a hairpin connection is masqueraded whichever rules it meets; a
// full sync lists the set and brings it in line with the plan. It needs
// the ip_set, ip_set_hash_ipportip and xt_set kernel modules, which Probe
// checks.
//
// What a service port means (its routes, frontends, firewall sources,
// masquerade) is decided by the backends package; this package only
// writes it as rules.
//
// # Structure
//
//   - names.go: chain and set names and their hash.
//   - plan.go: Plan, a pure function from a State to a Ruleset: the
//     fixed chains of both tables in full, and one Fragment per service
//     port (its chains, its rules in the fixed chains, its endpoints'
//     hairpin entries). The Backend's planner reuses the Fragment of a
//     service port that did not change.
//   - restore.go: the iptables-restore input of a Ruleset.
//   - kernel.go: the unexported kernel seam; kernel_linux.go adapts
//     xtables.Runner to it, fake.go is the Fake, a stateful in-memory
//     iptables that applies restore input as the kernel does and saves in
//     iptables-save format, with the hairpin sets; ipset_linux.go manages
//     the sets in the kernel.
//
// # Syncing
//
// Each Sync is one iptables-restore --noflush (a chain the input declares
// is flushed and rewritten; the others are left alone), nat first, then
// filter. A partial sync (upstream's "minimized restore") writes only the
// chains whose rules changed since the last successful Sync: a fixed
// chain (in full) when one of its rules did, as for a service port that
// came or went, and the per-service chains found by comparing each
// changed service port's Fragment with the one programmed; the chains of
// service ports that changed or left and are no longer wanted are
// declared (flushed) and deleted ("-X") in the same input, when nothing
// references them any more; when no rule of any chain changed, it runs
// no restore at all. A full sync trusts no record: it reads both tables
// back with iptables-save (readback.go) and writes every chain whose
// rules there differ from the plan, each rule compared in a canonical
// form that undoes iptables-save's reordering and defaults (canonRule; a
// rule it cannot read makes its chain be written), and deletes every
// chain of wasp's the tables hold but the plan lacks, such as the chains
// of a service port that left while no process ran, or WASP-FIREWALL
// after localhost NodePorts were turned off (its jumps deleted first). It
// happens at the first Sync of a process, which so reconciles with what an
// earlier process left without flushing anything apart (established
// connections keep their conntrack entries) and, when the State did not
// change meanwhile, writes nothing; after any failure, after Cleanup or
// drift, and every Opts.FullSyncPeriod.
//
// CheckDrift (backends.DriftChecker, drift.go) reads both tables back
// with iptables-save and compares every chain of wasp's, rule by rule,
// and the jumps from the built-in chains with the last successful Sync's
// plan, as a full sync does: a hand-deleted DNAT rule of one service
// port, a flushed chain, a rule added, a chain added or missing, a jump
// deleted, a firewall reload. Upstream only looks for its canary chain
// (wasp's plan still has one, WASP-PROXY-CANARY). On drift the next Sync
// is a full one, which writes the chains that differ. A check remembers
// a hash of each rule line it found the same as the plan, so the next
// one parses only the lines that changed.
//
// A failed restore returns an error wrapping ErrRestore (and
// ErrPartialRestore after a partial sync) with the failing line. Each
// table's section commits whole or not at all; nat comes first, as the
// rules a kernel may refuse are there, so that such a failure leaves both
// tables as they were.
//
// A packet meets a table's rules from before its section or from after
// it, never a chain half rewritten: iptables-legacy swaps the whole
// table, and iptables-nft commits the section as one nf_tables
// transaction (one generation, seen with "nft monitor": the flush of each
// declared chain, its new rules and the "-X" deletions together; "-N" on
// an existing chain and "-C" commit nothing). So a new connection to a
// service port whose rules a Sync leaves as they were is never lost while
// it runs, nor one to a service port whose endpoints change while the
// old ones still answer (kernel_churn_linux_test.go counts them, with
// both variants). A connection whose first packet comes before the rules
// of its new service port does not recover: its conntrack entry, made
// without DNAT, carries its retransmissions too, until it times out.
//
// Above LargeClusterEndpoints endpoints in all, the DNAT rules of the
// policy chains carry no comment, as upstream's large-cluster mode.
//
// # Differences from upstream
//
// The "WASP-" prefix; no per-endpoint chains: the policy chains DNAT
// themselves, and hairpin traffic is masqueraded through an ipset, as
// upstream's ipvs mode does (at 10k Services × 10 endpoints, 10k chains,
// 120k rules and 17 MB of restore input instead of 110k chains, 320k
// rules and 33 MB; RATIONALE.md has the measurements); weights; masquerade of off-cluster traffic with
// several cluster CIDRs through WASP-MASQ-OFF-CLUSTER (upstream knows
// one); no localhost NodePort accounting (nfacct); stale chains found by
// the Backend's own record rather than a save of the nat table at every
// sync; the order of the tables in a restore.
//
// # Tests
//
// Unit, golden, packet-tracer and state-transition tests run on the Fake
// without root; backendtest's suites run on it and, with real packets, on
// both variants in netlab clusters (kernel_*_linux_test.go), which skip
// with a reason when not root and in -short mode. The churn kernel tests
// open new connections without pause while Syncs run, and report a lost
// one with the node's conntrack entry for it (conntrack(8), when
// installed).
package iptables
