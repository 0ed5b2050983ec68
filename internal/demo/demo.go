// Package demo is `wasp demo`: wasp programming a real kernel with no
// cluster, on one machine, in a few seconds.
//
// It builds a network lab (package netlab) of two nodes, three pods
// answering echo requests with their names, and a client; starts `wasp
// run` inside node-a's network namespace, over the bundled cluster of
// examples/demo served by the snapshot source; waits until the ClusterIP
// answers; sends requests to the ClusterIP (TCP and UDP) and to the
// NodePorts, from the client and from node-a itself; prints who answered
// each one and the spread per pod; and tears everything down: the proxy
// process, its nftables tables (`wasp cleanup`), the namespaces and the
// temporary files, also when interrupted.
//
// Why a child process rather than the proxy in-process with the nftables
// backend's NetNS option: the child is the real binary with the real
// flags, and everything it does happens in node-a's namespace without a
// namespace option threaded through each part — the nftables and
// conntrack netlink sockets, the node-port address lookup and the health
// servers' listeners. The cost is that readiness is observed from the
// outside (the ClusterIP answering) rather than through a hook.
package demo

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Opts configure Run.
type Opts struct {
	// Wasp is the path of the wasp binary to run as the proxy. Required.
	Wasp string
	// Out gets the report. Required.
	Out io.Writer
	// Requests is how many requests each target gets. Optional; default
	// DefaultRequests.
	Requests int
	// Modules are --module flags (STAGE=SOURCE) for the proxy. Optional.
	Modules []string
	// ProxyMode is the proxy's --proxy-mode ("nftables" or "iptables").
	// Optional: "" leaves wasp's default.
	ProxyMode string
	// ProxyLog, if set, gets the proxy's log as it is written. Optional:
	// by default the log is kept and its end printed only on failure.
	ProxyLog io.Writer
	// ReadyTimeout bounds the wait for the dataplane. Optional; default
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// Defaults for Opts.
const (
	DefaultRequests     = 9
	DefaultReadyTimeout = 2 * time.Minute
)

// The lab: names, as in examples/demo/cluster.yaml.
const (
	proxyNode   = "node-a"
	clusterCIDR = "10.244.0.0/16"
	echoPort    = 8080
)

// target is something the demo sends requests to.
type target struct {
	from    string   // "client" or "node-a"
	label   string   // e.g. "ClusterIP"
	network string   // tcp or udp
	addr    string   // host:port
	expect  []string // the pods allowed to answer
	note    string   // why, for the summary
}

func (t target) String() string {
	return fmt.Sprintf("%-18s %-23s", t.label, t.addr+"/"+strings.ToUpper(t.network))
}

// targets are the demo's requests, in order.
func targets() []target {
	all := []string{"web-1", "web-2", "web-3"}
	return []target{
		{"client", "ClusterIP", "tcp", "10.96.0.10:80", all, "every pod"},
		{"client", "ClusterIP", "udp", "10.96.0.10:80", all, "every pod"},
		{"client", "NodePort", "tcp", "198.51.100.11:30080", all, "every pod (externalTrafficPolicy Cluster)"},
		{"client", "NodePort eTP=Local", "tcp", "198.51.100.11:30081", all[:2], "node-a's pods only (externalTrafficPolicy Local)"},
		{proxyNode, "ClusterIP", "tcp", "10.96.0.10:80", all, "every pod"},
		{proxyNode, "NodePort", "tcp", "198.51.100.11:30080", all, "every pod"},
	}
}

// tally counts the answers to one target.
type tally struct {
	byPod  map[string]int
	failed int
}

// summary writes the spread per pod of each target, and returns an error
// naming every target that had failures or an answer from a pod it should
// not reach.
func summary(w io.Writer, ts []target, tallies []tally) error {
	fmt.Fprintln(w, "\nSpread per endpoint:")
	var problems []string
	for i, t := range ts {
		tl := tallies[i]
		var parts []string
		for _, pod := range slices.SortedFunc(maps.Keys(tl.byPod), cmp.Compare) {
			parts = append(parts, fmt.Sprintf("%s %d", pod, tl.byPod[pod]))
			if !slices.Contains(t.expect, pod) {
				problems = append(problems, fmt.Sprintf("%s from %s: answered by %s, want only %v", t, t.from, pod, t.expect))
			}
		}
		if tl.failed > 0 {
			parts = append(parts, fmt.Sprintf("no response %d", tl.failed))
			problems = append(problems, fmt.Sprintf("%s from %s: %d requests without response", t, t.from, tl.failed))
		}
		fmt.Fprintf(w, "  from %-6s %s  %-26s expected: %s\n", t.from, t, strings.Join(parts, ", "), t.note)
	}
	if len(problems) > 0 {
		return fmt.Errorf("demo: unexpected results:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}
