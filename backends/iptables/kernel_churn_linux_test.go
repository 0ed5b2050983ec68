//go:build linux

package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	bt "github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// churnSyncs is how many Syncs TestKernelSyncKeepsNewConnections runs per
// variant: WASP_CHURN_SYNCS, or 100.
func churnSyncs(t *testing.T) int {
	t.Helper()
	return envInt(t, "WASP_CHURN_SYNCS", 100)
}

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
// others churn.
var churnStable = netip.MustParseAddrPort("10.96.0.10:80")

// churnState returns a State with the stable service port (TCP and UDP,
// endpoints a1 and b1) and a random subset of n other service ports with
// random endpoints, some with none.
func churnState(c *netlab.Cluster, r *rand.Rand, n int) *backends.State {
	a1, b1, a2 := c.Pod("a1"), c.Pod("b1"), c.Pod("a2")
	stable := bt.Service("stable", churnStable.Addr(), bt.Endpoints(bt.Endpoint(a1.IPv4, 1), bt.Endpoint(b1.IPv4, 1)))
	svcs := []backends.Service{stable, bt.UDPTwin(stable)}
	pool := []netip.Addr{a1.IPv4, a2.IPv4, b1.IPv4}
	for i := range n {
		if r.IntN(3) == 0 {
			continue
		}
		var eps []backends.Endpoint
		for _, a := range pool {
			if r.IntN(2) == 0 {
				eps = append(eps, bt.Endpoint(a, uint32(1+r.IntN(3))))
			}
		}
		ip := netip.AddrFrom4([4]byte{10, 96, 1, byte(i + 1)})
		svcs = append(svcs, bt.Service(fmt.Sprintf("churn-%d", i), ip, bt.Endpoints(eps...), bt.WithNodePort(bt.NodePort(i))))
	}
	return clusterState(c, svcs...)
}

// connStats counts the requests of a prober and those that failed.
type connStats struct {
	tcp, udp, tcpLost, udpLost atomic.Int64
	noPort                     atomic.Int64 // dials without a client port left
	mu                         sync.Mutex
	errs                       []string
}

// fail counts a lost request to to, and keeps the first errors with the
// entries of node's conntrack table toward to that never saw a reply:
// whether the lost request was translated (and to what).
func (s *connStats) fail(network string, to netip.AddrPort, err error, node *netlab.Node) {
	if network == "tcp" {
		s.tcpLost.Add(1)
	} else {
		s.udpLost.Add(1)
	}
	at := time.Now().Format("15:04:05.000")
	s.mu.Lock()
	keep := len(s.errs) < 10
	s.mu.Unlock()
	if !keep {
		return
	}
	ct := "conntrack(8) not installed"
	if _, lerr := exec.LookPath("conntrack"); lerr == nil {
		out, cerr := node.NS.Command(context.Background(), "conntrack", "-L", "-p", network,
			"-d", to.Addr().String(), "--dport", strconv.Itoa(int(to.Port()))).Output()
		var unreplied []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "UNREPLIED") {
				unreplied = append(unreplied, strings.TrimSpace(l))
			}
		}
		ct = fmt.Sprintf("%d unreplied: %s", len(unreplied), strings.Join(unreplied, "; "))
		if cerr != nil {
			ct = cerr.Error()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf("%s %s: %v; the node's conntrack entries toward it: %s", at, network, err, ct))
}

func (s *connStats) String() string {
	return fmt.Sprintf("tcp %d lost of %d, udp %d lost of %d (%d dials found no client port)",
		s.tcpLost.Load(), s.tcp.Load(), s.udpLost.Load(), s.udp.Load(), s.noPort.Load())
}

// probe opens new TCP connections (each answered once, then closed) and
// sends UDP requests (each from a new socket) from ns to to, with
// workers of each, until stopped. A request lost gets its 2 s (its SYN
// and one retransmission, as a client with a 2 s dial timeout); the
// error of a lost one shows what node's conntrack table holds of it.
func probe(t *testing.T, ns *netlab.NS, node *netlab.Node, to netip.AddrPort, workers int) *prober {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st := &connStats{}
	var wg sync.WaitGroup
	for _, network := range []string{"tcp", "udp"} {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// One locked thread in the namespace for the whole loop:
				// sockets are made where the dialing thread is.
				err := ns.Do(func() error {
					for ctx.Err() == nil {
						err := askOnce(network, to)
						if errors.Is(err, syscall.EADDRNOTAVAIL) {
							// The client has no port left (each closed
							// connection keeps one a minute): not a
							// request.
							st.noPort.Add(1)
							time.Sleep(50 * time.Millisecond)
							continue
						}
						if err != nil {
							if ctx.Err() != nil {
								return nil
							}
							st.fail(network, to, err, node)
						}
						if network == "tcp" {
							st.tcp.Add(1)
						} else {
							st.udp.Add(1)
						}
					}
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
	}
	return &prober{connStats: st, to: to, stop: func() { cancel(); wg.Wait() }}
}

// prober is a running probe.
type prober struct {
	*connStats
	to   netip.AddrPort
	stop func() // ends the probe and waits for its workers
}

// finish lets the requests in flight end, stops the probe, logs its
// counts and fails t if a request was lost while what happened.
func (p *prober) finish(t *testing.T, v xtables.Variant, what string) {
	t.Helper()
	time.Sleep(2500 * time.Millisecond)
	p.stop()
	t.Logf("%s: %s: %s", v, what, p)
	for _, e := range p.errs {
		t.Log(e)
	}
	if p.tcpLost.Load()+p.udpLost.Load() > 0 {
		t.Errorf("%s: requests to %s lost while %s: %s", v, p.to, what, p)
	}
}

// askOnce sends one echo request over network to to from a new socket.
func askOnce(network string, to netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, network, to.String())
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = netlab.Request(ctx, c)
	return err
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
			if err := b.Sync(context.Background(), churnState(c, r, 20)); err != nil {
				st.stop()
				t.Fatalf("sync %d: %v", i, err)
			}
		}
		st.finish(t, v, fmt.Sprintf("%d syncs changed other service ports (%d full)", syncs, full))
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
				st.stop()
				t.Fatalf("restore %d: %v: %s", i, err, out)
			}
		}
		st.finish(t, v, fmt.Sprintf("%s rewrote the same rules %d times", bin, n))
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
				if err := b6.Sync(context.Background(), bt.To6(churnState(c, r6, 20))); err != nil {
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
			if err := b.Sync(context.Background(), state()); err != nil {
				st.stop()
				t.Fatalf("sync %d: %v", i, err)
			}
		}
		if err := <-done6; err != nil {
			t.Error(err)
		}
		st.finish(t, v, fmt.Sprintf("%d syncs changed its endpoints", syncs))
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
		st.finish(t, v, "nothing synced for "+secs+" s")
	})
}
