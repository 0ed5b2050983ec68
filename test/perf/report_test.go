//go:build linux

package perf

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wasp-proxy/wasp/test/controlplane"
)

// describeMachine names the CPU, its count, memory, kernel, Go and the load.
func describeMachine() string {
	model, mem := "", ""
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d CPUs (%s), %s, Linux %s, %s, load %s",
		runtime.NumCPU(), model, mem, strings.TrimSpace(string(kernel)), runtime.Version(), loadavg())
}

// loadavg is the 1, 5 and 15 minute load average.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// details lists every sample of one result, for the test log.
func details(r *result) string {
	var b strings.Builder
	list := func(ds []time.Duration) string {
		var s []string
		for _, d := range ds {
			s = append(s, seconds(d))
		}
		return strings.Join(s, ", ")
	}
	fmt.Fprintf(&b, "  start with the previous rules until answered: %s\n", seconds(r.warm))
	fmt.Fprintf(&b, "  full sync after restart: reported %s, start until answered %s\n", seconds(r.fullReported), seconds(r.full))
	fmt.Fprintf(&b, "  new Service until answered: %s (API calls %s; reported syncs %s)\n", list(r.newService), list(r.newServiceAPI), list(r.newServiceReported))
	fmt.Fprintf(&b, "  endpoint change until answered: %s (reported syncs %s)\n", list(r.change), list(r.changeReported))
	fmt.Fprintf(&b, "  VmRSS %s, VmHWM %s after the first start's sync; %s, %s after a restart and the changes; %s, %s after idling\n",
		mib(r.rssFirst), mib(r.hwmFirst), mib(r.rss), mib(r.hwm), mib(r.rssIdle), mib(r.hwmIdle))
	if len(r.cluster) > 0 {
		fmt.Fprintf(&b, "  dataplane: ClusterIP median %s p99 %s, pod median %s p99 %s (%d connections each)\n",
			seconds(median(r.cluster)), seconds(percentile(r.cluster, 99)),
			seconds(median(r.direct)), seconds(percentile(r.direct, 99)), len(r.cluster))
	}
	fmt.Fprintf(&b, "  load average afterwards: %s", r.load)
	return b.String()
}

func mib(n int64) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// table renders the results: one block per size, control plane then
// dataplane, with the ratio wasp/kube-proxy.
func table(results []*result, cfg config, machine string) string {
	var b strings.Builder
	mode := cfg.mode
	if mode == "iptables" {
		mode += ", iptables-" + cfg.variant
	}
	fmt.Fprintf(&b, "wasp vs upstream kube-proxy %s (%s mode, both), Services x %d endpoints\n", controlplane.KubernetesVersion, mode, loadEndpoints)
	fmt.Fprintf(&b, "machine at the end: %s\n", machine)
	fmt.Fprintf(&b, "min sync period %s for both; changes: median of %d; dataplane: %d sequential connections per path, connect + one request\n\n", cfg.minSync, cfg.repeat, cfg.conns)

	find := func(size int, proxy string) *result {
		for _, r := range results {
			if r.size == size && r.proxy == proxy {
				return r
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "measurement\twasp\tkube-proxy\twasp/kube-proxy\t")
	dur := func(size int, label string, get func(*result) time.Duration) {
		var vals [2]time.Duration
		for i, name := range []string{"wasp", "kube-proxy"} {
			if r := find(size, name); r != nil {
				vals[i] = get(r)
			}
		}
		fmt.Fprintf(w, "%s %s\t%s\t%s\t%s\t\n", label, human(size), seconds(vals[0]), seconds(vals[1]), ratio(float64(vals[0]), float64(vals[1])))
	}
	mem := func(size int, label string, get func(*result) int64) {
		var vals [2]int64
		for i, name := range []string{"wasp", "kube-proxy"} {
			if r := find(size, name); r != nil {
				vals[i] = get(r)
			}
		}
		fmt.Fprintf(w, "%s %s\t%s\t%s\t%s\t\n", label, human(size), mib(vals[0]), mib(vals[1]), ratio(float64(vals[0]), float64(vals[1])))
	}
	for _, n := range cfg.sizes {
		if find(n, "wasp") == nil && find(n, "kube-proxy") == nil {
			continue
		}
		dur(n, "full sync, reported", func(r *result) time.Duration { return r.fullReported })
		dur(n, "full sync, start until answered", func(r *result) time.Duration { return r.full })
		dur(n, "new Service until answered", func(r *result) time.Duration { return median(r.newService) })
		dur(n, "new Service, after its API calls", func(r *result) time.Duration { return median(afterAPI(r)) })
		dur(n, "endpoint change until answered", func(r *result) time.Duration { return median(r.change) })
		dur(n, "new Service, reported sync", func(r *result) time.Duration { return median(r.newServiceReported) })
		dur(n, "endpoint change, reported sync", func(r *result) time.Duration { return median(r.changeReported) })
		mem(n, "VmRSS after first sync", func(r *result) int64 { return r.rssFirst })
		mem(n, "VmHWM after first sync", func(r *result) int64 { return r.hwmFirst })
		mem(n, "VmRSS after restart", func(r *result) int64 { return r.rss })
		mem(n, "VmHWM after restart", func(r *result) int64 { return r.hwm })
		if cfg.idle > 0 {
			mem(n, "VmRSS after idling "+cfg.idle.String(), func(r *result) int64 { return r.rssIdle })
		}
		fmt.Fprintln(w, "\t\t\t\t")
	}
	w.Flush()

	fmt.Fprintf(&b, "dataplane (client namespace -> node -> local pod)\n")
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "proxy\tServices\tClusterIP median\tp99\tpod direct median\tp99\tratio median\tratio p99\tload after\t")
	for _, name := range []string{"wasp", "kube-proxy"} {
		for _, n := range cfg.sizes {
			r := find(n, name)
			if r == nil || len(r.cluster) == 0 {
				continue
			}
			cm, cp, dm, dp := median(r.cluster), percentile(r.cluster, 99), median(r.direct), percentile(r.direct, 99)
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, human(n), seconds(cm), seconds(cp), seconds(dm), seconds(dp),
				ratio(float64(cm), float64(dm)), ratio(float64(cp), float64(dp)), r.load)
		}
	}
	w.Flush()
	for _, r := range results {
		if !r.done {
			fmt.Fprintf(&b, "incomplete: %s at %d Services (see the test log)\n", r.proxy, r.size)
		}
	}
	return b.String()
}

// afterAPI is, for each new Service, the time from the return of its last
// API call until it answered: the proxy's share, which no apiserver's
// latency is part of.
func afterAPI(r *result) []time.Duration {
	out := make([]time.Duration, len(r.newService))
	for i, d := range r.newService {
		out[i] = d - r.newServiceAPI[i]
	}
	return out
}
