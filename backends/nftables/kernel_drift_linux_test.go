//go:build linux

package nftables

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// nftIn runs the nft command in n's namespace, or fails the test.
func nftIn(t *testing.T, n *netlab.Node, args ...string) string {
	t.Helper()
	out, err := n.NS.Command(context.Background(), "nft", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var handleRE = regexp.MustCompile(`# handle (\d+)`)

// ruleHandle returns the handle of a chain's i-th rule (from 0).
func ruleHandle(t *testing.T, n *netlab.Node, chain string, i int) string {
	t.Helper()
	out := nftIn(t, n, "-a", "list", "chain", "ip", DefaultTable, chain)
	var handles []string
	for _, line := range strings.Split(out, "\n") {
		// The chain's own line carries its handle too.
		if m := handleRE.FindStringSubmatch(line); m != nil && !strings.Contains(line, "chain ") {
			handles = append(handles, m[1])
		}
	}
	if i >= len(handles) {
		t.Fatalf("chain %s has %d rules, want a rule %d:\n%s", chain, len(handles), i, out)
	}
	return handles[i]
}

// TestKernelDrift changes the table behind the Backend's back with the nft
// command, as an operator would: the drift check names what changed, the
// next Sync repairs it, and the Service answers again.
func TestKernelDrift(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("kernel drift test: the nft command is not installed (Debian: apt-get install nftables)")
	}
	c := kernelCluster(t)
	a1, b1 := c.Pod("a1"), c.Pod("b1")
	web := svc("web", "10.96.0.10", func(s *backends.Service) {
		s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1), podEP(b1, backends.IPv4, 1)}
	})
	sticky := svc("sticky", "10.96.0.11", func(s *backends.Service) {
		s.AffinityTimeout = 60
		s.Cluster = []backends.Endpoint{podEP(a1, backends.IPv4, 1)}
	})
	s := clusterState(backends.IPv4, web, sticky)
	node := c.Nodes[0]
	b := nodeBackend(t, node, backends.IPv4)
	syncOK(t, b, s)
	ctx := context.Background()
	if d, err := b.CheckDrift(ctx); err != nil || d != nil {
		t.Fatalf("check after the first sync: %+v, %v; want no drift", d, err)
	}
	// The rule tags in the user data do not disturb nft. (-t: without
	// the elements, as the affinity set's count down.)
	programmed := nftIn(t, node, "-t", "list", "table", "ip", DefaultTable)
	// A client of the affinity service is added by a packet: no drift.
	backendtest.MustAsk(t, c.Client.NS, "tcp", cip11)

	// web is a simple service port (no chain of its own), sticky not.
	stickyChain := newServiceNames(&s.Services[0]).cluster
	if s.Services[0].Name != "sticky" {
		t.Fatalf("service 0 is %s, want sticky", s.Services[0].Name)
	}
	var stickyRules int
	for _, f := range Plan(backends.IPv4, DefaultTable, backends.DefaultMasqueradeBit, s).Services {
		for _, ch := range f.Chains {
			if ch.Name == stickyChain {
				stickyRules = len(ch.Rules)
			}
		}
	}
	tests := []struct {
		name    string
		nft     func() []string
		kind    string
		example string
	}{{
		name: "endpoint element deleted",
		nft: func() []string {
			return []string{"delete", "element", "ip", DefaultTable, "buckets-cluster-2", "{ 10.96.0.10 . tcp . 80 . 1 }"}
		},
		kind:    backends.DriftElement,
		example: "map buckets-cluster-2: element 10.96.0.10 . tcp . 80 . 1 missing",
	}, {
		name: "service element deleted",
		nft: func() []string {
			return []string{"delete", "element", "ip", DefaultTable, serviceIPsMap, "{ 10.96.0.11 . tcp . 80 }"}
		},
		kind:    backends.DriftElement,
		example: "map service-ips: element 10.96.0.11 . tcp . 80 missing",
	}, {
		name: "simple service element deleted",
		nft: func() []string {
			return []string{"delete", "element", "ip", DefaultTable, simpleServicesSet, "{ 10.96.0.10 . tcp . 80 }"}
		},
		kind:    backends.DriftElement,
		example: "set simple-services: element 10.96.0.10 . tcp . 80 missing",
	}, {
		name: "simple class element deleted",
		nft: func() []string {
			return []string{"delete", "element", "ip", DefaultTable, "simple-cluster-2", "{ 10.96.0.10 . tcp . 80 }"}
		},
		kind:    backends.DriftElement,
		example: "set simple-cluster-2: element 10.96.0.10 . tcp . 80 missing",
	}, {
		name:    "service chain flushed",
		nft:     func() []string { return []string{"flush", "chain", "ip", DefaultTable, stickyChain} },
		kind:    backends.DriftRule,
		example: fmt.Sprintf("chain %s: 0 rules, want %d", stickyChain, stickyRules),
	}, {
		name:    "simple-classes chain flushed",
		nft:     func() []string { return []string{"flush", "chain", "ip", DefaultTable, simpleClassesChain} },
		kind:    backends.DriftRule,
		example: "chain simple-classes: 0 rules, want ",
	}, {
		name: "rule deleted",
		nft: func() []string {
			return []string{"delete", "rule", "ip", DefaultTable, servicesChain, "handle", ruleHandle(t, node, servicesChain, 0)}
		},
		kind:    backends.DriftRule,
		example: "chain services: 2 rules, want 3",
	}, {
		name: "rule replaced",
		nft: func() []string {
			return []string{"replace", "rule", "ip", DefaultTable, servicesChain, "handle", ruleHandle(t, node, servicesChain, 0), "accept"}
		},
		kind:    backends.DriftRule,
		example: "chain services: rule 1 changed",
	}, {
		name:    "element changed",
		nft:     func() []string { return []string{"-f", "-"} }, // see below
		kind:    backends.DriftElement,
		example: "map buckets-cluster-2: element 10.96.0.10 . tcp . 80 . 1 changed",
	}, {
		name: "base chain policy drop",
		nft: func() []string {
			return []string{"add", "chain", "ip", DefaultTable, natOutputChain, "{ type nat hook output priority -100; policy drop; }"}
		},
		kind:    backends.DriftChain,
		example: "chain nat-output: policy is not accept",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if b.stats.driftReadbacks == 0 {
				t.Fatal("no read-back yet")
			}
			if d, err := b.CheckDrift(ctx); err != nil || d != nil {
				t.Fatalf("check before the change: %+v, %v; want no drift", d, err)
			}
			readbacks := b.stats.driftReadbacks
			if tc.name == "element changed" {
				cmd := node.NS.Command(ctx, "nft", "-f", "-")
				cmd.Stdin = strings.NewReader("delete element ip wasp buckets-cluster-2 { 10.96.0.10 . tcp . 80 . 1 }\n" +
					"add element ip wasp buckets-cluster-2 { 10.96.0.10 . tcp . 80 . 1 : 10.244.1.99 . 8080 }\n")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("nft -f: %v\n%s", err, out)
				}
			} else {
				nftIn(t, node, tc.nft()...)
			}
			d, err := b.CheckDrift(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if b.stats.driftReadbacks != readbacks+1 {
				t.Errorf("the check after the change did not read the table back")
			}
			if d.Empty() || d.Objects[tc.kind] == 0 {
				t.Fatalf("drift %+v, want %s objects", d, tc.kind)
			}
			if !strings.Contains(d.Examples[0], tc.example) {
				t.Errorf("examples %q, want the first to contain %q", d.Examples, tc.example)
			}
			syncOK(t, b, s)
			// Compared as lines: a recreated base chain is listed last.
			if diff := lineDiff(programmed, nftIn(t, node, "-t", "list", "table", "ip", DefaultTable)); diff != "" {
				t.Errorf("after the repair nft lists another table:\n%s", diff)
			}
			if d, err := b.CheckDrift(ctx); err != nil || d != nil {
				t.Errorf("check after the repair: %+v, %v; want no drift", d, err)
			}
			if got := backendtest.Counts(t, c.Client.NS, "tcp", cip10, 30); got["a1"] == 0 || got["b1"] == 0 {
				t.Errorf("after the repair web answered %v, want both a1 and b1", got)
			}
		})
	}
}

// TestKernelNoDrift: the golden rulesets of both families, which use every
// kind of object, and the transition states read back from a real kernel
// as they were programmed.
func TestKernelNoDrift(t *testing.T) {
	c := kernelCluster(t)
	ctx := context.Background()
	for _, s := range []*backends.State{goldenState4(), goldenState6()} {
		b := nodeBackend(t, c.Nodes[0], s.Family)
		syncOK(t, b, s)
		if d, err := b.CheckDrift(ctx); err != nil || d != nil {
			t.Fatalf("%s: drift %+v, %v; want none", s.Family.String(), d, err)
		}
		if b.stats.driftReadbacks != 1 {
			t.Errorf("%s: %d read-backs, want 1", s.Family.String(), b.stats.driftReadbacks)
		}
	}
	// Every state of the transition sequence (shared keys, affinity
	// switched on and off, sets redefined) reads back clean.
	b := nodeBackend(t, c.Nodes[1], backends.IPv4)
	for i, s := range transitionStates() {
		syncOK(t, b, s)
		b.verified = false // as after a foreign commit
		if d, err := b.CheckDrift(ctx); err != nil || d != nil {
			t.Fatalf("transition state %d: drift %+v, %v; want none", i, d, err)
		}
	}
}
