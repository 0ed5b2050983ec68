//go:build linux

package nftables

import (
	"context"
	"errors"
	"testing"

	nft "github.com/google/nftables"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// probeNS returns a fresh network namespace for the probes, or skips the
// test with the reason it cannot have one.
func probeNS(t *testing.T) *netlab.NS {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel test: skipped in -short mode")
	}
	ns, err := netlab.NewForTest(t).AddNS("probe")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestKernelProbes: every probe succeeds on the test machine's kernel, in
// a namespace, and leaves no table behind.
func TestKernelProbes(t *testing.T) {
	ns := probeNS(t)
	_, ctx := ktesting.NewTestContext(t)
	got := Probes(ctx, ns.Path())
	if len(got) != 5 {
		t.Errorf("%d probes, want 5: %+v", len(got), got)
	}
	for _, p := range got {
		if p.Outcome != backends.ProbeSupported {
			t.Errorf("%s: %s: %s", p.Name, p.Outcome, p.Reason)
		}
	}
	if scratchLeft(t, ns) {
		t.Error("the scratch table is left behind")
	}
}

// TestKernelProbeDeleteReferencedChain: the kernel refuses to delete a
// chain a map element still jumps to, so the stale-chain probe's success
// means the element's deletion released it within the transaction.
func TestKernelProbeDeleteReferencedChain(t *testing.T) {
	ns := probeNS(t)
	k := nftProber{netns: ns.Path()}
	if err := k.deleteReferencedChain(false); !errors.Is(err, unix.EBUSY) {
		t.Errorf("deleting a referenced chain: %v, want EBUSY", err)
	}
	if err := k.deleteReferencedChain(true); err != nil {
		t.Errorf("deleting a chain with its last reference: %v", err)
	}
	if scratchLeft(t, ns) {
		t.Error("the scratch table is left behind")
	}
}

// TestKernelProbeScratchTableLeftOver: a scratch table left by a probe
// that died is replaced, not an obstacle.
func TestKernelProbeScratchTableLeftOver(t *testing.T) {
	ns := probeNS(t)
	k := nftProber{netns: ns.Path()}
	if err := k.tx(true, k.numgen); err != nil {
		t.Fatal(err)
	}
	if !scratchLeft(t, ns) {
		t.Fatal("no leftover scratch table to start from")
	}
	if o, reason := k.outcome(k.concatMap)(context.Background()); o != backends.ProbeSupported {
		t.Errorf("with a leftover table: %s: %s", o, reason)
	}
	if scratchLeft(t, ns) {
		t.Error("the scratch table is left behind")
	}
}

// TestKernelProbesCanceled: a canceled context makes every probe
// inconclusive, without asking the kernel.
func TestKernelProbesCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range Probes(ctx, "/nonexistent") {
		if p.Outcome != backends.ProbeInconclusive {
			t.Errorf("%s: %s: %s", p.Name, p.Outcome, p.Reason)
		}
	}
}

// scratchLeft reports whether the probes' scratch table exists in ns.
func scratchLeft(t *testing.T, ns *netlab.NS) bool {
	t.Helper()
	var err error
	k := nftProber{netns: ns.Path()}
	if serr := k.send(func(c *nft.Conn) error {
		_, err = c.ListTableOfFamily(probeTable, nft.TableFamilyIPv4)
		return nil
	}); serr != nil {
		t.Fatal(serr)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		t.Fatal(err)
	}
	return err == nil
}
