// Package nftables is wasp's nftables dataplane: a backends.Backend that
// programs one table per IP family ("ip wasp", "ip6 wasp") over netlink,
// with the layout and semantics of upstream kube-proxy's nftables mode
// (table "kube-proxy"): base chains at dstnat-10, dstnat, dstnat+10 and
// srcnat; dispatch through verdict maps (service-ips, service-nodeports,
// no-endpoint-services, no-endpoint-nodeports, firewall-ips) and sets
// (cluster-ips, nodeport-ips), so a packet's cost does not grow with the
// number of Services; per-service-port chains service-, local-,
// external-, firewall- and per-endpoint chains endpoint- with affinity-
// sets. README.md lists every object, hook and priority.
//
// Differences: endpoints carry weights, and new connections spread in
// proportion to them (weights reduced by their gcd: 3 and 1 give 4
// buckets, 0-2 for A and 3 for B; equal weights give upstream's "numgen
// random mod N"). And endpoints are data rather than chains, but for
// affinity: a policy chain goes to the shared chain bucket-classes-<kind>,
// whose verdict map sends the service entry to the bucket chain of its
// number of buckets W, buckets-<kind>-<W>, which DNATs to the endpoint
// of a random bucket from a data map ("dnat ip to ip daddr . meta l4proto
// . th dport . numgen random mod W map @buckets-cluster-W"); hairpin
// masquerade is one rule of the masquerading chain over the set
// hairpin-endpoints. The reason is the kernel's commit-time validation:
// any rule, or map element with a goto or jump verdict, added in a
// transaction makes it walk every chain and verdict-map element reachable
// from the base chains (nf_tables_validate), ~200 ms with 110k endpoint
// chains at 10k services. Endpoint changes now add data elements only (no
// validation), or one goto element when their number changes; the bucket
// chains of W = 1..16 always exist so that such a change adds no rule. A
// verdict map is walked once per chain that looks it up, so the
// bucket-classes maps are looked up by one chain, not by every policy
// chain.
//
// # Simple service ports
//
// Most service ports are "simple": a ClusterIP and nothing else (no
// NodePort, external IP or load-balancer VIP), endpoints for the internal
// traffic policy, no affinity, and W = 1..16 buckets. A simple service port
// has no chain and no verdict element at all, so that its arrival, its
// departure and its endpoint changes (W included) are data elements only,
// and the kernel never validates the chain graph for them: such a change
// costs the same at 30k service ports as at 1k. Its entry "ClusterIP .
// proto . port" is an element of the set simple-services and of the set
// simple-<kind>-<W> of its bucket class; its buckets and hairpin pairs are
// those of a policy chain (buckets-<kind>-<W>, hairpin-endpoints). The
// chain services, after its service-ips lookup, goes to the chain
// simple-classes for a simple entry:
//
//	ip daddr . meta l4proto . th dport @simple-services goto simple-classes
//
// simple-classes holds the masquerade rule a policy chain starts with,
// once for all simple ports (the rule tests the source address only, and
// the State says the same for every ClusterIP: ip saddr != { pod CIDRs },
// all with MasqueradeAll, none without pod CIDRs), then one rule per class,
// cluster W = 1..16 first, then local W = 1..16:
//
//	ip daddr . meta l4proto . th dport @simple-cluster-3 goto buckets-cluster-3
//
// These sets and rules always exist, so a change adds none of them. A
// port that stops being simple (a NodePort added, affinity switched on,
// 17 buckets) gets its chains and verdict elements, then loses its simple
// elements, in the commits of one Sync, and the other way round.
//
// Per packet (the nat chains see the first packet of a connection only):
// a new connection to a simple service port does the service-ips lookup
// (a miss), the simple-services lookup, the masquerade rule, and one set
// lookup per class rule up to its own: W lookups for the cluster kind,
// 16 + W for the local one, each a hash lookup of a 12-byte (IPv4) or
// 24-byte (IPv6) key, before the same DNAT map lookup as a policy chain's.
// A policy chain costs a vmap lookup, the masquerade rule, a goto and the
// bucket-classes vmap lookup instead. Other service ports find their
// entry in service-ips first and pay nothing more; a packet to no
// Service pays one hash lookup more (simple-services, a miss) before the
// NodePort rule (a fib or set lookup and a vmap lookup). A key that a
// simple port and another port both claim (another Service's external IP
// equal to a ClusterIP, same protocol and port) goes to the other port,
// whose service-ips element is looked up first.
//
// # Structure
//
// The package keeps the deterministic parts apart from the kernel:
//
//   - ir.go: a small rule IR. Tables, chains, sets, maps and elements are
//     plain data; each expression or statement is a Go type whose String
//     is nft syntax.
//   - plan.go: Plan, a pure function from a State to a Ruleset, made of a
//     global Fragment and one Fragment per service port. The Backend's
//     planner reuses the Fragment of a service port that did not change,
//     told by identity (the same slices: a State is never modified once
//     given to a Backend) before equality, and validate.go checks only the
//     service ports that changed, so that the Go side of a change costs a
//     few comparisons per unchanged service port.
//   - diff.go: Diff, from two Rulesets to one Transaction: chains whose
//     rules changed are flushed and rewritten, map and set elements added
//     and deleted one by one, stale chains and sets deleted. Fragments the
//     two Rulesets share are skipped unseen. rebuild reconciles a table
//     whose content is only known by name.
//   - kernel.go: the unexported kernel seam. netlink_linux.go compiles the
//     IR to github.com/google/nftables expressions, collects their
//     netlink messages as wire bytes (setelem_linux.go writes the element
//     messages itself), and sends each Transaction as one batch in one
//     sendmsg, which the kernel applies atomically; fake.go
//     is the Fake, a stateful in-memory kernel that
//     validates like the kernel and dumps in nft syntax.
//
// # Syncing
//
// A Backend keeps the Ruleset it last programmed. Each Sync plans the new
// one and sends only the difference, in one transaction, or for a change
// that moves a served service entry from one path to another, in a few
// commits in a row, make before break (see Diff): the kernel applies
// each commit atomically, but a packet whose evaluation began before a
// commit runs the rules of before and makes its set lookups, the later
// ones, after it, so one commit that both adds a path and deletes the old
// one can leave it with neither. It never lists the kernel. When what is programmed is not known (the first Sync of a
// process, or after a failed transaction, or after Cleanup), it loads the
// names of the table's chains and sets once and, in one transaction,
// flushes every chain, rewrites the wanted ones, deletes the rest and
// re-adds every set and map with its elements, without deleting the
// table: connections keep their conntrack NAT entries, and affinity sets
// whose definition did not change keep their clients.
//
// Stale chains are deleted in the commit that removes the last
// reference to them, or in a later one of the same Sync. Upstream flushes them and deletes them a second
// later because kernels before 6.2 dropped a verdict-map element's
// reference to its chain only after the transaction; wasp needs a kernel
// that does it within the transaction (TestKernelStaleChainsDeletedAtOnce
// checks this one).
//
// # Tests
//
// Unit, golden and state-transition tests run on the Fake without root.
// Kernel tests (kernel_*_linux_test.go) build namespaces with
// internal/netlab and send real packets; they skip with a reason when not
// root or without nftables, and in -short mode.
package nftables
