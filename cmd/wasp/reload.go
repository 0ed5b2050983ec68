package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// moduleReloadPeriod is how often the module files are looked at.
const moduleReloadPeriod = 2 * time.Second

// moduleReloader reloads the module chain, without a restart, when a
// module file of --module changes (a new file written, a ConfigMap
// volume's symlink swapped): read, compile, check the stage, then swap
// into the running proxy, which re-evaluates every service port and
// programs only what changed. A module that fails to load leaves the
// running chain in place (the last good version keeps serving) and is not
// tried again until its file changes again.
type moduleReloader struct {
	rt    *runtime.Runtime
	specs []chain.Spec
	// swap hands a loaded chain's modules to the proxy; done as
	// proxy.SetModules's.
	swap func(mods [len(abi.Stages) + 1]pipeline.Module, done func(applied bool))
	// loaded is told about every chain swapped in (metrics).
	loaded func(*chain.Chain)

	mu      sync.Mutex
	current *chain.Chain         // the chain the proxy runs
	seen    map[string]fileState // by path: the file state last looked at
}

// fileState is what tells that a file changed without reading it.
type fileState struct {
	size    int64
	modTime time.Time
	ino     uint64
}

// moduleFiles returns the paths of the file sources of specs.
func moduleFiles(specs []chain.Spec) []string {
	var out []string
	for _, s := range specs {
		switch {
		case strings.HasPrefix(s.Source, "file://"):
			out = append(out, strings.TrimPrefix(s.Source, "file://"))
		case !strings.Contains(s.Source, ":"):
			out = append(out, s.Source)
		}
	}
	return out
}

func newModuleReloader(rt *runtime.Runtime, specs []chain.Spec, current *chain.Chain) *moduleReloader {
	r := &moduleReloader{rt: rt, specs: specs, current: current, seen: map[string]fileState{}}
	for _, path := range moduleFiles(specs) {
		r.seen[path], _ = statFile(path)
	}
	return r
}

func statFile(path string) (fileState, error) {
	fi, err := os.Stat(path) // follows symlinks: a ConfigMap swaps them
	if err != nil {
		return fileState{}, err
	}
	return fileState{size: fi.Size(), modTime: fi.ModTime(), ino: inode(fi)}, nil
}

// run looks at the module files every period until ctx is done.
func (r *moduleReloader) run(ctx context.Context, period time.Duration) {
	if len(r.seen) > 0 {
		every(ctx, period, func() { r.check(ctx) })
	}
}

// check reloads the chain if a module file changed since the last look.
func (r *moduleReloader) check(ctx context.Context) {
	changed := false
	for path, old := range r.seen {
		st, err := statFile(path)
		if err != nil || st == old {
			continue // a file that went away keeps its module until it is back
		}
		r.seen[path] = st
		changed = true
	}
	if !changed {
		return
	}
	logger := klog.FromContext(ctx)
	next, err := chain.Load(ctx, r.rt, r.specs)
	if err != nil {
		logger.Error(err, "Module reload failed; the running modules stay")
		return
	}
	r.mu.Lock()
	cur := r.current
	r.mu.Unlock()
	if sameModules(cur, next) {
		next.Close()
		return
	}
	logger.Info("Module files changed: swapping the module chain", "modules", next.Sources[1:], "digests", digests(next))
	r.swap(next.PipelineModules(), func(applied bool) {
		if !applied {
			next.Close()
			return
		}
		r.mu.Lock()
		old := r.current
		r.current = next
		r.mu.Unlock()
		old.Close()
		if r.loaded != nil {
			r.loaded(next)
		}
	})
}

// close closes the chain the proxy last ran; the proxy must be stopped.
func (r *moduleReloader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.current.Close()
}

func sameModules(a, b *chain.Chain) bool {
	for _, s := range abi.Stages {
		if a.Modules[s].Digest != b.Modules[s].Digest {
			return false
		}
	}
	return true
}

func digests(c *chain.Chain) []string {
	var out []string
	for _, s := range abi.Stages {
		out = append(out, c.Modules[s].Digest)
	}
	return out
}
