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
// (external traffic), WASP-FW- (load-balancer source ranges) and one
// WASP-SEP- per endpoint, followed by 16 characters of the base32 of a
// SHA-256 of the service port's name and protocol (and endpoint), the
// input upstream hashes: each name is upstream's with the prefix
// changed. So wasp and kube-proxy never touch each other's chains, and a
// node can move from one to the other without a failed connection. The
// built-in chains jump to wasp's with rules of their own, which a full
// sync adds (one iptables call each, after its restore) when it does not
// find them in what it reads back.
//
// What a service port means (its routes, frontends, firewall sources,
// masquerade) is decided by the backends package; this package only
// writes it as rules. Weighted endpoints: rule i of a policy chain takes
// "-m statistic --mode random --probability w_i/(w_i+...+w_n-1)", the
// last none, so endpoint i gets w_i/Σw of new connections (Probabilities);
// equal weights give upstream's 1/n, 1/(n-1), ..., 1/2.
//
// # Structure
//
//   - names.go: chain names and their hash.
//   - plan.go: Plan, a pure function from a State to a Ruleset: the
//     fixed chains of both tables in full, and one Fragment per service
//     port (its chains, and its rules in the fixed chains). The Backend's
//     planner reuses the Fragment of a service port that did not change.
//   - restore.go: the iptables-restore input of a Ruleset.
//   - kernel.go: the unexported kernel seam; kernel_linux.go adapts
//     xtables.Runner to it, fake.go is the Fake, a stateful in-memory
//     iptables that applies restore input as the kernel does and saves in
//     iptables-save format.
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
// CheckDrift (backends.DriftChecker) looks for the empty canary chain
// WASP-PROXY-CANARY the plan has in nat and filter, as
// upstream's KUBE-PROXY-CANARY: when a firewall reload deleted it, with
// wasp's other chains, the next Sync is a full one.
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
// Above LargeClusterEndpoints endpoints in all, the rules to and of the
// endpoint chains carry no comment, as upstream's large-cluster mode.
//
// # Differences from upstream
//
// The "WASP-" prefix; weights; masquerade of off-cluster traffic with
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
