//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	fw "github.com/wasp-proxy/wasp/test/framework"
)

// maxSoak bounds WASP_SOAK: a soak run must end.
const maxSoak = 2 * time.Hour

// trafficPause is the pause between two requests of the fault and churn
// scenarios' traffic: at most about 300 new connections a second to one
// address, so that the client's TIME_WAIT ports (28,000 of them for 60 s)
// last for any duration.
const trafficPause = 3 * time.Millisecond

// soakDuration is WASP_SOAK (a Go duration, at most maxSoak): how long
// make soak runs the fault and churn tests. Unset, the tests run their
// short CI version.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	return envDuration(t, "WASP_SOAK", 0, maxSoak)
}

// envDuration reads a duration from the environment variable name, def
// when unset; a value that does not parse or is outside (0, max] fails t.
func envDuration(t *testing.T, name string, def, max time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > max {
		t.Fatalf("%s=%q: want a Go duration in (0, %s], such as 10m", name, v, max)
	}
	return d
}

// envInt reads a count from the environment variable name, def when
// unset; a value that is not an integer in [1, max] fails t.
func envInt(t *testing.T, name string, def, max int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		t.Fatalf("%s=%q: want an integer in [1, %d]", name, v, max)
	}
	return n
}

// newRand returns the random source of the kill points and churn
// operations, seeded from WASP_FAULT_SEED or else the clock, and logs the
// seed so that a failing run can be repeated.
func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("WASP_FAULT_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("WASP_FAULT_SEED=%q: want an unsigned integer", v)
		}
	}
	t.Logf("random choices from seed %d (WASP_FAULT_SEED=%d repeats them)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed))
}

// TestFaults runs the dataplane through faults of wasp and of the control
// plane, each scenario with its own wasp, against one control plane and
// lab: wasp killed with SIGKILL under traffic and in the middle of large
// syncs, changes made while it is down, an apiserver outage, and objects
// the apiserver accepts but that are unusual. docs/reliability.md reports
// the figures the scenarios log.
func TestFaults(t *testing.T) {
	soak := soakDuration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute+3*soak)
	defer cancel()
	env := fw.Setup(ctx, t)
	bulk, err := env.BulkClient()
	if err != nil {
		t.Fatal(err)
	}
	rng := newRand(t)
	for _, dp := range fw.Dataplanes(t) {
		if !t.Run(dp.Name, func(t *testing.T) {
			env.UseDataplane(t, dp)
			s := &suite{env: env, ctx: ctx, prefix: "faults-" + dp.Name}
			// Large syncs' Services must not outlive this dataplane's
			// turn: the next one's clean start would carry them.
			defer s.deleteServices(t)
			f := &faults{suite: s, soak: soak, bulk: bulk, rng: rng}
			for _, sc := range []struct {
				name string
				run  func(t *testing.T, f *faults)
			}{
				{"kill -9 under traffic", testKillUnderTraffic},
				{"kill -9 during large syncs", testKillDuringSync},
				{"changes while wasp is down", testChangesWhileDown},
				{"apiserver outage", testAPIServerOutage},
				{"unusual objects", testUnusualObjects},
			} {
				if !t.Run(sc.name, func(t *testing.T) { sc.run(t, f) }) && ctx.Err() != nil {
					return
				}
			}
		}) && ctx.Err() != nil {
			return
		}
	}
}

// faults is the state the fault scenarios share.
type faults struct {
	*suite
	soak time.Duration
	// bulk writes objects without client-side rate limit.
	bulk kubernetes.Interface
	rng  *rand.Rand // only used from the test goroutines, one at a time
}

// between returns a random duration in [lo, hi).
func (f *faults) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(f.rng.Int64N(int64(hi-lo)))
}

// syncDone matches wasp's log line for a completed sync (at -v 2).
var syncDone = regexp.MustCompile(`"Sync done".* full=(true|false)`)

// fullSyncs counts the full syncs wasp has logged as done.
func fullSyncs(w *fw.Wasp) int {
	n := 0
	for _, m := range syncDone.FindAllStringSubmatch(w.Log(), -1) {
		if m[1] == "true" {
			n++
		}
	}
	return n
}

// syncEvents are the log lines (at -v 4) that mark the steps of a sync:
// one transaction per family, each followed by its conntrack cleanup
// ("Backend synced"), then "Sync done".
var syncEvents = regexp.MustCompile(`"Synced (?:nftables table|iptables)"|"Backend synced".*ipFamily="(IPv4|IPv6)"|"Sync done"`)

// transaction matches a backend's log line (at -v 4) for one family's
// programmed dataplane: an nftables transaction or an iptables-restore.
var transaction = regexp.MustCompile(`"Synced (?:nftables table|iptables)"`)

// killPoint says where in its work a wasp killed at -v 4 was, from the
// last sync step its log shows.
func killPoint(log string) string {
	all := syncEvents.FindAllStringSubmatch(log, -1)
	if len(all) == 0 {
		return "before its first transaction"
	}
	last := all[len(all)-1]
	switch {
	case transaction.MatchString(last[0]):
		return "after a transaction, before its conntrack cleanup"
	case last[1] == "IPv4":
		return "between the IPv4 and the IPv6 transaction"
	case last[1] == "IPv6":
		return "after both transactions, before the sync's end"
	}
	return "between syncs"
}

// waitFullSync waits until w has completed a full sync (its first, after
// a start) and returns how long after its start that was noticed.
func waitFullSync(t *testing.T, w *fw.Wasp, timeout time.Duration) time.Duration {
	t.Helper()
	fw.Eventually(t, timeout, func() error {
		if exited, err := w.Exited(); exited {
			t.Fatalf("wasp exited: %v", err)
		}
		if fullSyncs(w) == 0 {
			return errors.New("wasp has not completed a full sync")
		}
		return nil
	})
	return time.Since(w.Started)
}

// crashed matches what a Go panic or a crash caught by client-go's
// runtime.HandleCrash leaves in a log.
var crashed = regexp.MustCompile(`(?m)^panic: |goroutine \d+ \[running\]|Observed a panic|fatal error: `)

// expectNoCrash fails t if w exited or logged a panic.
func expectNoCrash(t *testing.T, w *fw.Wasp) {
	t.Helper()
	if exited, err := w.Exited(); exited {
		t.Fatalf("wasp exited: %v", err)
	}
	expectNoPanic(t, w)
}

// expectNoPanic fails t if w logged a panic; w may have been killed.
func expectNoPanic(t *testing.T, w *fw.Wasp) {
	t.Helper()
	if m := crashed.FindString(w.Log()); m != "" {
		t.Fatalf("wasp's log (%s) has %q", w.LogPath, m)
	}
}

// target is a Service the traffic of a scenario goes to.
type target struct {
	name    string
	network string // "tcp" or "udp"
	pods    []string
	svc     *v1.Service
	ip      netip.Addr
	tr      *traffic
}

// createTargets creates each target's Service and endpoints in ns and
// waits until it answers.
func createTargets(t *testing.T, s *suite, ns string, targets []*target) {
	t.Helper()
	for _, tg := range targets {
		tg.svc = s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: tg.name, Namespace: ns, Protocol: v1.Protocol(strings.ToUpper(tg.network))})
		s.env.SetEndpoints(s.ctx, t, tg.svc, v1.IPv4Protocol, fw.Ready(tg.pods...)...)
		tg.ip = fw.ClusterIP(t, tg.svc, v1.IPv4Protocol)
	}
	for _, tg := range targets {
		s.waitFor(t, s.client(), tg.network, tg.ip, 80, tg.pods...)
	}
}

// stopTargets stops the targets' traffic and fails t if a request failed
// or was answered by a pod outside allowed (by target name; default the
// target's pods). It returns the number of requests.
func stopTargets(t *testing.T, targets []*target, allowed map[string][]string) int {
	t.Helper()
	total := 0
	var failures []string
	for _, tg := range targets {
		counts, errs := tg.tr.stop()
		total += sum(counts) + len(errs)
		want := tg.pods
		if a, ok := allowed[tg.name]; ok {
			want = a
		}
		for id := range counts {
			if !slices.Contains(want, id) {
				failures = append(failures, fmt.Sprintf("%s %s answered by %q, not one of %v: %v", tg.network, tg.name, id, want, counts))
			}
		}
		for _, err := range errs {
			failures = append(failures, fmt.Sprintf("%s %s: %v", tg.network, tg.name, err))
		}
		t.Logf("%s %s: %d requests, %d failed, answers %v", tg.network, tg.name, sum(counts)+len(errs), len(errs), counts)
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed or went astray, first: %s", len(failures), total, failures[0])
	}
	return total
}

// testKillUnderTraffic kills wasp with SIGKILL at random points (in its
// start-up, its first full sync, or idle) and starts it again, while the
// client opens new connections to three Services without pause and keeps
// one long-lived connection: no request may fail, and the last wasp
// programs a change.
func testKillUnderTraffic(t *testing.T, f *faults) {
	s := f.suite
	rounds, budget := 6, f.soak/4
	w := s.env.StartWasp(t)
	ns := s.namespace(t)
	targets := []*target{
		{name: "web", network: "tcp", pods: []string{"a-1", "a-2", "b-1"}},
		{name: "api", network: "tcp", pods: []string{"a-3", "b-2"}},
		{name: "dns", network: "udp", pods: []string{"a-1", "b-2"}},
	}
	createTargets(t, s, ns, targets)
	long := startLongLived(t, s, targets[0].ip)
	for _, tg := range targets {
		tg.tr = startTrafficTo(s, tg.network, tg.ip, 80, trafficPause)
	}

	start := time.Now()
	kills, duringStartup := 0, 0
	for kills < rounds || time.Since(start) < budget {
		// Up to 1.5 s: the start-up (flags, informers, first full sync
		// of both families) takes most of a second here.
		time.Sleep(f.between(0, 1500*time.Millisecond))
		w.Kill()
		kills++
		if fullSyncs(w) == 0 {
			duringStartup++
		}
		expectNoPanic(t, w)
		time.Sleep(f.between(0, 500*time.Millisecond))
		w = s.env.StartWasp(t)
	}
	// The last wasp reconciles: it programs a change.
	api := targets[1]
	s.env.SetEndpoints(s.ctx, t, api.svc, v1.IPv4Protocol, fw.Ready("b-1")...)
	expectOnlyEventually(t, s, api.ip, "b-1")

	longRequests, longFailures := long.stop()
	if len(longFailures) > 0 {
		t.Fatalf("%d of %d requests on the long-lived connection failed, first: %v", len(longFailures), longRequests, longFailures[0])
	}
	total := stopTargets(t, targets, map[string][]string{"api": {"a-3", "b-2", "b-1"}})
	expectNoCrash(t, w)
	t.Logf("kill -9 under traffic: %d kills in %s (%d before the killed wasp's first full sync was done), %d new connections and %d requests on one long-lived connection, none failed",
		kills, time.Since(start).Round(time.Second), duringStartup, total, longRequests)
	w.Stop()
}

// bigService is Service i of testKillDuringSync, at generation gen of its
// endpoints.
func bigEndpoints(i, gen int) []string {
	pods := append(slices.Clone(fw.PodsA), fw.PodsB...)
	n := 1 + (i+gen)%3
	out := make([]string, 0, n)
	for k := range n {
		out = append(out, pods[(i*7+gen*3+k)%len(pods)])
	}
	return out
}

// testKillDuringSync kills wasp at random points while it programs large
// changes: n Services created at once, all their endpoints replaced, and
// the first full sync after a start. At the end the kernel must hold
// exactly what a wasp started on a clean node programs, and every Service
// must answer from its endpoints.
func testKillDuringSync(t *testing.T, f *faults) {
	s := f.suite
	n := envInt(t, "WASP_FAULT_SERVICES", 500, 10000)
	rounds := 5
	if f.soak > 0 {
		rounds = 1 << 30 // bounded by the budget below
	}
	budget := f.soak / 4
	ns := s.namespace(t)
	// -v 4 logs each step of a sync, which tells where a kill landed.
	startWasp := func() *fw.Wasp { return s.env.StartWasp(t, "-v", "4") }
	w := startWasp()
	waitFullSync(t, w, converge)
	kills := 0
	killStats := map[string]int{}
	points := map[string]int{}
	kill := func() {
		t.Helper()
		w.Kill()
		expectNoPanic(t, w)
		points[killPoint(w.Log())]++
		kills++
	}

	// killWhile kills and restarts wasp at random points until work
	// returns, then leaves the last wasp running.
	killWhile := func(phase string, work func() error) {
		t.Helper()
		errc := make(chan error, 1)
		go func() { errc <- work() }()
		for {
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("%s: %v", phase, err)
				}
				return
			case <-time.After(f.between(30*time.Millisecond, 400*time.Millisecond)):
			}
			kill()
			killStats[phase]++
			w = startWasp()
		}
	}

	services := make([]*v1.Service, n)
	start := time.Now()
	killWhile("create", func() error {
		return parallel(n, func(i int) error {
			spec := fw.ServiceSpec{Name: fmt.Sprintf("big-%d", i), Namespace: ns, DualStack: true}
			svc, err := f.bulk.CoreV1().Services(ns).Create(s.ctx, spec.Object(), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create service big-%d: %w", i, err)
			}
			services[i] = svc
			return f.putSlice(svc, 0, bigEndpoints(i, 0))
		})
	})
	created := time.Since(start)
	killWhile("replace endpoints", func() error {
		return parallel(n, func(i int) error { return f.putSlice(services[i], 1, bigEndpoints(i, 1)) })
	})

	// Kills in the first full sync after a start: how long it takes is
	// measured on an undisturbed start, then each kill lands at a random
	// point up to 1.5 times that.
	w.Kill()
	w = startWasp()
	full := waitFullSync(t, w, 3*converge)
	t.Logf("%d Services created in %s; an undisturbed start completes its first full sync in %s", n, created.Round(time.Millisecond), full.Round(time.Millisecond))
	startupKills, beforeSync := 0, 0
	phaseStart := time.Now()
	w.Kill()
	for i := 0; i < rounds && (i < 5 || time.Since(phaseStart) < budget); i++ {
		w = startWasp()
		time.Sleep(f.between(0, full*3/2))
		if fullSyncs(w) == 0 {
			beforeSync++
		}
		kill()
		startupKills++
	}

	// Kills right after the first transaction of a start-up's full sync
	// (IPv4) committed, while the IPv6 one is planned or sent: the
	// Services are dual-stack so that it takes a while.
	for range 5 {
		w = startWasp()
		fw.Eventually(t, 3*converge, func() error {
			if !transaction.MatchString(w.Log()) {
				time.Sleep(time.Millisecond) // Eventually waits 50 ms
				if !transaction.MatchString(w.Log()) {
					return errors.New("wasp has not committed a transaction yet")
				}
			}
			return nil
		})
		kill()
		killStats["after the first transaction"]++
	}

	// The survivor: a wasp that is not killed.
	w = startWasp()
	waitFullSync(t, w, 3*converge)
	verifyBig(t, f, services, 1)
	expectNoCrash(t, w)
	w, clean := expectCleanStartRuleset(t, s, w, fmt.Sprintf("after %d kills", kills))
	t.Logf("kill -9 during large syncs: %d kills (%d while creating %d dual-stack Services, %d while replacing their endpoints, %d in a start-up's first full sync, %d of them before it was done, %d right after its first transaction); the final ruleset equals a clean start's: %s",
		kills, killStats["create"], n, killStats["replace endpoints"], startupKills, beforeSync, killStats["after the first transaction"], clean.Counts())
	t.Logf("where the kills landed, from each killed wasp's last logged step: %v", points)

	// Leave the next scenarios a small cluster.
	if err := parallel(n, func(i int) error { return f.deleteService(services[i]) }); err != nil {
		t.Fatal(err)
	}
	w.Stop()
}

// expectCleanStartRuleset fails t unless the kernel holds exactly what a
// wasp started on a clean node programs: it reads the ruleset w (running,
// synced) programmed, stops w, runs wasp cleanup, starts a new wasp and
// compares. It returns the new wasp and its ruleset. what says what
// happened to w, for the failure message.
func expectCleanStartRuleset(t *testing.T, s *suite, w *fw.Wasp, what string) (*fw.Wasp, *fw.Ruleset) {
	t.Helper()
	got, err := s.env.ReadRuleset()
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if out, err := s.env.RunWasp(s.ctx, "cleanup"); err != nil {
		t.Fatalf("wasp cleanup: %v\n%s", err, out)
	}
	w = s.env.StartWasp(t)
	waitFullSync(t, w, 3*converge)
	clean, err := s.env.ReadRuleset()
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Diff(clean, 20); d != "" {
		t.Fatalf("%s the kernel differs from what a clean start programs:\n  %s", what, d)
	}
	return w, clean
}

// verifyBig sends one request to every Service's IPv4 ClusterIP (and
// eight to one in ten, two of them to its IPv6 ClusterIP) and fails t
// unless each is answered by one of its endpoints of generation gen.
func verifyBig(t *testing.T, f *faults, services []*v1.Service, gen int) {
	t.Helper()
	ips := make([]netip.Addr, len(services))
	ip6s := make([]netip.Addr, len(services))
	for i, svc := range services {
		ips[i] = fw.ClusterIP(t, svc, v1.IPv4Protocol)
		ip6s[i] = fw.ClusterIP(t, svc, v1.IPv6Protocol)
	}
	err := parallel(len(services), func(i int) error {
		want := bigEndpoints(i, gen)
		tries := 1
		if i%10 == 0 {
			tries = 8
		}
		for k := range tries {
			ip := ips[i]
			if k%4 == 3 {
				ip = ip6s[i]
			}
			id, err := fw.Ask(f.client(), "tcp", ip, 80, ask)
			if err != nil {
				return fmt.Errorf("service %s (%s): %w", services[i].Name, ip, err)
			}
			if !slices.Contains(want, id) {
				return fmt.Errorf("service %s (%s) answered by %q, want one of %v", services[i].Name, ip, id, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// putSlice creates or replaces the EndpointSlice of each of svc's IP
// families with pods, generation gen telling which (0: create).
func (f *faults) putSlice(svc *v1.Service, gen int, pods []string) error {
	for _, family := range svc.Spec.IPFamilies {
		slice, err := f.env.Slice(svc, family, fw.Ready(pods...)...)
		if err != nil {
			return err
		}
		api := f.bulk.DiscoveryV1().EndpointSlices(svc.Namespace)
		if gen == 0 {
			_, err = api.Create(f.ctx, slice, metav1.CreateOptions{})
		} else {
			// No resourceVersion: an unconditional replace.
			_, err = api.Update(f.ctx, slice, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("endpointslice %s/%s: %w", slice.Namespace, slice.Name, err)
		}
	}
	return nil
}

// deleteService deletes svc and its EndpointSlices.
func (f *faults) deleteService(svc *v1.Service) error {
	err := f.bulk.CoreV1().Services(svc.Namespace).Delete(f.ctx, svc.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	err = f.bulk.DiscoveryV1().EndpointSlices(svc.Namespace).DeleteCollection(f.ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
	if err != nil {
		return fmt.Errorf("delete endpointslices of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// parallel runs do(0..n-1) on 16 goroutines and returns the first error.
func parallel(n int, do func(i int) error) error {
	const workers = 16
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// testChangesWhileDown kills wasp, changes the cluster while it is down
// (endpoints replaced, a Service deleted, another created), checks the
// kernel still has the old state, and measures how long the restarted
// wasp takes to apply every change.
func testChangesWhileDown(t *testing.T, f *faults) {
	s := f.suite
	w := s.env.StartWasp(t)
	ns := s.namespace(t)
	keep := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "keep", Namespace: ns})
	s.env.SetEndpoints(s.ctx, t, keep, v1.IPv4Protocol, fw.Ready("a-1", "a-2")...)
	gone := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "gone", Namespace: ns, Protocol: v1.ProtocolUDP})
	s.env.SetEndpoints(s.ctx, t, gone, v1.IPv4Protocol, fw.Ready("b-1")...)
	keepIP, goneIP := fw.ClusterIP(t, keep, v1.IPv4Protocol), fw.ClusterIP(t, gone, v1.IPv4Protocol)
	expectOnlyEventually(t, s, keepIP, "a-1", "a-2")
	s.waitFor(t, s.client(), "udp", goneIP, 80, "b-1")

	w.Kill()
	expectNoPanic(t, w)
	s.env.SetEndpoints(s.ctx, t, keep, v1.IPv4Protocol, fw.Ready("b-2")...)
	if err := f.deleteService(gone); err != nil {
		t.Fatal(err)
	}
	fresh := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "fresh", Namespace: ns})
	s.env.SetEndpoints(s.ctx, t, fresh, v1.IPv4Protocol, fw.Ready("a-3")...)
	freshIP := fw.ClusterIP(t, fresh, v1.IPv4Protocol)

	// Nothing applies them while wasp is down: the kernel keeps its state.
	time.Sleep(time.Second)
	expectOnly(t, s.client(), "tcp", keepIP, 80, 20, "a-1", "a-2")
	if id, err := fw.Ask(s.client(), "udp", goneIP, 80, ask); err != nil || id != "b-1" {
		t.Fatalf("deleted while wasp was down, udp %s still has its old endpoint: got %q, %v; want b-1", goneIP, id, err)
	}
	if id, err := fw.Ask(s.client(), "tcp", freshIP, 80, dropWait); err == nil {
		t.Fatalf("created while wasp was down, %s answered (%q) before wasp started", freshIP, id)
	}

	w = s.env.StartWasp(t)
	var converged time.Duration
	fw.Eventually(t, converge, func() error {
		for range 4 {
			if id, err := fw.Ask(s.client(), "tcp", keepIP, 80, ask); err != nil || id != "b-2" {
				return fmt.Errorf("keep: %q, %v; want b-2", id, err)
			}
		}
		if id, err := fw.Ask(s.client(), "tcp", freshIP, 80, ask); err != nil || id != "a-3" {
			return fmt.Errorf("fresh: %q, %v; want a-3", id, err)
		}
		if id, err := fw.Ask(s.client(), "udp", goneIP, 80, 300*time.Millisecond); err == nil {
			return fmt.Errorf("gone (deleted) still answered by %q", id)
		}
		converged = time.Since(w.Started)
		return nil
	})
	expectOnly(t, s.client(), "tcp", keepIP, 80, 20, "b-2")
	expectDrop(t, s.client(), "udp", goneIP, 80)
	expectNoCrash(t, w)
	w, _ = expectCleanStartRuleset(t, s, w, "after changes made while wasp was down")
	t.Logf("changes made while wasp was down (endpoints replaced, a Service deleted, one created) applied %.2f s after its start",
		converged.Seconds())
	w.Stop()
}

// testAPIServerOutage stops kube-apiserver for WASP_OUTAGE (default 20 s)
// while the client keeps opening connections to two Services and keeps a
// long-lived one: no request may fail, wasp stays up and its /healthz and
// /livez say healthy throughout (nothing is queued, so nothing is late:
// upstream's definition), and a change made once the apiserver is back is
// programmed promptly.
func testAPIServerOutage(t *testing.T, f *faults) {
	s := f.suite
	outage := envDuration(t, "WASP_OUTAGE", 20*time.Second, 10*time.Minute)
	w := s.env.StartWasp(t)
	ns := s.namespace(t)
	targets := []*target{
		{name: "web", network: "tcp", pods: []string{"a-1", "b-1"}},
		{name: "dns", network: "udp", pods: []string{"a-2", "b-2"}},
	}
	createTargets(t, s, ns, targets)
	web := targets[0]
	waitFullSync(t, w, converge)
	long := startLongLived(t, s, web.ip)
	for _, tg := range targets {
		tg.tr = startTrafficTo(s, tg.network, tg.ip, 80, trafficPause)
	}

	s.env.CP.StopAPIServer(t)
	down := time.Now()
	checks := 0
	healthAddr := netip.AddrPortFrom(s.nodeA().IPv4, 10256)
	for time.Since(down) < outage {
		for _, path := range []string{"/healthz", "/livez"} {
			code, body, _, err := getJSON(s, healthAddr, path)
			if err != nil || code != http.StatusOK || body["healthy"] != true {
				t.Fatalf("%s %.0f s into the apiserver outage: %d %v %v, want 200 and healthy",
					path, time.Since(down).Seconds(), code, body, err)
			}
			checks++
		}
		expectNoCrash(t, w)
		time.Sleep(500 * time.Millisecond)
	}
	restarted := time.Now()
	s.env.CP.StartAPIServer(s.ctx, t)
	back := time.Now()
	t.Logf("apiserver down for %.1f s, ready %.1f s after its restart", restarted.Sub(down).Seconds(), back.Sub(restarted).Seconds())

	// A change once it is back: web moves to a-3.
	s.env.SetEndpoints(s.ctx, t, web.svc, v1.IPv4Protocol, fw.Ready("a-3")...)
	changed := time.Now()
	var converged time.Duration
	fw.Eventually(t, 2*time.Minute, func() error {
		for range 4 {
			if id, err := fw.Ask(s.client(), "tcp", web.ip, 80, ask); err != nil || id != "a-3" {
				return fmt.Errorf("web after the outage: %q, %v; want a-3", id, err)
			}
		}
		converged = time.Since(changed)
		return nil
	})
	expectOnly(t, s.client(), "tcp", web.ip, 80, 20, "a-3")

	longRequests, longFailures := long.stop()
	if len(longFailures) > 0 {
		t.Fatalf("%d of %d requests on the long-lived connection failed, first: %v", len(longFailures), longRequests, longFailures[0])
	}
	total := stopTargets(t, targets, map[string][]string{"web": {"a-1", "b-1", "a-3"}})
	for _, path := range []string{"/healthz", "/livez"} {
		if code, body, _, err := getJSON(s, healthAddr, path); err != nil || code != http.StatusOK || body["healthy"] != true {
			t.Fatalf("%s after the outage: %d %v %v, want 200 and healthy", path, code, body, err)
		}
	}
	expectNoCrash(t, w)
	t.Logf("apiserver outage of %.0f s: %d new connections and %d requests on a long-lived one, none failed; %d /healthz and /livez checks, all 200; a change written %.2f s after the apiserver was ready answered from its new endpoint %.2f s later",
		outage.Seconds(), total, longRequests, checks, changed.Sub(back).Seconds(), converged.Seconds())
	w.Stop()
}

// testUnusualObjects creates objects the apiserver accepts but that are
// unusual, while a canary Service answers requests without pause: wasp
// must not crash, the canary must answer every request from its own
// endpoints, each unusual Service must behave as upstream's proxy makes it
// behave, and once they are deleted the kernel must hold exactly what it
// held before.
func testUnusualObjects(t *testing.T, f *faults) {
	s := f.suite
	w := s.env.StartWasp(t)
	ns := s.namespace(t)
	canary := &target{name: "canary", network: "tcp", pods: []string{"a-1", "b-1"}}
	createTargets(t, s, ns, []*target{canary})
	waitFullSync(t, w, converge)
	before := readRulesetWhenStill(t, s)
	canary.tr = startTrafficTo(s, "tcp", canary.ip, 80, trafficPause)
	var created []*v1.Service

	create := func(svc *v1.Service) *v1.Service {
		t.Helper()
		out, err := f.bulk.CoreV1().Services(ns).Create(s.ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service %s: %v", svc.Name, err)
		}
		created = append(created, out)
		return out
	}
	attach := func(svc *v1.Service, slices ...*discoveryv1.EndpointSlice) {
		t.Helper()
		for _, sl := range slices {
			if _, err := f.bulk.DiscoveryV1().EndpointSlices(ns).Create(s.ctx, sl, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create endpointslice %s of %s: %v", sl.Name, svc.Name, err)
			}
		}
	}
	slice := func(svc *v1.Service, family v1.IPFamily, pods ...string) *discoveryv1.EndpointSlice {
		t.Helper()
		sl, err := s.env.Slice(svc, family, fw.Ready(pods...)...)
		if err != nil {
			t.Fatal(err)
		}
		return sl
	}
	spec := func(name string) fw.ServiceSpec { return fw.ServiceSpec{Name: name, Namespace: ns} }

	// A Service with 100 ports, all to the echo port.
	many := spec("many-ports").Object()
	many.Spec.Ports = nil
	for i := range 100 {
		many.Spec.Ports = append(many.Spec.Ports, v1.ServicePort{Name: fmt.Sprintf("p-%d", i), Protocol: v1.ProtocolTCP,
			Port: int32(2000 + i), TargetPort: intstr.FromInt32(fw.EchoPort)})
	}
	many = create(many)
	attach(many, slice(many, v1.IPv4Protocol, "a-2"))

	// A slice of 1,000 endpoints (the API's maximum), at addresses no
	// pod has.
	thousand := create(spec("thousand").Object())
	big := slice(thousand, v1.IPv4Protocol)
	for i := range 1000 {
		big.Endpoints = append(big.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.244.%d.%d", 100+i/250, 1+i%250)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To(fw.OtherNode),
		})
	}
	attach(thousand, big)

	// A slice port with no number: upstream ignores it, so the Service
	// has no endpoint and rejects.
	noPort := create(spec("no-port").Object())
	np := slice(noPort, v1.IPv4Protocol, "a-1")
	np.Ports[0].Port = nil
	attach(noPort, np)

	// The same address in two slices: one endpoint, not two.
	dup := create(spec("duplicate").Object())
	d1, d2 := slice(dup, v1.IPv4Protocol, "a-1"), slice(dup, v1.IPv4Protocol, "a-1", "a-2")
	d1.Name, d2.Name = "duplicate-x", "duplicate-y"
	attach(dup, d1, d2)

	// An endpoint on a Node that does not exist.
	ghost := create(spec("ghost-node").Object())
	gs := slice(ghost, v1.IPv4Protocol, "b-2")
	gs.Endpoints[0].NodeName = ptr.To("no-such-node")
	attach(ghost, gs)

	// An FQDN slice: not for proxies; the Service has no endpoint.
	fqdn := create(spec("fqdn").Object())
	fs := slice(fqdn, v1.IPv4Protocol, "a-1")
	fs.AddressType = discoveryv1.AddressTypeFQDN
	fs.Endpoints[0].Addresses = []string{"echo.example.test"}
	attach(fqdn, fs)

	// ExternalName and headless Services, with slices all the same.
	ext := spec("external-name").Object()
	ext.Spec.Type, ext.Spec.ExternalName, ext.Spec.Ports[0].TargetPort = v1.ServiceTypeExternalName, "echo.example.test", intstr.IntOrString{}
	ext = create(ext)
	attach(ext, slice(ext, v1.IPv4Protocol, "a-1"))
	headless := spec("headless").Object()
	headless.Spec.ClusterIP = v1.ClusterIPNone
	headless = create(headless)
	attach(headless, slice(headless, v1.IPv4Protocol, "a-1"))

	// The longest affinity the API allows: a day.
	day := create(fw.ServiceSpec{Name: "affinity-day", Namespace: ns, Affinity: 86400}.Object())
	attach(day, slice(day, v1.IPv4Protocol, "a-1", "a-2", "b-1"))

	// Slices of the other family: an IPv4 Service with an IPv6 slice
	// beside its own, an IPv6 Service with only an IPv4 slice.
	v4 := create(spec("v4-only").Object())
	attach(v4, slice(v4, v1.IPv6Protocol, "a-1"), slice(v4, v1.IPv4Protocol, "a-2"))
	v6 := create(fw.ServiceSpec{Name: "v6-only", Namespace: ns, IPv6Only: true}.Object())
	attach(v6, slice(v6, v1.IPv4Protocol, "a-1"))

	// How each behaves, as upstream's proxy makes it behave.
	for _, port := range []uint16{2000, 2050, 2099} {
		s.waitFor(t, s.client(), "tcp", fw.ClusterIP(t, many, v1.IPv4Protocol), port, "a-2")
	}
	expectReject(t, s.client(), "tcp", fw.ClusterIP(t, noPort, v1.IPv4Protocol), 80)
	expectReject(t, s.client(), "tcp", fw.ClusterIP(t, fqdn, v1.IPv4Protocol), 80)
	s.waitFor(t, s.client(), "tcp", fw.ClusterIP(t, ghost, v1.IPv4Protocol), 80, "b-2")
	// v4-only was created last: a request sent before its sync lands
	// is lost for good in iptables mode (its SYN's conntrack entry,
	// made before the DNAT rule, carries the retransmission too).
	s.waitFor(t, s.client(), "tcp", fw.ClusterIP(t, v4, v1.IPv4Protocol), 80, "a-2")
	expectOnly(t, s.client(), "tcp", fw.ClusterIP(t, v4, v1.IPv4Protocol), 80, 20, "a-2")
	expectReject(t, s.client(), "tcp", fw.ClusterIP(t, v6, v1.IPv6Protocol), 80)
	dayIP := fw.ClusterIP(t, day, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", dayIP, 80, "a-1", "a-2", "b-1")
	if got := answers(t, s.client(), "tcp", dayIP, 80, 30); len(got) != 1 {
		t.Fatalf("affinity-day (ClientIP, 86400 s) spread 30 connections over %v, want one endpoint", got)
	}
	// a-1 in both slices counts once: a-1 and a-2 share the connections
	// evenly. a-1 is binomial(600, 1/2) (sd 12.2); ±5 sd accepts
	// 239..361, while a-1 counted twice (p = 2/3, mean 400) fails.
	dupIP := fw.ClusterIP(t, dup, v1.IPv4Protocol)
	expectOnlyEventually(t, s, dupIP, "a-1", "a-2")
	if got := answers(t, s.client(), "tcp", dupIP, 80, 600); got["a-1"] < 239 || got["a-1"] > 361 {
		t.Fatalf("duplicate: a-1 (in two slices) and a-2 answered %v of 600, want a-1 in 239..361 (one endpoint each)", got)
	} else {
		t.Logf("duplicate: %v of 600", got)
	}
	var during *fw.Ruleset
	fw.Eventually(t, converge, func() error {
		var err error
		if during, err = s.env.ReadRuleset(); err != nil {
			return err
		}
		// One element per endpoint: of a map in nftables, of the
		// hairpin set in iptables.
		if during.Elements+during.Chains < before.Elements+before.Chains+1000 {
			return fmt.Errorf("with a slice of 1,000 endpoints the kernel holds %d elements and %d chains, %d and %d before: it is not programmed",
				during.Elements, during.Chains, before.Elements, before.Chains)
		}
		return nil
	})
	expectNoCrash(t, w)

	for _, svc := range created {
		if err := f.deleteService(svc); err != nil {
			t.Fatal(err)
		}
	}
	var after *fw.Ruleset
	fw.Eventually(t, converge, func() error {
		var err error
		if after, err = s.env.ReadRuleset(); err != nil {
			return err
		}
		if d := after.Diff(before, 10); d != "" {
			return fmt.Errorf("once the unusual objects are deleted the kernel differs from before:\n  %s", d)
		}
		return nil
	})
	total := stopTargets(t, []*target{canary}, nil)
	expectNoCrash(t, w)
	t.Logf("unusual objects: the canary answered all %d requests from its endpoints; objects before %s; with them %s; after deleting them %s",
		total, before.Counts(), during.Counts(), after.Counts())
	w.Stop()
}

// readRulesetWhenStill reads the proxy node's ruleset twice, 300 ms
// apart, until both reads agree: wasp has no sync in flight.
func readRulesetWhenStill(t *testing.T, s *suite) *fw.Ruleset {
	t.Helper()
	var r *fw.Ruleset
	fw.Eventually(t, converge, func() error {
		a, err := s.env.ReadRuleset()
		if err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond)
		if r, err = s.env.ReadRuleset(); err != nil {
			return err
		}
		if d := a.Diff(r, 3); d != "" {
			return fmt.Errorf("ruleset still changing: %s", d)
		}
		return nil
	})
	return r
}
