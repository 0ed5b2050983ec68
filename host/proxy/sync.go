package proxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/state"
)

// syncState is what sync keeps from one sync to the next.
type syncState struct {
	// needFull: the next sync must evaluate every port (first sync, or the
	// last one failed).
	needFull bool
	// node is the node the cache was evaluated for.
	node abi.Node
	// cache holds the evaluated ports of every Service that has some.
	cache map[types.NamespacedName]*entry
	// health is the subset of cache with a health-check node port.
	health map[types.NamespacedName]*entry
	// sorted[i] is every cached backends.Service of families[i], sorted by
	// Key: the Services of the next State. A sync replaces it, never
	// modifies it, as the backends may keep it.
	sorted [][]backends.Service
	// serviceCIDRUnion is the union of the configured and the cluster's
	// ServiceCIDRs, computed again on a full sync or a ServiceCIDR change.
	serviceCIDRUnion []netip.Prefix
}

func newSyncState(families int) syncState {
	return syncState{
		needFull: true,
		cache:    map[types.NamespacedName]*entry{},
		health:   map[types.NamespacedName]*entry{},
		sorted:   make([][]backends.Service, families),
	}
}

// entry is one Service's evaluated ports.
type entry struct {
	keys     []string             // the ports' pipeline keys
	services [][]backends.Service // per family (index of Proxy.families), sorted by Key
	// hcPort is the health-check node port; 0: none.
	hcPort uint16
	// localReady is the number of distinct local Ready endpoint IPs,
	// the larger of the families' counts (see ServiceHealth).
	localReady int
}

// sync programs every family from the listers' current content,
// evaluating only what changed since the last successful sync. It logs and
// counts its own errors; the error it returns only tells the runner to
// retry.
func (p *Proxy) sync(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	start := p.clock.Now()
	ch := p.tracker.take()
	swapped := p.applySwap()
	full := p.needFull || ch.full || swapped
	// Until this sync succeeds, the next one is a full one: a failure
	// anywhere below loses the changes just taken.
	p.needFull = true

	evaluated, err := p.evaluate(ctx, ch, &full)
	// The memory a large evaluation grew in the pipeline goes back before
	// the backends build their transactions: syncs are far apart next to
	// a recompute.
	p.opts.Pipeline.Release(ctx)
	if err == nil && (full || ch.serviceCIDRs) {
		p.serviceCIDRUnion, err = p.serviceCIDRs(ctx)
	}
	if err != nil {
		logger.Error(err, "Listing cluster objects failed; will retry", "retryWithin", p.opts.RetryPeriod)
		elapsed := p.finish(start, full, evaluated, false, 1)
		if m := p.opts.Metrics; m != nil {
			m.Synced(&SyncReport{Full: full, Duration: elapsed, Evaluated: evaluated, Err: err})
		}
		return err
	}

	var report *SyncReport
	if p.opts.Metrics != nil {
		report = &SyncReport{Full: full, Evaluated: evaluated, Families: make([]FamilySync, 0, len(p.families))}
	}
	var failed error
	failures := 0
	for i, f := range p.families {
		// Every configured option, with the cluster's ServiceCIDRs
		// added: copied whole, so that no option is left behind.
		opts := p.opts.State
		opts.ServiceCIDRs = p.serviceCIDRUnion
		if a := p.nodeAddresses(); a != nil {
			opts.NodeIPs, opts.NodePortAddresses = a.nodeIPs, a.nodePorts
		}
		s := state.Build(f, opts, nil, nil)
		s.Services = p.sorted[i]
		res, err := p.opts.Backends[f].Sync(ctx, s)
		if report != nil {
			report.Families = append(report.Families, p.familySync(s, res, err, ch.triggers))
		}
		switch {
		case errors.Is(err, backends.ErrHousekeeping):
			// Programmed: the next Sync retries the housekeeping.
			logger.Error(err, "Backend programmed, but its housekeeping failed", "ipFamily", familyName(f))
		case err != nil:
			failures++
			logger.Error(err, "Backend sync failed; will retry", "ipFamily", familyName(f), "retryWithin", p.opts.RetryPeriod)
			failed = err
			continue
		}
		if h := p.opts.Health; h != nil {
			h.Updated(f)
		}
		logger.V(4).Info("Backend synced", "ipFamily", familyName(f), "servicePorts", len(s.Services))
	}
	if failed == nil {
		p.needFull = false
		p.syncServiceHealth()
	}
	elapsed := p.finish(start, full, evaluated, failed == nil, failures)
	if report != nil {
		report.Duration = elapsed
		p.opts.Metrics.Synced(report)
	}
	logger.V(2).Info("Sync done", "full", full, "evaluated", evaluated, "services", len(p.cache), "elapsed", elapsed)
	if full && failed == nil && p.opts.AfterFullSync != nil {
		p.opts.AfterFullSync()
	}
	return failed
}

// finish records a sync's stats and returns its duration.
func (p *Proxy) finish(start time.Time, full bool, evaluated int, ok bool, failures int) time.Duration {
	now := p.clock.Now()
	ports := 0
	for _, s := range p.sorted {
		ports += len(s)
	}
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	s := &p.stats
	s.Syncs++
	s.SyncFailures += uint64(failures)
	if full {
		s.FullSyncs++
	} else {
		s.PartialSyncs++
	}
	s.LastSyncDuration = now.Sub(start)
	s.LastEvaluated = evaluated
	s.ServicePorts = ports
	if ok {
		s.LastSynced = now
	}
	return s.LastSyncDuration
}

// familySync reports a family's backend Sync of s, which returned res and
// err, for Metrics; triggers are the trigger times of the changes the
// sync took.
func (p *Proxy) familySync(s *backends.State, res backends.SyncResult, err error, triggers map[serviceFamily][]time.Time) FamilySync {
	fs := FamilySync{Family: s.Family, Result: res, Err: err, ServicePorts: len(s.Services)}
	fs.NoLocalInternal, fs.NoLocalExternal = noLocalEndpoints(s.Services)
	if !fs.Programmed() {
		return fs
	}
	now := p.clock.Now()
	for k, times := range triggers {
		if k.family != s.Family {
			continue
		}
		for _, at := range times {
			fs.NetworkProgramming = append(fs.NetworkProgramming, now.Sub(at))
		}
	}
	return fs
}

// noLocalEndpoints counts the service ports whose internal, and whose
// external, traffic policy is Local and drops that traffic: the port has
// endpoints, but no local one to use. It is upstream's count, on the
// decision of the module chain.
func noLocalEndpoints(svcs []backends.Service) (internal, external int) {
	for i := range svcs {
		s := &svcs[i]
		if r := s.InternalRoute(); r.Local && r.Verdict == backends.Drop {
			internal++
		}
		if r := s.ExternalRoute(); r.Local && r.Verdict == backends.Drop {
			external++
		}
	}
	return internal, external
}

// evaluate brings the cache up to date, evaluating every port when *full
// or when the node changed (and then setting *full), otherwise the ports
// of the changed Services. It returns how many ports it evaluated.
func (p *Proxy) evaluate(ctx context.Context, ch changes, full *bool) (int, error) {
	in := model.Input{NodeName: p.opts.NodeName, Families: p.kfamilies}
	node, err := p.nodes.Get(p.opts.NodeName)
	switch {
	case apierrors.IsNotFound(err):
		// No Node object (yet): no node labels, as model.Input allows.
	case err != nil:
		return 0, fmt.Errorf("get node %q: %w", p.opts.NodeName, err)
	default:
		in.Node = node
	}
	if !*full {
		// What the model makes of the Node, without a Service: cheap.
		if n := model.Build(model.Input{NodeName: in.NodeName, Node: in.Node, Families: in.Families}).Node; !nodeEqual(n, p.node) {
			klog.FromContext(ctx).V(2).Info("Node labels changed; evaluating every service port")
			*full = true
		}
	}
	if *full {
		return p.evaluateAll(ctx, in)
	}
	return p.evaluateServices(ctx, in, ch.services)
}

// evaluateAll evaluates every port and rebuilds the cache.
func (p *Proxy) evaluateAll(ctx context.Context, in model.Input) (int, error) {
	var err error
	if in.Services, err = p.services.List(labels.Everything()); err != nil {
		return 0, fmt.Errorf("list services: %w", err)
	}
	if in.EndpointSlices, err = p.slices.List(labels.Everything()); err != nil {
		return 0, fmt.Errorf("list endpointslices: %w", err)
	}
	m := model.Build(in)
	entries := p.run(ctx, m.Node, m.Ports)
	for name, old := range p.cache {
		p.forget(old, entries[name])
	}
	p.node = m.Node
	p.cache = entries
	clear(p.health)
	for name, e := range entries {
		if e.hcPort != 0 {
			p.health[name] = e
		}
	}
	for i := range p.families {
		n := 0
		for _, e := range entries {
			n += len(e.services[i])
		}
		all := make([]backends.Service, 0, n)
		for _, e := range entries {
			all = append(all, e.services[i]...)
		}
		slices.SortFunc(all, func(a, b backends.Service) int { return strings.Compare(a.Key, b.Key) })
		p.sorted[i] = nilIfEmpty(all)
	}
	return len(m.Ports), nil
}

// evaluateServices evaluates the ports of the named Services, in one
// pipeline call, and replaces their cache entries. A Service that is gone,
// or has no port any more, loses its entry.
func (p *Proxy) evaluateServices(ctx context.Context, in model.Input, names map[types.NamespacedName]struct{}) (int, error) {
	if len(names) == 0 {
		return 0, nil
	}
	for name := range names {
		svc, err := p.services.Services(name.Namespace).Get(name.Name)
		switch {
		case apierrors.IsNotFound(err):
			continue // deleted: its slices do not matter
		case err != nil:
			return 0, fmt.Errorf("get service %s: %w", name, err)
		}
		in.Services = append(in.Services, svc)
		objs, err := p.sliceIndex.ByIndex(sliceServiceIndex, name.String())
		if err != nil {
			return 0, fmt.Errorf("endpointslices of service %s: %w", name, err)
		}
		for _, o := range objs {
			if es, ok := o.(*discoveryv1.EndpointSlice); ok {
				in.EndpointSlices = append(in.EndpointSlices, es)
			}
		}
	}
	// The model of a set of Services and their slices holds the same
	// ports as the full model does for those Services: ports, endpoints
	// and duplicates are all per Service.
	m := model.Build(in)
	entries := p.run(ctx, p.node, m.Ports)
	var drop []string // the keys of the replaced entries' ports
	for name := range names {
		e := entries[name]
		if old, ok := p.cache[name]; ok {
			p.forget(old, e)
			drop = append(drop, old.keys...)
		}
		if e == nil {
			delete(p.cache, name)
			delete(p.health, name)
			continue
		}
		p.cache[name] = e
		if e.hcPort != 0 {
			p.health[name] = e
		} else {
			delete(p.health, name)
		}
	}
	slices.Sort(drop)
	for i := range p.families {
		var changed []backends.Service
		for _, e := range entries {
			changed = append(changed, e.services[i]...)
		}
		slices.SortFunc(changed, func(a, b backends.Service) int { return strings.Compare(a.Key, b.Key) })
		p.sorted[i] = merge(p.sorted[i], drop, changed)
	}
	return len(m.Ports), nil
}

// run evaluates ports through the pipeline and groups them, with their
// results, into one entry per Service.
func (p *Proxy) run(ctx context.Context, node abi.Node, ports []model.ServicePort) map[types.NamespacedName]*entry {
	pp := make([]pipeline.Port, len(ports))
	for i := range ports {
		pp[i] = pipeline.Port{Key: ports[i].String(), ServicePort: ports[i].ServicePort}
	}
	var results []pipeline.Result
	if len(pp) > 0 {
		results = p.opts.Pipeline.Run(ctx, node, pp)
	}
	p.reevaluateNotIsolated(ports, results)
	entries := map[types.NamespacedName]*entry{}
	// Ports are sorted by Key, so each Service's ports are contiguous.
	for lo := 0; lo < len(ports); {
		name := serviceOf(&ports[lo])
		hi := lo + 1
		for hi < len(ports) && serviceOf(&ports[hi]) == name {
			hi++
		}
		e := &entry{services: make([][]backends.Service, len(p.families))}
		for i := lo; i < hi; i++ {
			e.keys = append(e.keys, pp[i].Key)
		}
		for i, f := range p.families {
			e.services[i] = state.Build(f, state.Options{}, ports[lo:hi], results[lo:hi]).Services
		}
		e.hcPort, e.localReady = health(ports[lo:hi])
		entries[name] = e
		lo = hi
	}
	return entries
}

// reevaluateNotIsolated marks, after RetryPeriod, the Services of the
// ports a failing module left not isolated as changed, and asks for a
// sync: the pipeline then calls those ports alone, so that the good ones
// among them get their modules' decision without waiting for their
// Service to change. Each such evaluation is bounded by the pipeline's
// bisect budget and isolates at least one failing port, so this ends.
func (p *Proxy) reevaluateNotIsolated(ports []model.ServicePort, results []pipeline.Result) {
	var names []types.NamespacedName
	for i := range results {
		if errors.Is(results[i].Err, pipeline.ErrNotIsolated) {
			if n := serviceOf(&ports[i]); len(names) == 0 || names[len(names)-1] != n {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return
	}
	again := func() {
		p.tracker.markServices(names...)
		p.runner.request()
	}
	if c, ok := p.clock.(clock.WithDelayedExecution); ok {
		c.AfterFunc(p.opts.RetryPeriod, again)
		return
	}
	t := p.clock.NewTimer(p.opts.RetryPeriod)
	go func() {
		<-t.C()
		again()
	}()
}

// forget drops the last good decisions of old's ports that now is without.
func (p *Proxy) forget(old, now *entry) {
	for _, k := range old.keys {
		if now == nil || !slices.Contains(now.keys, k) {
			p.opts.Pipeline.Forget(k)
		}
	}
}

// health returns a Service's health-check node port and local Ready
// endpoint count from its ports.
func health(ports []model.ServicePort) (hcPort uint16, localReady int) {
	ips := map[v1.IPFamily]map[netip.Addr]struct{}{}
	for i := range ports {
		sp := &ports[i]
		if hcPort == 0 && sp.HealthCheckNodePort > 0 && sp.HealthCheckNodePort <= math.MaxUint16 {
			hcPort = uint16(sp.HealthCheckNodePort)
		}
		for _, ep := range sp.Endpoints {
			if !ep.Local || !ep.Ready {
				continue
			}
			if ips[sp.Family] == nil {
				ips[sp.Family] = map[netip.Addr]struct{}{}
			}
			ips[sp.Family][ep.Addr] = struct{}{}
		}
	}
	for _, set := range ips {
		localReady = max(localReady, len(set))
	}
	return hcPort, localReady
}

// syncServiceHealth hands ServiceHealth the cache's health-check ports and
// counts.
func (p *Proxy) syncServiceHealth() {
	sh := p.opts.ServiceHealth
	if sh == nil {
		return
	}
	ports := make(map[types.NamespacedName]uint16, len(p.health))
	local := make(map[types.NamespacedName]int, len(p.health))
	for name, e := range p.health {
		ports[name] = e.hcPort
		local[name] = e.localReady
	}
	sh.SyncServices(ports)
	sh.SyncEndpoints(local)
}

// merge returns a new list: prev, sorted by Key with unique keys, without
// the services whose keys are in drop (sorted; keys prev lacks are
// ignored), merged with add, sorted by Key. It copies the runs of prev
// between the changes in bulk, so a few changes cost one copy of prev. It
// does not modify prev, which a backend may still hold.
func merge(prev []backends.Service, drop []string, add []backends.Service) []backends.Service {
	out := make([]backends.Service, 0, len(prev)+len(add))
	// search returns the index of the first service of prev[from:] whose
	// key is not below key, and whether it is key.
	search := func(from int, key string) (int, bool) {
		k, ok := slices.BinarySearchFunc(prev[from:], key, func(s backends.Service, key string) int { return strings.Compare(s.Key, key) })
		return from + k, ok
	}
	i, d, a := 0, 0, 0 // next of prev to copy, of drop, of add
	for d < len(drop) || a < len(add) {
		// Drop before add on equal keys: a changed port replaces itself.
		if d < len(drop) && (a == len(add) || drop[d] <= add[a].Key) {
			pos, found := search(i, drop[d])
			out = append(out, prev[i:pos]...)
			if i = pos; found {
				i++
			}
			d++
			continue
		}
		pos, _ := search(i, add[a].Key)
		out = append(out, prev[i:pos]...)
		out = append(out, add[a])
		i = pos
		a++
	}
	out = append(out, prev[i:]...)
	return nilIfEmpty(out)
}

// nilIfEmpty keeps State.Services nil when there is none, as state.Build
// does.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
