//go:build linux

package iptables

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	bt "github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// churnSyncs is how many Syncs the churn tests run per variant:
// backendtest.ChurnSyncs.
func churnSyncs(t *testing.T) int { return bt.ChurnSyncs(t) }

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// churnStable is the service port whose rules never change while the
// others churn: backendtest's probed one.
var churnStable = bt.ChurnProbed

// churnState is backendtest.ChurnState over the cluster's pods, with the
// stable service port's endpoints a1 and b1.
func churnState(c *netlab.Cluster, r *rand.Rand, n int) *backends.State {
	a1, b1, a2 := c.Pod("a1"), c.Pod("b1"), c.Pod("a2")
	return bt.ChurnState(r, n, []netip.Addr{a1.IPv4, a2.IPv4, b1.IPv4}, bt.Endpoint(a1.IPv4, 1), bt.Endpoint(b1.IPv4, 1))
}

// probe starts backendtest's Prober from ns to to through node.
func probe(t *testing.T, ns *netlab.NS, node *netlab.Node, to netip.AddrPort, workers int) *bt.Prober {
	return bt.StartProber(t, ns, node, to, workers)
}

// TestKernelSyncKeepsNewConnections: while the Backend runs many Syncs
// that change other service ports (partial syncs, which rewrite the fixed
// chains, and every tenth a full one), new TCP connections and UDP
// requests to a service port whose rules never change are all answered.
func TestKernelSyncKeepsNewConnections(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		node := c.Nodes[0]
		b := nodeBackend(t, node, v, backends.IPv4)
		r := rand.New(rand.NewPCG(1, 2))
		syncOK(t, b, churnState(c, r, 20))
		if got := counts(t, c.Client.NS, "tcp", churnStable, 2); got["a1"]+got["b1"] != 2 {
			t.Fatalf("before the churn: %v", got)
		}
		st := probe(t, c.Client.NS, node, churnStable, 2)
		syncs, full := churnSyncs(t), 0
		for i := range syncs {
			if i%10 == 9 {
				b.lastFull = time.Time{} // the next Sync is a full one
				full++
			}
			if _, err := b.Sync(context.Background(), churnState(c, r, 20)); err != nil {
				st.Stop()
				t.Fatalf("sync %d: %v", i, err)
			}
		}
		st.Finish(t, string(v)+": "+fmt.Sprintf("%d syncs changed other service ports (%d full)", syncs, full))
	})
}

// TestKernelRawRestoreKeepsNewConnections is the same probe while the
// variant's own iptables-restore --noflush rewrites, over and over, the
// chains a Sync wrote: no rule changes at all. It tells the tool's and
// the kernel's part from the Backend's. It runs only with
// WASP_RAW_RESTORES set, to that many restores.
func TestKernelRawRestoreKeepsNewConnections(t *testing.T) {
	if os.Getenv("WASP_RAW_RESTORES") == "" {
		t.Skip("a measurement: set WASP_RAW_RESTORES to the number of restores")
	}
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		node := c.Nodes[0]
		b := nodeBackend(t, node, v, backends.IPv4)
		r := rand.New(rand.NewPCG(1, 2))
		s := churnState(c, r, 20)
		syncOK(t, b, s)
		input := []byte(b.last.Restore())
		bin := map[xtables.Variant]string{xtables.NFT: "iptables-nft-restore", xtables.Legacy: "iptables-legacy-restore"}[v]
		st := probe(t, c.Client.NS, node, churnStable, 2)
		n := envInt(t, "WASP_RAW_RESTORES", 1)
		for i := range n {
			cmd := exec.Command("nsenter", "--net="+node.NS.Path(), "--", bin, "--noflush", "-w", "5")
			cmd.Stdin = bytes.NewReader(input)
			if out, err := cmd.CombinedOutput(); err != nil {
				st.Stop()
				t.Fatalf("restore %d: %v: %s", i, err, out)
			}
		}
		st.Finish(t, string(v)+": "+fmt.Sprintf("%s rewrote the same rules %d times", bin, n))
	})
}

// TestKernelEndpointChangeKeepsNewConnections: while the endpoints of the
// probed service port change at every Sync (each endpoint answering
// throughout), new TCP connections and UDP requests to it are all
// answered.
func TestKernelEndpointChangeKeepsNewConnections(t *testing.T) {
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		node := c.Nodes[0]
		b := nodeBackend(t, node, v, backends.IPv4)
		r := rand.New(rand.NewPCG(3, 4))
		pods := []*netlab.Pod{c.Pod("a1"), c.Pod("a2"), c.Pod("b1")}
		state := func() *backends.State {
			var eps []backends.Endpoint
			for len(eps) == 0 {
				for _, p := range pods {
					if r.IntN(2) == 0 {
						eps = append(eps, bt.Endpoint(p.IPv4, 1))
					}
				}
			}
			svc := bt.Service("moving", churnStable.Addr(), bt.Endpoints(eps...))
			return clusterState(c, svc, bt.UDPTwin(svc))
		}
		syncOK(t, b, state())
		st := probe(t, c.Client.NS, node, churnStable, 2)
		syncs := churnSyncs(t)
		// The other family's Backend syncs at the same time, as in the
		// daemon.
		b6 := nodeBackend(t, node, v, backends.IPv6)
		r6 := rand.New(rand.NewPCG(5, 6))
		done6 := make(chan error, 1)
		go func() {
			for i := range syncs {
				if i%10 == 9 {
					b6.lastFull = time.Time{}
				}
				if _, err := b6.Sync(context.Background(), bt.To6(churnState(c, r6, 20))); err != nil {
					done6 <- err
					return
				}
				if _, err := b6.CheckDrift(context.Background()); err != nil {
					done6 <- err
					return
				}
			}
			done6 <- nil
		}()
		for i := range syncs {
			if i%10 == 9 {
				b.lastFull = time.Time{}
			}
			if _, err := b.Sync(context.Background(), state()); err != nil {
				st.Stop()
				t.Fatalf("sync %d: %v", i, err)
			}
		}
		if err := <-done6; err != nil {
			t.Error(err)
		}
		st.Finish(t, string(v)+": "+fmt.Sprintf("%d syncs changed its endpoints", syncs))
	})
}

// TestKernelIdleKeepsNewConnections is the control of the churn tests:
// the same probe while nothing syncs at all, for WASP_IDLE_SECONDS
// seconds; it runs only with that set.
func TestKernelIdleKeepsNewConnections(t *testing.T) {
	secs := os.Getenv("WASP_IDLE_SECONDS")
	if secs == "" {
		t.Skip("a measurement: set WASP_IDLE_SECONDS to how long to probe")
	}
	eachVariant(t, func(t *testing.T, v xtables.Variant, c *netlab.Cluster) {
		node := c.Nodes[0]
		syncOK(t, nodeBackend(t, node, v, backends.IPv4), churnState(c, rand.New(rand.NewPCG(1, 2)), 20))
		st := probe(t, c.Client.NS, node, churnStable, 2)
		time.Sleep(time.Duration(envInt(t, "WASP_IDLE_SECONDS", 1)) * time.Second)
		st.Finish(t, string(v)+": "+"nothing synced for "+secs+" s")
	})
}
