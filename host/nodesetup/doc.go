// Package nodesetup does the privileged, one-time setup of a node that
// kube-proxy does at start and that `kube-proxy --init-only` (and `wasp
// run --init-only`) does in an init container, so that the proxy's own
// container can run with CAP_NET_ADMIN alone.
//
// # What it writes
//
// Run writes only what its Config asks for, and only settings whose value
// differs, so it can run at every start of a pod:
//
//   - net.netfilter.nf_conntrack_max, raised to max(MaxPerCore × CPUs,
//     Min) when smaller (kube-proxy's --conntrack-max-per-core and
//     --conntrack-min); MaxPerCore 0 leaves it alone. CPUs are the node's
//     online CPUs from sysfs, not the process's affinity, since the table
//     is the node's. A larger value is never lowered.
//   - /sys/module/nf_conntrack/parameters/hashsize (reported as
//     nf_conntrack.hashsize), raised to a quarter of that limit when
//     smaller, as upstream does, so that hash chains stay short.
//   - net.netfilter.nf_conntrack_tcp_timeout_established,
//     nf_conntrack_tcp_timeout_close_wait, nf_conntrack_udp_timeout and
//     nf_conntrack_udp_timeout_stream, in whole seconds, each only when
//     its duration is not zero.
//   - net.netfilter.nf_conntrack_tcp_be_liberal = 1, only when
//     TCPBeLiberal is true; false never writes 0.
//   - net.ipv4.conf.all.route_localnet = 1, only when RouteLocalnet is
//     set. Upstream's iptables mode needs it for NodePorts on 127.0.0.1
//     (--iptables-localhost-nodeports); wasp's nftables mode, like
//     upstream's, does not serve NodePorts on localhost, so wasp leaves it
//     alone, and the field waits for a mode that needs it.
//
// nf_conntrack_max and the hash table size are global: the kernel lets
// only root in the initial network namespace change them (the sysctl is
// read-only elsewhere, and the module parameter refuses with EOPNOTSUPP).
// The timeouts, be_liberal and route_localnet belong to the network
// namespace of the writer; Config.NetNS picks another one than the
// current.
//
// Errors name the setting and the value (net.netfilter.nf_conntrack_max=
// 262144: ...). A read-only mount, as /proc/sys and /sys are in an
// unprivileged container and as /sys sometimes is through a known Docker
// bug, is ErrReadOnly. Upstream used to skip the hash table size then
// and post a node event; newer releases fail. Run reports it as a failure
// of that setting, writes the others, and its caller decides: `wasp run
// --init-only` exits non-zero, because an init container exists to make
// these writes. A limit that is already large enough is not written, so
// a read-only /sys is no failure on a node whose hash table is big
// enough.
//
// # Kernel probes
//
// Before the settings, Run asks the kernel for what wasp's dataplane and
// conntrack cleaner use: first the chosen mode's probes, which its
// backend owns and Config.Dataplane runs (the nftables mode's are
// nftables.Probes: nf_tables itself, a NAT chain with ct state and
// masquerade, numgen, verdict maps keyed by concatenations, deleting a
// chain together with the last verdict-map element that jumps to it in
// one transaction), then this package's, which every mode needs: a
// conntrack dump over netlink, and whether nf_conntrack is loaded. An
// iptables node is not asked for nftables, nor the reverse. Each has
// three outcomes: Supported,
// NotSupported with the kernel's refusal as reason, or Inconclusive when
// it could not ask (no CAP_NET_ADMIN, a canceled context, a probe it
// depends on did not succeed). NotSupported is an error (ErrNotSupported);
// Inconclusive is reported and logged only. The probes go first because
// using NAT chains and ct expressions makes the kernel load nf_conntrack,
// whose sysctls the settings write.
//
// # Why CAP_NET_ADMIN suffices afterwards
//
// Writing /proc/sys and /sys needs root over them and writable mounts,
// which is why kube-proxy runs privileged. Everything wasp run does after
// this setup is netlink: nftables transactions and conntrack dumps and
// deletes, which need CAP_NET_ADMIN over the node's network namespace
// and nothing else. The kernel loads the nf_tables modules a
// transaction uses by itself, so the proxy's container needs no
// CAP_SYS_MODULE either.
//
// # ct state invalid
//
// With --conntrack-tcp-be-liberal, upstream's iptables mode does not
// install its rule dropping packets in ct state invalid, because the
// setting exists to let out-of-window packets through. Wasp's nftables
// backend never installs such a rule, and neither does upstream's
// nftables mode, so be_liberal changes only what conntrack itself
// considers invalid.
package nodesetup
