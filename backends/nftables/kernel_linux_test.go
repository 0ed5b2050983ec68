//go:build linux

package nftables

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// Kernel tests program a real nftables table in a node of a netlab
// cluster (see netlab's address plan: node-a 198.51.100.11 with pods
// 10.244.1.0/24, node-b 198.51.100.12 with pods 10.244.2.0/24, client
// 198.51.100.200 routed through node-a) and send real packets through it.
// Services use backendtest's plan, whose ClusterIPs are in 10.96.0.0/16
// and fd00:10:96::/112. The scenarios every backend shares are
// backendtest's suites (TestKernelTraffic, TestKernelTransitions,
// TestKernelIdempotence); the tests here are nftables' own.

// kernelCluster builds a two-node cluster with pods a1, a2 on node-a and
// b1 on node-b, or skips the test with the reason it cannot.
func kernelCluster(t *testing.T) *netlab.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel test: skipped in -short mode")
	}
	lab := netlab.NewForTest(t)
	c, err := netlab.BuildCluster(lab, netlab.ClusterSpec{Nodes: []netlab.NodeSpec{
		{Name: "node-a", Pods: []string{"a1", "a2"}},
		{Name: "node-b", Pods: []string{"b1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := probeNFTables(c.Nodes[0].NS.Path()); err != nil {
		t.Skipf("kernel test: nftables unavailable: %v", err)
	}
	return c
}

// probeNFTables creates and deletes a table in the namespace.
func probeNFTables(ns string) error {
	k, err := newNetlinkKernel(ns)
	if err != nil {
		return err
	}
	defer k.close()
	tx := &Transaction{Family: backends.IPv4, Table: "wasp-probe", ops: []op{{kind: opAddTable}, {kind: opDeleteTable}}}
	return k.apply(context.Background(), tx)
}

// nodeBackend returns a Backend programming node's namespace.
func nodeBackend(t *testing.T, n *netlab.Node, family backends.Family) *Backend {
	t.Helper()
	b, err := New(Opts{Family: family, NetNS: n.NS.Path()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// dumpTable logs the table as nft lists it, when nft is installed; for
// debugging only.
func dumpTable(t *testing.T, n *netlab.Node, family string) {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/nft"); err != nil {
		return
	}
	out, err := n.NS.Command(context.Background(), "/usr/sbin/nft", "list", "table", family, DefaultTable).CombinedOutput()
	t.Logf("nft list table %s %s: %v\n%s", family, DefaultTable, err, out)
}

func syncOK(t *testing.T, b *Backend, s *backends.State) {
	t.Helper()
	if _, err := b.Sync(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func TestKernelGoldenLoads(t *testing.T) {
	c := kernelCluster(t)
	for _, s := range []*backends.State{goldenState4(), goldenState6()} {
		b := nodeBackend(t, c.Nodes[0], s.Family)
		if _, err := b.Sync(context.Background(), s); err != nil {
			dumpTable(t, c.Nodes[0], ipKeyword(s.Family))
			t.Fatalf("%s: %v", s.Family.String(), err)
		}
		syncOK(t, b, s) // nothing to do
		if b.stats.lastOps != 0 {
			t.Errorf("%s: second sync of one state sent %d operations", s.Family.String(), b.stats.lastOps)
		}
	}
	if testing.Verbose() {
		dumpTable(t, c.Nodes[0], "ip")
	}
}

// TestKernelFailedTransaction: a transaction the kernel rejects part of
// returns an error and leaves nothing of itself, also when it spans many
// flushes of the netlink encoder.
func TestKernelFailedTransaction(t *testing.T) {
	ns := kernelBenchNS(t)
	k, err := newNetlinkKernel(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	ctx := context.Background()
	tx := &Transaction{Family: backends.IPv4, Table: DefaultTable}
	tx.add(op{kind: opAddTable})
	for i := range 1000 {
		tx.add(op{kind: opAddChain, chain: &Chain{Name: fmt.Sprintf("c%d", i)}})
	}
	tx.add(op{kind: opDeleteChain, name: "missing"})
	if err := k.apply(ctx, tx); err == nil {
		t.Fatal("a transaction deleting a missing chain succeeded")
	}
	inv, err := k.load(ctx, backends.IPv4, DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	if inv.exists {
		t.Errorf("the failed transaction left a table with %d chains", len(inv.chains))
	}
	tx.ops = tx.ops[:len(tx.ops)-1]
	if err := k.apply(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if inv, err = k.load(ctx, backends.IPv4, DefaultTable); err != nil || len(inv.chains) != 1000 {
		t.Fatalf("got %v chains, %v; want 1000", len(inv.chains), err)
	}
}
