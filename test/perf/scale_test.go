//go:build linux

package perf

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/wasp-proxy/wasp/internal/netlab"
	"github.com/wasp-proxy/wasp/test/controlplane"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// config is what the environment asks for; see the package documentation.
type config struct {
	sizes    []int
	proxies  []string
	conns    int // sequential connections per dataplane path
	repeat   int // new Services and endpoint changes measured per size
	minSync  time.Duration
	idle     time.Duration // idling before the last memory reading; 0: none
	mode     string        // both proxies' mode: nftables or iptables
	variant  string        // in iptables mode, both proxies' iptables variant: nft or legacy
	out      string
	logs     string // directory to keep the proxies' logs in
	profiles string // directory to keep wasp's heap profiles in
	// module is wasp's --module (STAGE=SOURCE), run in a worker: the
	// memory read then includes the worker's.
	module string
}

func configFromEnv() (config, error) {
	c := config{proxies: []string{"wasp", "kube-proxy"}, conns: 3000, repeat: 3, out: os.Getenv("WASP_PERF_OUT"), logs: os.Getenv("WASP_PERF_LOGS"), profiles: os.Getenv("WASP_PERF_PROFILES"), module: os.Getenv("WASP_PERF_MODULE")}
	var err error
	// Both proxies' default; both get the same.
	if c.minSync, err = time.ParseDuration(envOr("WASP_PERF_MIN_SYNC_PERIOD", "1s")); err != nil || c.minSync < 0 {
		return c, fmt.Errorf("WASP_PERF_MIN_SYNC_PERIOD: %q is not a duration", os.Getenv("WASP_PERF_MIN_SYNC_PERIOD"))
	}
	if c.idle, err = time.ParseDuration(envOr("WASP_PERF_IDLE", "1m")); err != nil || c.idle < 0 {
		return c, fmt.Errorf("WASP_PERF_IDLE: %q is not a duration", os.Getenv("WASP_PERF_IDLE"))
	}
	switch c.mode = envOr("WASP_PERF_MODE", "nftables"); c.mode {
	case "nftables", "iptables":
	default:
		return c, fmt.Errorf("WASP_PERF_MODE: %q is neither nftables nor iptables", c.mode)
	}
	switch c.variant = envOr("WASP_PERF_IPTABLES_VARIANT", "nft"); c.variant {
	case "nft", "legacy":
	default:
		return c, fmt.Errorf("WASP_PERF_IPTABLES_VARIANT: %q is neither nft nor legacy", c.variant)
	}
	if c.sizes, err = parseSizes(envOr("WASP_PERF_SIZES", "100,1000,5000,10000")); err != nil {
		return c, fmt.Errorf("WASP_PERF_SIZES: %w", err)
	}
	if s := os.Getenv("WASP_PERF_PROXIES"); s != "" {
		c.proxies = nil
		for _, p := range strings.Split(s, ",") {
			p = strings.TrimSpace(p)
			if p != "wasp" && p != "kube-proxy" {
				return c, fmt.Errorf("WASP_PERF_PROXIES: %q is neither wasp nor kube-proxy", p)
			}
			if !slices.Contains(c.proxies, p) {
				c.proxies = append(c.proxies, p)
			}
		}
	}
	for _, v := range []struct {
		env string
		dst *int
	}{{"WASP_PERF_CONNS", &c.conns}, {"WASP_PERF_REPEAT", &c.repeat}} {
		if s := os.Getenv(v.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return c, fmt.Errorf("%s: %q is not a positive number", v.env, s)
			}
			*v.dst = n
		}
	}
	return c, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// probeNamespace holds the Services the measurements create, all pointing
// at real pods; the bulk load lives in loadNamespace.
const probeNamespace = "perf-probe"

// Time limits. Reaching one is a functional failure, not a performance
// verdict: upstream kube-proxy takes about 40 s to program 10k Services on
// two cores.
const (
	programLimit = 15 * time.Minute // process start until a Service answers
	changeLimit  = 5 * time.Minute  // API call until a change answers
	quietLimit   = 3 * time.Minute  // waiting for a proxy to go idle
	syncLogLimit = 30 * time.Second // answer until the sync line is in the log
	settle       = 30 * time.Second // last change until the resident size is read
)

// result holds what was measured for one proxy at one size.
type result struct {
	size  int
	proxy string
	done  bool // every measurement ran

	warm         time.Duration // start with the previous size's rules until answered (not reported)
	full         time.Duration // start until a Service created while down answered
	fullReported time.Duration // the proxy's own duration of its first sync

	newService, newServiceAPI, newServiceReported []time.Duration
	change, changeReported                        []time.Duration

	rssFirst, hwmFirst int64           // the warm-up process, settled after its first sync
	rss, hwm           int64           // the restarted process, settled after the changes
	rssIdle, hwmIdle   int64           // the same after idling cfg.idle (0: not measured)
	cluster, direct    []time.Duration // dataplane samples
	load               string          // /proc/loadavg after the measurements
}

// TestScale compares wasp with upstream kube-proxy at growing numbers of
// Services; see the package documentation.
func TestScale(t *testing.T) {
	if os.Getenv("WASP_PERF") != "1" {
		t.Skip("end-to-end benchmark against upstream kube-proxy: set WASP_PERF=1 to run it (make bench-e2e: root, about an hour, builds kube-proxy once)")
	}
	cfg, err := configFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	// The framework and the control plane run only with WASP_E2E=1, which
	// WASP_PERF=1 implies.
	t.Setenv("WASP_E2E", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()

	var kubeProxyBin string
	if slices.Contains(cfg.proxies, "kube-proxy") {
		if kubeProxyBin, err = controlplane.BuildKubeProxy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	env := fw.SetupWith(ctx, t, fw.Options{NoWasp: !slices.Contains(cfg.proxies, "wasp")})
	machine := describeMachine()
	t.Logf("machine: %s", machine)

	// One client for the bulk load and the probes, not held back by
	// client-go's default 5 requests per second; the framework's helpers
	// use it too.
	rc := rest.CopyConfig(env.CP.RESTConfig)
	rc.QPS, rc.Burst = 2000, 2000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	env.Client = client
	routeLab(t, env)
	if cfg.mode == "iptables" && cfg.variant == "legacy" {
		kubeProxyBin = useIPTablesLegacy(t, env, kubeProxyBin)
	}

	var proxies []*proxy
	for _, name := range cfg.proxies {
		switch name {
		case "wasp":
			proxies = append(proxies, newWasp(env, [2]string{fw.PodsA[0], fw.PodsA[1]}, cfg.mode, cfg.minSync, cfg.profiles != "", cfg.module))
		case "kube-proxy":
			proxies = append(proxies, newKubeProxy(t, env, kubeProxyBin, fw.OtherNode, [2]string{fw.PodsB[0], fw.PodsB[1]}, cfg.mode, cfg.minSync))
		}
	}
	env.Namespace(ctx, t, loadNamespace)
	env.Namespace(ctx, t, probeNamespace)
	// Each proxy's steady probe: answers once the proxy has programmed
	// everything after a start, and carries the dataplane measurements.
	steady := map[string]*v1.Service{}
	for _, p := range proxies {
		svc := env.CreateService(ctx, t, fw.ServiceSpec{Name: p.name + "-steady", Namespace: probeNamespace})
		env.SetEndpoints(ctx, t, svc, v1.IPv4Protocol, fw.Ready(p.pods[0])...)
		steady[p.name] = svc
	}

	var results []*result
	broken := map[string]bool{}
	loaded := 0
	for _, n := range cfg.sizes {
		start := time.Now()
		if err := loadServices(ctx, client, loaded, n); err != nil {
			t.Fatalf("load %d Services: %v", n, err)
		}
		el := time.Since(start)
		t.Logf("%d Services x %d endpoints loaded: +%d in %s (%.0f objects/s), load %s",
			n, loadEndpoints, n-loaded, el.Round(time.Millisecond), float64(2*(n-loaded))/el.Seconds(), loadavg())
		loaded = n
		for _, p := range proxies {
			if broken[p.name] {
				continue
			}
			r := &result{size: n, proxy: p.name}
			results = append(results, r)
			if !t.Run(human(n)+"/"+p.name, func(t *testing.T) { measure(ctx, t, env, p, steady[p.name], r, cfg) }) {
				broken[p.name] = true // do not spend the larger sizes on it
			}
			t.Logf("%s at %d Services:\n%s", p.name, n, details(r))
		}
		if ctx.Err() != nil {
			break
		}
	}

	report := table(results, cfg, describeMachine())
	t.Logf("results:\n%s", report)
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// measure runs every measurement of one proxy at one size, filling r.
func measure(ctx context.Context, t *testing.T, env *fw.Env, p *proxy, steady *v1.Service, r *result, cfg config) {
	node := p.node.NS

	// Warm-up: start, program this size, stop. The measured restart then
	// finds this size's rules in the kernel, as after a real restart. A
	// Service created while the proxy is down answers only once the proxy
	// has synced (the rules left from the previous size do not have it).
	warm := env.CreateService(ctx, t, fw.ServiceSpec{Name: fmt.Sprintf("%s-warm-%d", p.name, r.size), Namespace: probeNamespace})
	env.SetEndpoints(ctx, t, warm, v1.IPv4Protocol, fw.Ready(p.pods[0])...)
	proc := p.start(t, env)
	keepLog(t, cfg, proc, fmt.Sprintf("%s-%d-warm.log", p.name, r.size))
	at, err := firstAnswer(ctx, node, serviceAddr(t, warm), p.pods[0], programLimit, alive(p.name, proc))
	if err != nil {
		t.Fatalf("warm-up start: %v", err)
	}
	r.warm = at.Sub(proc.Started)
	quiet(ctx, t, proc)
	// Memory right after a start's sync, as a dashboard sees it once the
	// proxy settled.
	time.Sleep(settle)
	if r.rssFirst, r.hwmFirst, err = memory(proc.Pid()); err != nil {
		t.Fatal(err)
	}
	proc.Stop()

	// Full sync after a restart: a Service created while the proxy is down
	// answers once the first sync is done.
	probe := env.CreateService(ctx, t, fw.ServiceSpec{Name: fmt.Sprintf("%s-restart-%d", p.name, r.size), Namespace: probeNamespace})
	env.SetEndpoints(ctx, t, probe, v1.IPv4Protocol, fw.Ready(p.pods[0])...)
	proc = p.start(t, env)
	keepLog(t, cfg, proc, fmt.Sprintf("%s-%d.log", p.name, r.size))
	at, err = firstAnswer(ctx, node, serviceAddr(t, probe), p.pods[0], programLimit, alive(p.name, proc))
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	r.full = at.Sub(proc.Started)
	r.fullReported = firstSync(t, proc, p.marker)
	quiet(ctx, t, proc)

	// One new Service, from the API call until it answers. Before each
	// change the proxy rests two minimum sync periods, so its rate
	// limiter's burst (2 syncs, one token per period, upstream's and
	// wasp's alike) is full again: this measures one change reaching an
	// idle proxy, not the limiter draining under back-to-back changes.
	for i := range cfg.repeat {
		time.Sleep(2 * cfg.minSync)
		off := logSize(proc.LogPath)
		start := time.Now()
		svc := env.CreateService(ctx, t, fw.ServiceSpec{Name: fmt.Sprintf("%s-new-%d-%d", p.name, r.size, i), Namespace: probeNamespace})
		env.CreateEndpoints(ctx, t, svc, v1.IPv4Protocol, fw.Ready(p.pods[0])...)
		api := time.Since(start)
		at, err := firstAnswer(ctx, node, serviceAddr(t, svc), p.pods[0], changeLimit, alive(p.name, proc))
		if err != nil {
			t.Fatalf("new Service %s: %v", svc.Name, err)
		}
		r.newService = append(r.newService, at.Sub(start))
		r.newServiceAPI = append(r.newServiceAPI, api)
		r.newServiceReported = append(r.newServiceReported, lastSync(proc, p.marker, off))
		quiet(ctx, t, proc)
	}

	// One endpoint change: the restart probe's endpoint moves to the other
	// pod and back; done when the new pod answers.
	for i := range cfg.repeat {
		time.Sleep(2 * cfg.minSync)
		to := p.pods[(i+1)%2]
		off := logSize(proc.LogPath)
		start := time.Now()
		env.SetEndpoints(ctx, t, probe, v1.IPv4Protocol, fw.Ready(to)...)
		at, err := firstAnswer(ctx, node, serviceAddr(t, probe), to, changeLimit, alive(p.name, proc))
		if err != nil {
			t.Fatalf("endpoint change of %s to %s: %v", probe.Name, to, err)
		}
		r.change = append(r.change, at.Sub(start))
		r.changeReported = append(r.changeReported, lastSync(proc, p.marker, off))
		quiet(ctx, t, proc)
	}

	// Memory of the proxy process itself (nsenter execs it: same PID), in
	// the steady state a dashboard shows: settled after the last change.
	time.Sleep(settle)
	if c, want := comm(proc.Pid()), filepath.Base(p.bin); !strings.HasPrefix(want, c) || c == "" {
		t.Fatalf("pid %d is %q, not %s", proc.Pid(), c, want)
	}
	if r.rss, r.hwm, err = memory(proc.Pid()); err != nil {
		t.Fatal(err)
	}
	if p.profiling != "" && cfg.profiles != "" {
		base := filepath.Join(cfg.profiles, fmt.Sprintf("%s-%d", p.name, r.size))
		if err := saveHeapProfile(ctx, node, p.profiling, base); err != nil {
			t.Errorf("heap profile: %v", err)
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", proc.Pid())); err == nil {
			_ = os.WriteFile(base+".smaps", b, 0o644)
		}
	}

	// Dataplane: from the client, through this proxy's node, to the
	// steady probe's ClusterIP and straight to its pod.
	setRoute(t, env.Cluster.Client.NS, controlplane.ServiceCIDR, p.node.IPv4.String())
	pod := env.Cluster.Pod(p.pods[0])
	lat, err := connectLatencies(env.Cluster.Client.NS,
		[]netip.AddrPort{serviceAddr(t, steady), netip.AddrPortFrom(pod.IPv4, fw.EchoPort)}, cfg.conns)
	if err != nil {
		t.Fatalf("dataplane: %v", err)
	}
	r.cluster, r.direct = lat[0], lat[1]
	r.load = loadavg()
	// Memory after idling: what a node that sees no change for a while
	// keeps resident (the Go runtime returns freed memory to the OS over
	// minutes; kube-proxy's and wasp's alike).
	if cfg.idle > 0 {
		time.Sleep(cfg.idle)
		if r.rssIdle, r.hwmIdle, err = memory(proc.Pid()); err != nil {
			t.Fatal(err)
		}
	}
	proc.Stop()
	r.done = true
}

// keepLog copies the process's log into cfg.logs as name when t ends, if
// WASP_PERF_LOGS asked for it.
func keepLog(t *testing.T, cfg config, proc *fw.Process, name string) {
	if cfg.logs == "" {
		return
	}
	t.Cleanup(func() {
		if err := os.MkdirAll(cfg.logs, 0o755); err != nil {
			t.Log(err)
			return
		}
		if err := os.WriteFile(filepath.Join(cfg.logs, name), []byte(proc.Log()), 0o644); err != nil {
			t.Log(err)
		}
	})
}

// quiet waits until the proxy is idle, and says so in the log when it
// does not get there.
func quiet(ctx context.Context, t *testing.T, proc *fw.Process) {
	t.Helper()
	if waited, ok := waitQuiet(ctx, proc.Pid(), quietLimit); !ok {
		t.Logf("pid %d still busy after %s, measuring anyway", proc.Pid(), waited.Round(time.Second))
	}
}

// firstSync returns the duration the proxy reported for its first sync,
// waiting for its log line, or 0 if it never came.
func firstSync(t *testing.T, proc *fw.Process, marker string) time.Duration {
	t.Helper()
	deadline := time.Now().Add(syncLogLimit)
	for {
		if s := syncs(proc.Log(), marker); len(s) > 0 {
			return s[0]
		}
		if time.Now().After(deadline) {
			t.Logf("no %s line in %s within %s of the answer", marker, proc.LogPath, syncLogLimit)
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lastSync returns the duration of the last sync logged after offset: the
// one that programmed the change just measured (a proxy logs after its
// sync, so the line may trail the answer a little).
func lastSync(proc *fw.Process, marker string, offset int64) time.Duration {
	time.Sleep(200 * time.Millisecond)
	s := syncs(logSince(proc.LogPath, offset), marker)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

// serviceAddr is the IPv4 ClusterIP and port of svc.
func serviceAddr(t *testing.T, svc *v1.Service) netip.AddrPort {
	t.Helper()
	return netip.AddrPortFrom(fw.ClusterIP(t, svc, v1.IPv4Protocol), uint16(svc.Spec.Ports[0].Port))
}

// routeLab adds the routes the measurements need to the lab:
//   - every node routes the Service CIDR out of its LAN interface, as a
//     node with a default route would, so that packets a node sends to a
//     ClusterIP reach its proxy's output hook (nothing on the LAN answers
//     for them);
//   - the client routes each node's pod range through that node, so the
//     direct path to a pod and the ClusterIP path through its node cross
//     the same hops; which node carries the Service CIDR is set per proxy.
func routeLab(t *testing.T, env *fw.Env) {
	t.Helper()
	for _, n := range env.Cluster.Nodes {
		setRoute(t, n.NS, controlplane.ServiceCIDR, "dev eth0")
		setRoute(t, env.Cluster.Client.NS, n.PodCIDR4.String(), n.IPv4.String())
	}
}

// setRoute replaces the IPv4 route to dst in ns: via a gateway address,
// or "dev <link>".
func setRoute(t *testing.T, ns *netlab.NS, dst, via string) {
	t.Helper()
	args := []string{"-n", ns.FullName(), "route", "replace", dst}
	if dev, ok := strings.CutPrefix(via, "dev "); ok {
		args = append(args, "dev", dev)
	} else {
		args = append(args, "via", via)
	}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// useIPTablesLegacy makes both proxies use iptables-legacy: wasp finds
// kubelet's hint chain in legacy's mangle table of its node, as on a
// legacy node; kube-proxy, a bare binary without the image's wrapper,
// runs the iptables commands first in its PATH, so it runs through a
// script that puts links to the legacy binaries there. It returns what to
// run as kube-proxy (the script execs it: the PID is kube-proxy's).
func useIPTablesLegacy(t *testing.T, env *fw.Env, kubeProxyBin string) string {
	t.Helper()
	if out, err := env.ProxyNS().Command(context.Background(), "iptables-legacy", "-w", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT").CombinedOutput(); err != nil {
		t.Fatalf("iptables-legacy hint in %s: %v\n%s", fw.ProxyNode, err, out)
	}
	if kubeProxyBin == "" {
		return ""
	}
	dir := filepath.Join(env.Dir, "iptables-legacy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			target, err := exec.LookPath(fam + "-legacy" + suffix)
			if err != nil {
				t.Fatalf("iptables-legacy for kube-proxy: %v", err)
			}
			if err := os.Symlink(target, filepath.Join(dir, fam+suffix)); err != nil {
				t.Fatal(err)
			}
		}
	}
	script := filepath.Join(env.Dir, "kube-proxy-legacy")
	body := fmt.Sprintf("#!/bin/sh\nPATH=%s:$PATH exec %s \"$@\"\n", dir, kubeProxyBin)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}
