// Package reload swaps the module chain of a running proxy, without a
// restart: when a module file of the configuration changes, and when the
// cluster's ServiceProxyModules choose other modules for this node. It also
// turns the configuration's modules into chain.Specs, and loads the chain
// wasp starts with (LoadStart).
package reload

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/catalog"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/metrics"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/printable"
)

// Period is how often the module files are looked at.
const Period = 2 * time.Second

// Reloader reloads the module chain, without a restart, when a
// module file of the configuration changes (a new file written, a ConfigMap
// volume's symlink swapped): read, compile, check the stage, then swap
// into the running proxy, which re-evaluates every service port and
// programs only what changed. A module that fails to load leaves the
// running chain in place (the last good version keeps serving) and is not
// tried again until its file changes again. It does the same when
// SetCatalog hands it the cluster's ServiceProxyModules' choice. Set its
// exported fields before Run.
type Reloader struct {
	rt    *runtime.Runtime
	specs []chain.Spec // of the configuration: --module or the config file
	// Signatures are the node-wide signature policies, which the
	// ServiceProxyModules' modules must satisfy too.
	Signatures []oci.SignaturePolicy
	// FileDirs are the directories whose files ServiceProxyModules may
	// name (moduleFileDirectories); none: no file.
	FileDirs []string
	// Swap hands a loaded chain's modules to the proxy; done as
	// proxy.SetModules's.
	Swap func(mods [len(abi.Stages) + 1]pipeline.Module, policies [len(abi.Stages) + 1]pipeline.FailurePolicy, done func(applied bool))
	// Loaded is told about every chain swapped in (metrics).
	Loaded func(*chain.Chain)

	mu      sync.Mutex
	current *chain.Chain         // the chain the proxy runs
	seen    map[string]fileState // by path: the file state last looked at

	// The ServiceProxyModules' choice for this node (host/catalog), which
	// overrides the configuration's module of its stages.
	catalogMu sync.Mutex
	catalog   map[abi.Stage]catalog.Choice
	wake      chan struct{} // cap 1: the choice changed
	retry     time.Duration // backoff of a failed catalog load; 0: none pending

	// Status, if set, writes this node's entry in an object's status
	// (nil: remove it); reported are the objects with an entry.
	Status   func(ctx context.Context, object string, st *catalog.NodeStatus) error
	reported map[string]bool
	// Reloaded, if set, counts every load: its trigger (metrics.Reload*)
	// and result.
	Reloaded func(trigger, result string)
	// LoadFailed, if set, is told about every load that failed (Events).
	LoadFailed func(err error)
	// Observer, if set, is told about the loads' pulls and stages
	// (metrics).
	Observer chain.Observer
	// NativeBuiltins is the loads' chain.Loader.NativeBuiltins: the
	// stages left to their builtin module run it natively.
	NativeBuiltins bool
	// Workers is the loads' chain.Loader.Workers: the modules run in
	// worker processes under this runtime configuration.
	Workers *runtime.Config
}

// count reports a load's outcome to reloaded and loadFailed.
func (r *Reloader) count(trigger string, swapped bool, err error) {
	result := metrics.ReloadUnchanged
	switch {
	case err != nil:
		result = metrics.ReloadFailed
		if r.LoadFailed != nil {
			r.LoadFailed(err)
		}
	case swapped:
		result = metrics.ReloadSwapped
	}
	if r.Reloaded != nil {
		r.Reloaded(trigger, result)
	}
}

// catalogRetryMin and catalogRetryMax bound the backoff between loads of
// a catalog choice that failed (a registry down, a module that does not
// compile): crash-loop backoff, without a crash.
const (
	catalogRetryMin = 5 * time.Second
	catalogRetryMax = 5 * time.Minute
)

// SetCatalog hands the reloader the node's choice of ServiceProxyModules;
// it is applied on the reloader's goroutine.
func (r *Reloader) SetCatalog(c map[abi.Stage]catalog.Choice) {
	r.catalogMu.Lock()
	r.catalog = c
	r.catalogMu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// wanted returns the specs the chain should have: the configuration's,
// with each stage the catalog chooses taken from it, but for the stages
// left out (their objects' failure policy is Builtin and they failed).
func (r *Reloader) wanted(leaveOut map[abi.Stage]bool) ([]chain.Spec, error) {
	r.catalogMu.Lock()
	defer r.catalogMu.Unlock()
	var out []chain.Spec
	for _, s := range r.specs {
		if _, ok := r.catalog[s.Stage]; !ok || leaveOut[s.Stage] {
			out = append(out, s)
		}
	}
	for stage, c := range r.catalog {
		if !leaveOut[stage] {
			spec, err := catalogSpec(c.Module, r.FileDirs, r.Signatures...)
			if err != nil {
				return nil, fmt.Errorf("ServiceProxyModule %q: %w", c.Object, err)
			}
			out = append(out, spec)
		}
	}
	return out, nil
}

// applyWanted applies the specs of wanted(leaveOut).
func (r *Reloader) applyWanted(ctx context.Context, leaveOut map[abi.Stage]bool, why string) (map[abi.Stage]string, bool, error) {
	specs, err := r.wanted(leaveOut)
	if err != nil {
		return nil, false, err
	}
	return r.apply(ctx, specs, why)
}

// builtinPolicy returns the catalog's stages whose failure policy is
// Builtin.
func (r *Reloader) builtinPolicy() map[abi.Stage]bool {
	r.catalogMu.Lock()
	defer r.catalogMu.Unlock()
	out := map[abi.Stage]bool{}
	for stage, c := range r.catalog {
		if c.Module.FailurePolicy == v1alpha1.Builtin {
			out[stage] = true
		}
	}
	return out
}

// applyCatalog loads the chain of the current choice and swaps it in. If
// it fails, the stages whose objects say Builtin fall back to the
// configuration's module (the builtin one unless configured), the others
// keep what runs (KeepLastGood); either way the full choice is tried
// again after a backoff.
func (r *Reloader) applyCatalog(ctx context.Context) {
	logger := klog.FromContext(ctx)
	running, swapped, err := r.applyWanted(ctx, nil, "ServiceProxyModules changed")
	r.count(metrics.ReloadCatalog, swapped, err)
	if err == nil {
		r.retry = 0
		r.report(ctx, running, nil, nil)
		return
	}
	r.retry = min(max(2*r.retry, catalogRetryMin), catalogRetryMax)
	logger.Error(printable.Error(err), "Loading the ServiceProxyModules' chain failed; will retry", "retryIn", r.retry)
	b := r.builtinPolicy()
	if len(b) > 0 {
		_, swapped, ferr := r.applyWanted(ctx, b, "failure policy Builtin")
		r.count(metrics.ReloadCatalog, swapped, ferr)
		if ferr != nil {
			logger.Error(printable.Error(ferr), "Loading the chain without the failed Builtin-policy modules failed too; the running modules stay")
			b = nil
		}
	}
	r.report(ctx, nil, err, b)
}

// report writes this node's status entry of every chosen object: Active
// with the digest that runs, or the load error with Failed (the running
// modules stay) or Builtin (the stage fell back); and removes the entries
// of objects no longer chosen.
func (r *Reloader) report(ctx context.Context, running map[abi.Stage]string, err error, fellBack map[abi.Stage]bool) {
	if r.Status == nil {
		return
	}
	r.catalogMu.Lock()
	choice := maps.Clone(r.catalog)
	r.catalogMu.Unlock()
	now := map[string]bool{}
	for stage, c := range choice {
		st := &catalog.NodeStatus{Phase: catalog.PhaseActive, Digest: running[stage], ObservedGeneration: c.Generation}
		switch {
		case err != nil && fellBack[stage]:
			st = &catalog.NodeStatus{Phase: catalog.PhaseBuiltin, Message: err.Error(), ObservedGeneration: c.Generation}
		case err != nil:
			st = &catalog.NodeStatus{Phase: catalog.PhaseFailed, Message: err.Error(), ObservedGeneration: c.Generation}
		}
		now[c.Object] = true
		r.setStatus(ctx, c.Object, st)
	}
	for object := range r.reported {
		if !now[object] {
			r.setStatus(ctx, object, nil)
		}
	}
	r.reported = now
}

func (r *Reloader) setStatus(ctx context.Context, object string, st *catalog.NodeStatus) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.Status(ctx, object, st); err != nil {
		klog.FromContext(ctx).V(2).Info("Module status not written", "err", err)
	}
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

// New returns a Reloader of the chain current, loaded by rt from specs
// (the configuration's modules), whose files it watches from now on.
func New(rt *runtime.Runtime, specs []chain.Spec, current *chain.Chain) *Reloader {
	r := &Reloader{rt: rt, specs: specs, current: current, seen: map[string]fileState{}, wake: make(chan struct{}, 1)}
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

// Run looks at the module files every period until ctx is done.
func (r *Reloader) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.check(ctx)
		case <-r.wake:
			r.retry = 0
			r.applyCatalog(ctx)
		case <-retry:
			r.applyCatalog(ctx)
		}
		retry = nil
		if r.retry > 0 {
			retry = time.After(r.retry)
		}
	}
}

// check reloads the chain if a module file changed since the last look.
func (r *Reloader) check(ctx context.Context) {
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
	_, swapped, err := r.applyWanted(ctx, nil, "module files changed")
	r.count(metrics.ReloadFiles, swapped, err)
	if err != nil {
		klog.FromContext(ctx).Error(printable.Error(err), "Module reload failed; the running modules stay")
	}
}

// apply loads the chain of specs and, if its modules differ from the
// running ones, swaps it into the proxy; it returns the digest each stage
// runs then, and whether it swapped. The files of specs are watched from
// then on.
func (r *Reloader) apply(ctx context.Context, specs []chain.Spec, why string) (running map[abi.Stage]string, swapped bool, err error) {
	for _, path := range moduleFiles(specs) {
		if _, ok := r.seen[path]; !ok {
			r.seen[path], _ = statFile(path)
		}
	}
	next, err := chain.Loader{Runtime: r.rt, Observer: r.Observer, NativeBuiltins: r.NativeBuiltins, Workers: r.Workers}.Load(ctx, specs)
	if err != nil {
		return nil, false, err
	}
	running = map[abi.Stage]string{}
	for _, s := range abi.Stages {
		running[s] = next.Digest(s)
	}
	r.mu.Lock()
	cur := r.current
	r.mu.Unlock()
	if sameModules(cur, next) {
		next.Close()
		return running, false, nil
	}
	klog.FromContext(ctx).Info("Swapping the module chain", "why", why, "modules", next.Sources[1:], "digests", digests(next))
	r.Swap(next.PipelineModules(), next.Policies, func(applied bool) {
		if !applied {
			next.Close()
			return
		}
		r.mu.Lock()
		old := r.current
		r.current = next
		r.mu.Unlock()
		old.Close()
		if r.Loaded != nil {
			r.Loaded(next)
		}
	})
	return running, true, nil
}

// Close closes the chain the proxy last ran; the proxy must be stopped.
func (r *Reloader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.current.Close()
}

// sameModules reports whether a and b run the same modules with the same
// configurations, failure policies and guardrails.
func sameModules(a, b *chain.Chain) bool {
	for _, s := range abi.Stages {
		if a.Digest(s) != b.Digest(s) || !bytes.Equal(a.Config(s), b.Config(s)) || a.Policies[s] != b.Policies[s] || a.Guardrails[s] != b.Guardrails[s] {
			return false
		}
	}
	return true
}

func digests(c *chain.Chain) []string {
	var out []string
	for _, s := range abi.Stages {
		out = append(out, c.Digest(s))
	}
	return out
}
