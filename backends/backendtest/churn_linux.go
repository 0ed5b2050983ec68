//go:build linux

package backendtest

import (
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
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// RunChurn sends new connections through the backend while it syncs over
// and over, and fails on any one lost: a Sync must replace what it
// programmed atomically, never show a packet a half-written service.
// The cluster is RunTraffic's; the probed service port (TCP and UDP,
// IPv4) is ChurnProbed. The scenarios:
//
//   - Others: the probed service port never changes while the Syncs
//     add, change and delete up to 20 others (some without endpoints).
//   - Endpoints: every Sync changes the probed service port's endpoints
//     and their weights (1 to 20, so the number of buckets a weighted
//     backend keeps moves across its ranges), each endpoint answering
//     throughout.
//
// Each runs ChurnSyncs Syncs. Like RunTraffic it needs root and skips
// with the reason otherwise.
func RunChurn(t *testing.T, h Harness) {
	s := newSuite(t, &h, "Churn")
	s.run(t, "", "Others", s.churnOthers)
	s.run(t, "", "Endpoints", s.churnEndpoints)
}

// ChurnProbed is the service port RunChurn probes.
var ChurnProbed = netip.AddrPortFrom(ClusterIP(backends.IPv4, 10), ServicePort)

// ChurnSyncs is how many Syncs each churn scenario runs: WASP_CHURN_SYNCS,
// or 100.
func ChurnSyncs(t *testing.T) int {
	t.Helper()
	v := os.Getenv("WASP_CHURN_SYNCS")
	if v == "" {
		return 100
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("WASP_CHURN_SYNCS=%q: want a positive integer", v)
	}
	return n
}

// ChurnState returns a State of family IPv4 with the service port at
// ChurnProbed (TCP and UDP) with probed as its endpoints, and a random
// subset of n other service ports with random endpoints among pods, some
// with none, each with a NodePort.
func ChurnState(r *rand.Rand, n int, pods []netip.Addr, probed ...backends.Endpoint) *backends.State {
	stable := Service("probed", ChurnProbed.Addr(), Endpoints(probed...))
	svcs := []backends.Service{stable, UDPTwin(stable)}
	for i := range n {
		if r.IntN(3) == 0 {
			continue
		}
		var eps []backends.Endpoint
		for _, a := range pods {
			if r.IntN(2) == 0 {
				eps = append(eps, Endpoint(a, uint32(1+r.IntN(3))))
			}
		}
		svcs = append(svcs, Service(fmt.Sprintf("churn-%d", i), ClusterIP(backends.IPv4, 100+i),
			Endpoints(eps...), WithNodePort(NodePort(100+i))))
	}
	return State(backends.IPv4, svcs...)
}

func (s *suite) churnOthers(t *testing.T) {
	l := s.cluster(t)
	b := l.backend(t, backends.IPv4)
	pods := []netip.Addr{l.Pod("a1").IPv4, l.Pod("a2").IPv4, l.Pod("b1").IPv4}
	probed := []backends.Endpoint{Endpoint(pods[0], 1), Endpoint(pods[2], 1)}
	r := rand.New(rand.NewPCG(1, 2))
	syncOK(t, b, ChurnState(r, 20, pods, probed...))
	p := StartProber(t, l.Client.NS, l.node, ChurnProbed, 2)
	n := ChurnSyncs(t)
	for i := range n {
		if _, err := b.Sync(context.Background(), ChurnState(r, 20, pods, probed...)); err != nil {
			p.Stop()
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	p.Finish(t, fmt.Sprintf("%d syncs changed other service ports", n))
}

func (s *suite) churnEndpoints(t *testing.T) {
	l := s.cluster(t)
	b := l.backend(t, backends.IPv4)
	pods := []netip.Addr{l.Pod("a1").IPv4, l.Pod("a2").IPv4, l.Pod("b1").IPv4}
	r := rand.New(rand.NewPCG(3, 4))
	weights := []uint32{1, 1, 3, 9, 20}
	endpoints := func() []backends.Endpoint {
		var eps []backends.Endpoint
		for len(eps) == 0 {
			for _, a := range pods {
				if r.IntN(2) == 0 {
					eps = append(eps, Endpoint(a, weights[r.IntN(len(weights))]))
				}
			}
		}
		return eps
	}
	syncOK(t, b, ChurnState(r, 5, pods, endpoints()...))
	p := StartProber(t, l.Client.NS, l.node, ChurnProbed, 2)
	n := ChurnSyncs(t)
	for i := range n {
		if _, err := b.Sync(context.Background(), ChurnState(r, 5, pods, endpoints()...)); err != nil {
			p.Stop()
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	p.Finish(t, fmt.Sprintf("%d syncs changed its endpoints and weights", n))
}

// Prober opens new TCP connections (each answered once, then closed) and
// sends UDP requests (each from a new socket) to one address until
// stopped, and counts those lost. A request lost gets its 2 s (its SYN
// and one retransmission, as a client with a 2 s dial timeout); its error
// shows what the node's conntrack table holds toward the address.
type Prober struct {
	to   netip.AddrPort
	node *netlab.Node
	stop func()

	tcp, udp, tcpLost, udpLost atomic.Int64
	noPort                     atomic.Int64 // dials without a client port left
	mu                         sync.Mutex
	errs                       []string
}

// StartProber starts a Prober from ns to to, with workers goroutines per
// protocol, through node (whose conntrack table errors show). It is
// stopped at the end of the test if not before.
func StartProber(t *testing.T, ns *netlab.NS, node *netlab.Node, to netip.AddrPort, workers int) *Prober {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Prober{to: to, node: node}
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
							p.noPort.Add(1)
							time.Sleep(50 * time.Millisecond)
							continue
						}
						if err != nil {
							if ctx.Err() != nil {
								return nil
							}
							p.fail(network, err)
						}
						if network == "tcp" {
							p.tcp.Add(1)
						} else {
							p.udp.Add(1)
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
	p.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(p.stop)
	return p
}

// Stop ends the probe and waits for its workers.
func (p *Prober) Stop() { p.stop() }

// Lost is how many requests were lost so far.
func (p *Prober) Lost() int64 { return p.tcpLost.Load() + p.udpLost.Load() }

// Finish lets the requests in flight end, stops the probe, logs its
// counts and fails t if a request was lost while what happened.
func (p *Prober) Finish(t *testing.T, what string) {
	t.Helper()
	time.Sleep(askWait + 500*time.Millisecond)
	p.Stop()
	t.Logf("%s: %s", what, p)
	for _, e := range p.errs {
		t.Log(e)
	}
	if p.Lost() > 0 {
		t.Errorf("requests to %s lost while %s: %s", p.to, what, p)
	}
}

func (p *Prober) String() string {
	return fmt.Sprintf("tcp %d lost of %d, udp %d lost of %d (%d dials found no client port)",
		p.tcpLost.Load(), p.tcp.Load(), p.udpLost.Load(), p.udp.Load(), p.noPort.Load())
}

// fail counts a lost request, and keeps the first errors with the entries
// of the node's conntrack table toward the address that never saw a
// reply: whether the lost request was translated (and to what).
func (p *Prober) fail(network string, err error) {
	if network == "tcp" {
		p.tcpLost.Add(1)
	} else {
		p.udpLost.Add(1)
	}
	at := time.Now().Format("15:04:05.000")
	p.mu.Lock()
	keep := len(p.errs) < 10
	p.mu.Unlock()
	if !keep {
		return
	}
	ct := "conntrack(8) not installed"
	if _, lerr := exec.LookPath("conntrack"); lerr == nil {
		out, cerr := p.node.NS.Command(context.Background(), "conntrack", "-L", "-p", network,
			"-d", p.to.Addr().String(), "--dport", strconv.Itoa(int(p.to.Port()))).Output()
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
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, fmt.Sprintf("%s %s: %v; the node's conntrack entries toward it: %s", at, network, err, ct))
}

// askOnce sends one echo request over network to to from a new socket.
func askOnce(network string, to netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(context.Background(), askWait)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, network, to.String())
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = netlab.Request(ctx, c)
	return err
}
