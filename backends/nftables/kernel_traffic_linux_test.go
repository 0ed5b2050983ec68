//go:build linux

package nftables

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	nft "github.com/google/nftables"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// podEP is the endpoint of pod p's echo server in family.
func podEP(p *netlab.Pod, family backends.Family, w uint32) backends.Endpoint {
	if family == backends.IPv6 {
		return backendtest.Endpoint(p.IPv6, w)
	}
	return backendtest.Endpoint(p.IPv4, w)
}

// clusterState returns a State of family on backendtest's plan with the
// given service ports.
func clusterState(family backends.Family, svcs ...backends.Service) *backends.State {
	return backendtest.State(family, svcs...)
}

var (
	cip10 = netip.MustParseAddrPort("10.96.0.10:80")
	cip11 = netip.MustParseAddrPort("10.96.0.11:80")
)

// TestKernelTraffic runs backendtest's traffic scenarios: real packets
// through a table in node-a of a netlab cluster.
func TestKernelTraffic(t *testing.T) {
	h := kernelHarness()
	h.Checks = map[string]func(t *testing.T, e *backendtest.Env){
		// The affinity set of the endpoint that answered before the
		// restart still holds the client, and only it.
		"Traffic/Restart": func(t *testing.T, e *backendtest.Env) {
			elems := affinityElements(t, e.NetNS, &e.State.Services[0], e.Answered)
			if len(elems) != 1 || elems[0] != e.Client {
				t.Errorf("affinity set of %s holds %v, want the client %s", e.Answered.Addr, elems, e.Client)
			}
		},
	}
	backendtest.RunTraffic(t, h)
}

// affinityElements lists the affinity set of endpoint ep of svc in the
// IPv4 table of netns, through netlink (not nft).
func affinityElements(t *testing.T, netns string, svc *backends.Service, ep backends.Endpoint) []netip.Addr {
	t.Helper()
	i := slices.IndexFunc(svc.Cluster, func(e backends.Endpoint) bool { return e == ep })
	if i < 0 {
		t.Fatalf("%s is no endpoint of %s", ep.Addr, svc.Key)
	}
	set := affinitySetPrefix + endpointBase(svc, &svc.Cluster[i])
	k, err := newNetlinkKernel(netns)
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	conn, err := k.(*netlinkKernel).conn(0)
	if err != nil {
		t.Fatal(err)
	}
	table := &nft.Table{Name: DefaultTable, Family: nft.TableFamilyIPv4}
	els, err := conn.GetSetElements(&nft.Set{Table: table, Name: set, KeyType: nft.TypeIPAddr})
	if err != nil {
		t.Fatalf("set %q: %v", set, err)
	}
	var out []netip.Addr
	for _, e := range els {
		a, _ := netip.AddrFromSlice(e.Key)
		out = append(out, a)
	}
	return out
}

// TestKernelStaleChainsDeletedAtOnce: removing a service deletes its
// chains in the transaction that deletes the map elements pointing to
// them, which kernels since 6.2 accept (upstream defers the delete for
// older ones).
func TestKernelStaleChainsDeletedAtOnce(t *testing.T) {
	c := kernelCluster(t)
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	web := svc("web", "10.96.0.10", func(s *backends.Service) {
		s.NodePort, s.AffinityTimeout = 30080, 60
		s.ExternalIPs = []netip.Addr{ip("192.0.2.10")}
		s.Cluster = []backends.Endpoint{podEP(c.Pod("a1"), backends.IPv4, 1), podEP(c.Pod("b1"), backends.IPv4, 1)}
	})
	syncOK(t, b, clusterState(backends.IPv4, web))
	syncOK(t, b, clusterState(backends.IPv4))
	if b.stats.rebuilds != 1 || b.stats.lastOps == 0 {
		t.Fatalf("stats %+v", b.stats)
	}
	inv, err := b.k.load(context.Background(), backends.IPv4, DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	for name := range inv.chains {
		if len(name) > len("service-") && name[:len("service-")] == "service-" && name != "service-endpoints-check" {
			t.Errorf("stale chain %q left", name)
		}
	}
	for name := range inv.sets {
		if len(name) > len(affinitySetPrefix) && name[:len(affinitySetPrefix)] == affinitySetPrefix {
			t.Errorf("stale set %q left", name)
		}
	}
}

// TestKernelLarge programs 3000 service ports with 5 endpoints each (a
// transaction of about 40k messages, past the default socket buffers),
// then changes one.
func TestKernelLarge(t *testing.T) {
	c := kernelCluster(t)
	b := nodeBackend(t, c.Nodes[0], backends.IPv4)
	s := largeState(3000, 5)
	start := time.Now()
	syncOK(t, b, s)
	full := time.Since(start)
	s.Services[1234].Cluster = s.Services[1234].Cluster[:2]
	start = time.Now()
	syncOK(t, b, s)
	t.Logf("full sync %v (%d operations before), one-service change %v (%d operations)", full, 0, time.Since(start), b.stats.lastOps)
	if b.stats.rebuilds != 1 {
		t.Errorf("stats %+v", b.stats)
	}
}

// TestKernelTransitions runs backendtest's transition suite on the
// kernel: every incremental transaction is accepted, and the table read
// back equals a fresh one's.
func TestKernelTransitions(t *testing.T) { backendtest.RunTransitions(t, kernelHarness()) }

// TestKernelIdempotence runs backendtest's idempotence suite on the
// kernel: the golden and transition states load, and a second Sync sends
// no operation.
func TestKernelIdempotence(t *testing.T) { backendtest.RunIdempotence(t, kernelHarness()) }

// TestKernelLifecycle runs backendtest's lifecycle suite on the kernel:
// Close twice, Sync and Cleanup after Close, Cleanup twice.
func TestKernelLifecycle(t *testing.T) { backendtest.RunLifecycle(t, kernelHarness()) }

// kernelHarness is harness on the kernel of a throwaway namespace.
func kernelHarness() backendtest.Harness {
	h := harness()
	h.Kernel, h.Probe = true, probeNFTables
	return h
}

// TestKernelChurn runs backendtest's churn suite on the kernel: no new
// connection is lost while Syncs change other service ports or the
// probed one's endpoints and weights.
func TestKernelChurn(t *testing.T) {
	h := kernelHarness()
	if os.Getenv(tornEnv) != "" {
		// The defect TestKernelChurnCatchesTornSyncs plants: every Sync
		// removes the table first, in a transaction of its own.
		newBackend := h.New
		h.New = func(t *testing.T, family backends.Family, netns string) backends.Backend {
			return torn{newBackend(t, family, netns).(*Backend)}
		}
	}
	backendtest.RunChurn(t, h)
}

const tornEnv = "WASP_TEST_TORN_SYNCS"

// torn is a Backend whose Syncs are not atomic.
type torn struct{ *Backend }

func (b torn) Sync(ctx context.Context, s *backends.State) (backends.SyncResult, error) {
	if err := b.Backend.Cleanup(ctx); err != nil {
		return backends.SyncResult{}, err
	}
	return b.Backend.Sync(ctx, s)
}

// TestKernelChurnCatchesTornSyncs: the churn suite fails a backend whose
// Syncs let packets see the dataplane half-written. It runs the suite in
// a child process, whose failure must not fail this test.
func TestKernelChurnCatchesTornSyncs(t *testing.T) {
	if os.Getenv(tornEnv) != "" {
		t.Skip("in the child process")
	}
	if testing.Short() {
		t.Skip("kernel test: skipped in -short mode")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelChurn$/^Endpoints$", "-test.v")
	cmd.Env = append(os.Environ(), tornEnv+"=1", "WASP_CHURN_SYNCS=100")
	out, err := cmd.CombinedOutput()
	if err == nil && strings.Contains(string(out), "--- SKIP") {
		t.Skipf("the churn suite skipped:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "lost while") {
		t.Errorf("the churn suite passed or failed otherwise (%v); want lost requests:\n%.3000s", err, out)
	}
}
