package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// defaultGCPercent is wasp run's GOGC when the operator sets none. A full
// sync at 10k Services briefly holds about twice the proxy's steady live
// heap (most of it the nftables backend's netlink messages); with Go's
// default of 100 the heap may then grow to twice that again before a
// collection, and the pages stay with the process. 50 trades a few percent
// of a full sync's CPU for a peak a quarter lower (docs/performance.md,
// "Memory at 10k Services"); a partial sync allocates too little for the
// setting to matter.
const defaultGCPercent = 50

// memoryLimitFraction is the share of the cgroup's memory limit that wasp
// run gives the Go runtime as its soft limit (GOMEMLIMIT) when the operator
// sets none: the rest is for what the Go heap does not count (goroutine
// stacks, the binary, the kernel's socket buffers).
const memoryLimitFraction = 0.9

// memoryPolicy is the garbage collector's configuration chosen at start.
type memoryPolicy struct {
	gcPercent   int    // -1: GOGC=off
	gcFromEnv   bool   // GOGC was set
	limit       int64  // bytes; math.MaxInt64: none
	limitSource string // "GOMEMLIMIT", "cgroup" or "" (none)
}

// setMemoryPolicy sets the collector's target and soft limit unless the
// operator set GOGC or GOMEMLIMIT, and returns what is in effect. cgroupLimit
// returns the memory limit of the process's cgroup (0: none).
func setMemoryPolicy(getenv func(string) string, cgroupLimit func() (int64, error)) memoryPolicy {
	var p memoryPolicy
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	} else {
		p.gcFromEnv = true
	}
	// SetGCPercent returns the previous value: read it back unchanged.
	p.gcPercent = debug.SetGCPercent(-1)
	debug.SetGCPercent(p.gcPercent)

	if getenv("GOMEMLIMIT") != "" {
		p.limitSource = "GOMEMLIMIT"
	} else if l, err := cgroupLimit(); err == nil && l > 0 {
		debug.SetMemoryLimit(int64(float64(l) * memoryLimitFraction))
		p.limitSource = "cgroup"
	}
	p.limit = debug.SetMemoryLimit(-1) // -1: read without changing
	return p
}

// freeOSMemory returns the heap a full sync freed to the operating system
// at once. Go's background scavenger would return it too, but slowly (it
// paces itself to about 1% of a CPU), so after the first full sync the
// resident size would stay near its peak for minutes. It costs one
// blocking collection per full sync: tens of milliseconds at 10k Services,
// against the seconds of the sync.
func freeOSMemory(ctx context.Context) { releaseMemory(ctx, "full sync") }

// releaseMemory collects and returns all free heap to the operating
// system, logging why.
func releaseMemory(ctx context.Context, why string) {
	start := time.Now()
	debug.FreeOSMemory()
	if logger := klog.FromContext(ctx).V(2); logger.Enabled() {
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		logger.Info("Returned free memory to the OS", "after", why, "elapsed", time.Since(start),
			"heapInUseMiB", ms.HeapInuse>>20, "heapReleasedMiB", ms.HeapReleased>>20, "sysMiB", ms.Sys>>20)
	}
}

// idleReleasePeriod is how often releaseWhenIdle looks at the sync count:
// free memory goes back to the OS between one and two periods after the
// last sync of a burst.
const idleReleasePeriod = 10 * time.Second

// releaseWhenIdle returns free memory to the operating system once the
// proxy has stopped syncing, until ctx is done. Between collections the
// heap grows to 1 + GOGC/100 times the live heap, and the scavenger only
// trims what lies beyond that, so after a burst of changes the process
// would keep that garbage's pages for good. One forced collection when the
// proxy goes idle gives them back; while changes keep coming, nothing is
// forced and the collector paces itself. syncs returns the number of syncs
// so far.
func releaseWhenIdle(ctx context.Context, syncs func() uint64) {
	r := idleReleaser{syncs: syncs, release: func() { releaseMemory(ctx, "syncs stopped") }}
	r.last = syncs()
	every(ctx, idleReleasePeriod, r.tick)
}

// every calls fn every period until ctx is done.
func every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// idleReleaser calls release once per burst of syncs, at the first tick
// that sees no sync since the previous one.
type idleReleaser struct {
	syncs   func() uint64
	release func()
	last    uint64 // syncs at the previous tick
	pending bool   // syncs ran since the last release
}

func (r *idleReleaser) tick() {
	switch n := r.syncs(); {
	case n != r.last:
		r.last, r.pending = n, true
	case r.pending:
		r.pending = false
		r.release()
	}
}

// cgroupMemoryLimit returns the memory limit of this process's cgroup, v2
// or v1; 0 when there is none or it cannot be read.
func cgroupMemoryLimit() (int64, error) {
	return cgroupLimitFrom("/proc/self/cgroup", "/sys/fs/cgroup")
}

func cgroupLimitFrom(procCgroup, root string) (int64, error) {
	f, err := os.Open(procCgroup)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var v2Path, v1Path string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2Path = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			v1Path = parts[2]
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	var candidates []string
	if v2Path != "" {
		// Inside a container's cgroup namespace the path is "/", and the
		// container's own limit is at the root of the mount.
		candidates = append(candidates, filepath.Join(root, v2Path, "memory.max"), filepath.Join(root, "memory.max"))
	}
	if v1Path != "" {
		candidates = append(candidates, filepath.Join(root, "memory", v1Path, "memory.limit_in_bytes"),
			filepath.Join(root, "memory", "memory.limit_in_bytes"))
	}
	for _, c := range candidates {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", c, s, err)
		}
		// cgroup v1 reports "no limit" as the largest page-aligned int64.
		if n <= 0 || n >= 1<<62 {
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}

// serveProfiling serves Go's profiles (net/http/pprof) under /debug/pprof/
// on addr until ctx is done, like kube-proxy with --profiling. It is off
// unless --profiling-bind-address is given, and should stay on a loopback
// address: profiles reveal the cluster's Services and cost CPU to take.
func serveProfiling(ctx context.Context, addr string) {
	logger := klog.FromContext(ctx)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Error(err, "Profiling server not started", "address", addr)
		return
	}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	logger.Info("Serving profiles", "address", ln.Addr().String(), "path", "/debug/pprof/")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error(err, "Profiling server failed", "address", addr)
	}
}
