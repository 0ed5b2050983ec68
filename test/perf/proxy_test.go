//go:build linux

package perf

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/internal/netlab"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// Log messages of the line each proxy writes after every sync, with the
// sync's duration in elapsed= (at -v=2 for both).
const (
	waspSyncMarker      = `"Sync done"`
	kubeProxySyncMarker = `"SyncProxyRules complete"`
)

// proxy is one service proxy under test, alone on its node.
type proxy struct {
	name string       // "wasp" or "kube-proxy"
	node *netlab.Node // the node namespace it runs in
	// pods are two pods of node: probes point at the first, endpoint
	// changes switch between the two. Local pods keep the paths of both
	// proxies alike (one forwarding hop, no cross-node traffic).
	pods   [2]string
	marker string // see waspSyncMarker
	bin    string
	args   []string
	// profiling is the address of the proxy's /debug/pprof/ inside its
	// node namespace; "": not served.
	profiling string
}

// newKubeProxy prepares upstream kube-proxy on node, with its own
// apiserver forwarder.
func newKubeProxy(t *testing.T, env *fw.Env, bin, node string, pods [2]string, mode string, minSync time.Duration) *proxy {
	t.Helper()
	kubeconfig, err := env.ForwardAPIServer(t, node)
	if err != nil {
		t.Fatal(err)
	}
	args, err := env.KubeProxyArgs(node, kubeconfig, mode, minSync)
	if err != nil {
		t.Fatal(err)
	}
	return &proxy{
		name: "kube-proxy", node: env.Cluster.Node(node), pods: pods,
		marker: kubeProxySyncMarker, bin: bin,
		args: args,
	}
}

// newWasp prepares wasp on the framework's proxy node with the framework's
// flags (which give -v 2), the mode under test and module (STAGE=SOURCE,
// if any), but kube-proxy's
// minimum sync period: the
// framework's 100ms would favour wasp. With profiling, wasp serves its
// profiles on the node's loopback.
func newWasp(env *fw.Env, pods [2]string, mode string, minSync time.Duration, profiling bool, module string) *proxy {
	args := append(env.DefaultArgs(), "--proxy-mode", mode)
	if module != "" {
		args = append(args, "--module", module)
	}
	if i := slices.Index(args, "--min-sync-period"); i >= 0 && i+1 < len(args) {
		args[i+1] = minSync.String()
	} else {
		args = append(args, "--min-sync-period", minSync.String())
	}
	p := &proxy{
		name: "wasp", node: env.Cluster.Node(fw.ProxyNode), pods: pods,
		marker: waspSyncMarker, bin: env.WaspBin, args: args,
	}
	if profiling {
		p.profiling = "127.0.0.1:6060"
		p.args = append(p.args, "--profiling-bind-address", p.profiling)
	}
	return p
}

// saveHeapProfile writes the heap profile that the proxy serves at addr
// inside ns to base.heap, and the same in text with the runtime's memory
// statistics to base.heap.txt.
func saveHeapProfile(ctx context.Context, ns *netlab.NS, addr, base string) error {
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return ns.Dial(ctx, network, addr)
		},
	}}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return err
	}
	for _, f := range []struct{ query, path string }{{"", base + ".heap"}, {"?debug=1", base + ".heap.txt"}} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap"+f.query, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", req.URL, resp.Status)
		}
		if err := os.WriteFile(f.path, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// start runs the proxy in its node's namespace until t ends or stop.
func (p *proxy) start(t *testing.T, env *fw.Env) *fw.Process {
	t.Helper()
	return env.StartProcess(t, p.node.NS, p.bin, p.args...)
}

// alive returns an error once proc has exited, for pollers to give up.
func alive(name string, proc *fw.Process) func() error {
	return func() error {
		if done, err := proc.Exited(); done {
			return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", name, err, proc.LogPath, lastLines(proc.Log(), 30))
		}
		return nil
	}
}

// memory reads VmRSS and VmHWM of pid and of its descendants (wasp's
// module workers and compile children), each summed, in bytes: the
// node's cost of the proxy. The sum of the peaks bounds the peak of the
// sum.
func memory(pid int) (rss, hwm int64, err error) {
	rss, hwm, err = processMemory(pid)
	if err != nil {
		return 0, 0, err
	}
	for _, child := range children(pid) {
		r, h, err := memory(child)
		if err != nil {
			continue // exited since it was listed
		}
		rss, hwm = rss+r, hwm+h
	}
	return rss, hwm, nil
}

// children lists the processes whose parent is pid, from the children
// files of its threads.
func children(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(field); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// processMemory reads VmRSS and VmHWM of pid alone, in bytes.
func processMemory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", pid)
	}
	return rss, hwm, s.Err()
}

// comm returns the command name of pid.
func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// cpuTicks returns the CPU time pid and its reaped children (kube-proxy's
// nft processes) used, in clock ticks (USER_HZ, 100 per second on Linux).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(rest) // f[0] is field 3
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	var sum int64
	for _, i := range []int{14, 15, 16, 17} { // utime stime cutime cstime
		v, err := strconv.ParseInt(f[i-3], 10, 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// Quietness: a proxy is idle when it used at most quietTicks of CPU over
// the last quietWindow.
const (
	quietWindow = time.Second
	quietTicks  = 5 // 5% of one core
)

// waitQuiet waits until the proxy is idle, so that a measurement does not
// start in the middle of its previous work, or until limit. It reports
// how long it waited and whether the proxy became idle.
func waitQuiet(ctx context.Context, pid int, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	const step = quietWindow / 4
	var window []int64
	for time.Since(start) < limit && ctx.Err() == nil {
		ticks, err := cpuTicks(pid)
		if err != nil {
			return time.Since(start), false
		}
		window = append(window, ticks)
		if len(window) > 5 {
			window = window[1:]
		}
		if len(window) == 5 && window[4]-window[0] <= quietTicks {
			return time.Since(start), true
		}
		time.Sleep(step)
	}
	return time.Since(start), false
}

// logSize is the current size of a log file, to read what comes after.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns the part of the log file after offset.
func logSince(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
