//go:build linux

package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/wasp-proxy/wasp/internal/netlab"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// TestChurn creates, changes and deletes hundreds of Services at a
// bounded rate for WASP_CHURN_DURATION (default 45 s; half of WASP_SOAK
// under make soak), while a canary Service answers without pause and a few
// UDP flows keep their sockets. At the end every live Service must answer
// only from its current endpoints and every deleted one not at all, each
// UDP flow must have followed its endpoints; once everything is deleted
// the kernel must hold exactly what it held before the churn (no leaked
// chain, set, map or element), the conntrack entries toward the churned
// Services must expire, and wasp's RSS must be about what it was after a
// warm-up. docs/reliability.md reports the figures it logs.
func TestChurn(t *testing.T) {
	soak := soakDuration(t)
	def := 45 * time.Second
	if soak > 0 {
		def = soak / 2
	}
	duration := envDuration(t, "WASP_CHURN_DURATION", def, maxSoak)
	rate := envInt(t, "WASP_CHURN_RATE", 20, 1000)
	pool := envInt(t, "WASP_CHURN_SERVICES", 200, 5000)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute+2*duration)
	defer cancel()
	env := fw.Setup(ctx, t)
	bulk, err := env.BulkClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("churn for %s at %d operations a second over up to %d Services, per dataplane", duration, rate, pool)
	for _, dp := range fw.Dataplanes(t) {
		if !t.Run(dp.Name, func(t *testing.T) {
			env.UseDataplane(t, dp)
			s := &suite{env: env, ctx: ctx, prefix: "churn-" + dp.Name}
			c := &churn{faults: &faults{suite: s, bulk: bulk, rng: newRand(t)},
				live: map[string]*churnService{}, used: map[netip.Addr]bool{}}
			runChurn(t, c, duration, rate, pool)
		}) && ctx.Err() != nil {
			return
		}
	}
}

// runChurn is TestChurn on the environment's current dataplane.
func runChurn(t *testing.T, c *churn, duration time.Duration, rate, pool int) {
	s, env := c.suite, c.env

	// Conntrack entries of closed connections live 120 s (TIME_WAIT), of
	// UDP flows 30 s, and of unanswered SYNs 120 s (in iptables mode, as
	// upstream's, nothing rejects a deleted Service's address: the probes
	// that it is silent go on unanswered); in the node's namespace (these
	// timeouts are per namespace) they live 5 s, so that the end can wait
	// for them.
	for _, k := range []string{"nf_conntrack_tcp_timeout_time_wait", "nf_conntrack_tcp_timeout_syn_sent", "nf_conntrack_udp_timeout", "nf_conntrack_udp_timeout_stream"} {
		if err := env.ProxyNS().Sysctl("net/netfilter/"+k, "5"); err != nil {
			t.Fatal(err)
		}
	}

	w := env.StartWasp(t)
	ns := s.namespace(t)
	c.ns = ns
	canary := &target{name: "canary", network: "tcp", pods: []string{"a-1", "b-1"}}
	createTargets(t, s, ns, []*target{canary})
	waitFullSync(t, w, converge)
	baseline := readRulesetWhenStill(t, s)
	canary.tr = startTrafficTo(s, "tcp", canary.ip, 80, trafficPause)

	// A few UDP Services whose flows keep one socket each; the churn
	// moves their endpoints too.
	var flows []*udpFlow
	for i := range 4 {
		cs := c.create(t, fmt.Sprintf("flow-%d", i), "udp", []string{fw.PodsA[i%3]}, false, false)
		s.waitFor(t, s.client(), "udp", cs.ip, 80, cs.pods...)
		flows = append(flows, startUDPFlow(t, s, cs))
	}

	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	var warm, peakRSS int64
	var peak *fw.Ruleset
	lastSample := start
	for time.Since(start) < duration {
		<-tick.C
		c.step(t, pool)
		if time.Since(lastSample) >= 5*time.Second {
			lastSample = time.Now()
			rss, err := w.RSS()
			if err != nil {
				t.Fatal(err)
			}
			peakRSS = max(peakRSS, rss)
			if warm == 0 && time.Since(start) >= duration/4 {
				warm = rss
			}
			if r, err := env.ReadRuleset(); err == nil && (peak == nil || r.Rules+r.Elements > peak.Rules+peak.Elements) {
				peak = r
			}
			expectNoCrash(t, w)
		}
	}
	tick.Stop()
	if warm == 0 {
		t.Fatalf("churn of %s too short to sample RSS after a warm-up: want at least 20 s", duration)
	}
	churned, err := w.RSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("churn: %d operations in %s (%d creates, %d endpoint changes, %d Service changes, %d deletes); %d Services live, %d deleted",
		c.ops, time.Since(start).Round(time.Second), c.counts["create"], c.counts["endpoints"], c.counts["service"], c.counts["delete"], len(c.live), len(c.deleted))

	readRulesetWhenStill(t, s)
	c.verify(t)
	for _, fl := range flows {
		fl.verify(t, c)
	}

	// Delete everything the churn created.
	var names []string
	for name := range c.live {
		names = append(names, name)
	}
	if err := parallel(len(names), func(i int) error { return c.deleteService(c.live[names[i]].svc) }); err != nil {
		t.Fatal(err)
	}
	var after *fw.Ruleset
	fw.Eventually(t, converge, func() error {
		if after, err = env.ReadRuleset(); err != nil {
			return err
		}
		if d := after.Diff(baseline, 10); d != "" {
			return fmt.Errorf("once every churned Service is deleted the kernel differs from before the churn:\n  %s", d)
		}
		return nil
	})
	entries := func() (int, error) {
		ct, err := fw.Conntrack(env.ProxyNS())
		n := 0
		for _, e := range ct {
			if c.used[e.OrigDst.Addr()] {
				n++
			}
		}
		return n, err
	}
	ctAfter, err := entries()
	if err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	fw.Eventually(t, converge, func() error {
		n, err := entries()
		if err == nil && n > 0 {
			err = fmt.Errorf("%d conntrack entries toward deleted Services remain", n)
		}
		return err
	})
	ctGone := time.Since(deleted)
	time.Sleep(time.Second)
	end, err := w.RSS()
	if err != nil {
		t.Fatal(err)
	}
	total := stopTargets(t, []*target{canary}, nil)
	expectNoCrash(t, w)

	const mib = 1 << 20
	t.Logf("kernel objects: before the churn %s; at the peak %s; after deleting everything %s (the same listing as before)",
		baseline.Counts(), peak.Counts(), after.Counts())
	t.Logf("conntrack entries toward churned Services: %d right after deleting them, 0 after %.1f s (timeouts 5 s)", ctAfter, ctGone.Seconds())
	t.Logf("wasp RSS: %.1f MiB after the warm-up (%s), %.1f MiB at most during the churn (sampled every 5 s), %.1f MiB at its end, %.1f MiB after deleting everything",
		float64(warm)/mib, duration/4, float64(peakRSS)/mib, float64(churned)/mib, float64(end)/mib)
	t.Logf("canary: %d requests, none failed", total)
	// A generous bound: flat memory, not a measurement of it.
	limit := warm + max(warm/2, 64*mib)
	for _, m := range []struct {
		when string
		rss  int64
	}{{"at the end of the churn", churned}, {"after deleting everything", end}} {
		if m.rss > limit {
			t.Fatalf("wasp's RSS grew from %.1f MiB after the warm-up to %.1f MiB %s (limit %.1f MiB)",
				float64(warm)/mib, float64(m.rss)/mib, m.when, float64(limit)/mib)
		}
	}
	w.Stop()
}

// churn is the state of TestChurn's random operations.
type churn struct {
	*faults
	ns      string
	live    map[string]*churnService
	names   []string // of live, for picking at random
	deleted []netip.Addr
	used    map[netip.Addr]bool // every ClusterIP a churned Service had
	next    int
	ops     int
	counts  map[string]int
}

// churnService is a Service the churn created, as it is now.
type churnService struct {
	svc      *v1.Service
	network  string // tcp or udp
	pods     []string
	ip       netip.Addr
	affinity bool
	flow     bool // a udpFlow's: never deleted by the churn
}

// randomPods returns 0 to 3 distinct pods of the lab (none one time in
// ten).
func (c *churn) randomPods() []string {
	all := append(slices.Clone(fw.PodsA), fw.PodsB...)
	if c.rng.IntN(10) == 0 {
		return nil
	}
	c.rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:1+c.rng.IntN(3)]
}

// step does one random operation: it creates a Service while fewer than
// pool are live (always while fewer than half), else changes a Service's
// endpoints, toggles its affinity, or deletes it.
func (c *churn) step(t *testing.T, pool int) {
	t.Helper()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.ops++
	r := c.rng.IntN(100)
	switch {
	case len(c.live) < pool/2 || (len(c.live) < pool && r < 35):
		network := "tcp"
		if c.rng.IntN(5) == 0 {
			network = "udp"
		}
		c.next++
		c.create(t, fmt.Sprintf("churn-%d", c.next), network, c.randomPods(), c.rng.IntN(5) == 0, c.rng.IntN(5) == 0)
		c.counts["create"]++
	case r < 70:
		cs := c.pick(true)
		cs.pods = c.randomPods()
		if err := c.putSlice(cs.svc, 1, cs.pods); err != nil {
			t.Fatal(err)
		}
		c.counts["endpoints"]++
	case r < 80:
		cs := c.pick(false)
		if cs == nil {
			return
		}
		cur, err := c.bulk.CoreV1().Services(c.ns).Get(c.ctx, cs.svc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs.affinity = !cs.affinity
		cur.Spec.SessionAffinity, cur.Spec.SessionAffinityConfig = v1.ServiceAffinityNone, nil
		if cs.affinity {
			cur.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			cur.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(60))}}
		}
		if cs.svc, err = c.bulk.CoreV1().Services(c.ns).Update(c.ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		c.counts["service"]++
	default:
		cs := c.pick(false)
		if cs == nil {
			return
		}
		if err := c.deleteService(cs.svc); err != nil {
			t.Fatal(err)
		}
		delete(c.live, cs.svc.Name)
		i := slices.Index(c.names, cs.svc.Name)
		c.names = slices.Delete(c.names, i, i+1)
		c.deleted = append(c.deleted, cs.ip)
		c.counts["delete"]++
	}
}

// pick returns a random live Service; flows only if withFlows. It returns
// nil if there is none.
func (c *churn) pick(withFlows bool) *churnService {
	for range 20 {
		if len(c.names) == 0 {
			return nil
		}
		cs := c.live[c.names[c.rng.IntN(len(c.names))]]
		if withFlows || !cs.flow {
			return cs
		}
	}
	return nil
}

// create creates a Service and its endpoints and records it.
func (c *churn) create(t *testing.T, name, network string, pods []string, nodePort, affinity bool) *churnService {
	t.Helper()
	spec := fw.ServiceSpec{Name: name, Namespace: c.ns, Protocol: v1.Protocol(strings.ToUpper(network))}
	if nodePort {
		spec.Type = v1.ServiceTypeNodePort
	}
	if affinity {
		spec.Affinity = 60
	}
	svc, err := c.bulk.CoreV1().Services(c.ns).Create(c.ctx, spec.Object(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", name, err)
	}
	if err := c.putSlice(svc, 0, pods); err != nil {
		t.Fatal(err)
	}
	cs := &churnService{svc: svc, network: network, pods: pods, ip: fw.ClusterIP(t, svc, v1.IPv4Protocol), affinity: affinity,
		flow: strings.HasPrefix(name, "flow-")}
	c.live[name] = cs
	c.names = append(c.names, name)
	c.used[cs.ip] = true
	return cs
}

// verify fails t unless every live Service answers only from its
// endpoints (or rejects, with none), and no deleted one is in the kernel
// or answers, within converge (the last operations may still be syncing).
func (c *churn) verify(t *testing.T) {
	t.Helper()
	var report string
	fw.Eventually(t, converge, func() error {
		var err error
		report, err = c.check()
		return err
	})
	t.Log(report)
}

// check is one round of verify; it returns what it checked.
func (c *churn) check() (string, error) {
	var services []*churnService
	for _, cs := range c.live {
		services = append(services, cs)
	}
	requests := 0
	var mu sync.Mutex
	err := parallel(len(services), func(i int) error {
		cs := services[i]
		n := max(2, 2*len(cs.pods))
		mu.Lock()
		requests += n
		mu.Unlock()
		for range n {
			id, err := fw.Ask(c.client(), cs.network, cs.ip, 80, ask)
			switch {
			case len(cs.pods) == 0 && fw.IsRefused(err):
			case len(cs.pods) == 0:
				return fmt.Errorf("%s %s (%s, no endpoints): %q, %v; want connection refused", cs.network, cs.svc.Name, cs.ip, id, err)
			case err != nil:
				return fmt.Errorf("%s %s (%s): %w", cs.network, cs.svc.Name, cs.ip, err)
			case !slices.Contains(cs.pods, id):
				return fmt.Errorf("%s %s (%s) answered by %q, want one of %v", cs.network, cs.svc.Name, cs.ip, id, cs.pods)
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}

	// Deleted Services: nothing in the kernel keyed by their address
	// (unless the apiserver gave it to a live Service since), and a
	// sample does not answer.
	r, err := c.env.ReadRuleset()
	if err != nil {
		return "", err
	}
	liveIPs := map[netip.Addr]bool{}
	for _, cs := range c.live {
		liveIPs[cs.ip] = true
	}
	var gone []netip.Addr
	for _, ip := range c.deleted {
		if liveIPs[ip] {
			continue
		}
		gone = append(gone, ip)
		// nftables: an element keyed by the address; iptables: a rule
		// matching it as destination.
		key := "key=" + hex.EncodeToString(ip.AsSlice())
		dst := " -d " + ip.String() + "/"
		for _, l := range r.Lines {
			if strings.Contains(l, " element ") && strings.Contains(l, key) || strings.Contains(l, dst) {
				return "", fmt.Errorf("deleted Service %s is still in the kernel: %s", ip, l)
			}
		}
	}
	sample := gone[:min(len(gone), 16)]
	err = parallel(len(sample), func(i int) error {
		if id, err := fw.Ask(c.client(), "tcp", sample[i], 80, dropWait); err == nil {
			return fmt.Errorf("deleted Service %s answered (%q)", sample[i], id)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("after the churn: %d live Services answered %d requests, each from its current endpoints; %d deleted Services absent from the kernel, %d of them asked and silent",
		len(services), requests, len(gone), len(sample)), nil
}

// udpFlow is one UDP socket from the client to a churned Service, with a
// request every 100 ms until verified.
type udpFlow struct {
	*flow
	cs *churnService
}

func startUDPFlow(t *testing.T, s *suite, cs *churnService) *udpFlow {
	t.Helper()
	conn, err := s.client().Dial(s.ctx, "udp", netip.AddrPortFrom(cs.ip, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &udpFlow{flow: startFlow(s, conn, 100*time.Millisecond), cs: cs}
}

// verify stops the flow's requests and fails t unless its socket is now
// answered only by the Service's current endpoints: stale conntrack
// entries were deleted as its endpoints changed.
func (fl *udpFlow) verify(t *testing.T, c *churn) {
	t.Helper()
	requests, answers, errs := fl.stop()
	want := fl.cs.pods
	req := func() (string, error) {
		ctx, cancel := context.WithTimeout(c.ctx, ask)
		defer cancel()
		return netlab.Request(ctx, fl.conn)
	}
	if len(want) == 0 {
		t.Logf("UDP flow %s: %d requests, %d unanswered, answers %v; it has no endpoint now", fl.cs.svc.Name, requests, len(errs), answers)
		return
	}
	fw.Eventually(t, converge, func() error {
		id, err := req()
		if err != nil || !slices.Contains(want, id) {
			return fmt.Errorf("UDP flow %s answered by %q, %v; want one of %v", fl.cs.svc.Name, id, err, want)
		}
		return nil
	})
	for range 5 {
		if id, err := req(); err != nil || !slices.Contains(want, id) {
			t.Fatalf("UDP flow %s answered by %q, %v; want one of %v", fl.cs.svc.Name, id, err, want)
		}
	}
	t.Logf("UDP flow %s: %d requests on one socket, %d unanswered, answers %v; answered only by its endpoints now, %v",
		fl.cs.svc.Name, requests, len(errs), answers, want)
}
