package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/state"
)

// Defaults for Opts.
const (
	DefaultMinSyncPeriod = time.Second
	DefaultRetryPeriod   = 30 * time.Second

	// syncBurst is how many syncs may run back to back before
	// MinSyncPeriod applies, as upstream's BoundedFrequencyRunner.
	syncBurst = 2
)

// Opts configure a Proxy.
type Opts struct {
	// NodeName is the node this proxy runs on. Required.
	NodeName string
	// Client talks to the apiserver. Required.
	Client kubernetes.Interface
	// Pipeline evaluates the service ports. Required; the Proxy is its
	// only user while Run runs.
	Pipeline *pipeline.Pipeline
	// Backends program each IP family; the families present are the ones
	// synced. Required: at least one of backends.IPv4 and backends.IPv6.
	// The States they get share memory with each other and with the
	// Proxy's cache: a backend may keep a State but must not modify it.
	Backends map[backends.Family]backends.Backend
	// State holds the node-wide settings of every State. Its ServiceCIDRs
	// are joined by those of the cluster's ServiceCIDR objects; its
	// NodeIPs and NodePortAddresses are replaced by what NodeAddresses
	// resolves, once it did. Optional.
	State state.Options
	// NodeAddresses, if set, resolves the node's addresses of every State
	// from the Node object: once the caches synced, at every event of the
	// Node, and every AddressCheckPeriod. When they change, a sync
	// programs them. An error is logged and keeps the addresses in use.
	// Optional: State's are used as they are.
	NodeAddresses NodeAddresses
	// AddressCheckPeriod is how often NodeAddresses is called again
	// without an event of the Node: the local addresses that
	// nodePortAddresses CIDRs select change without one. Optional; 0:
	// only at the Node's events.
	AddressCheckPeriod time.Duration
	// MinSyncPeriod is the least time between syncs after a burst of 2.
	// Optional; default DefaultMinSyncPeriod.
	MinSyncPeriod time.Duration
	// RetryPeriod is the longest a failed sync waits for its retry: the
	// first retry comes a second after the failure, each next one after
	// twice the previous wait, up to RetryPeriod. It is also how long a
	// Service waits to be evaluated again when a failing module left some
	// of its ports not isolated (pipeline.ErrNotIsolated). Optional;
	// default DefaultRetryPeriod.
	RetryPeriod time.Duration
	// DriftCheckPeriod is how often the backends that implement
	// backends.DriftChecker are checked for objects changed behind their
	// back; a drifted one is rewritten in full by the sync that follows.
	// Optional; default DefaultDriftCheckPeriod.
	DriftCheckPeriod time.Duration
	// Health is told about queued and synced updates and the Node.
	// Optional.
	Health Health
	// ServiceHealth gets the health-check node ports and local endpoint
	// counts after each successful sync. Optional.
	ServiceHealth ServiceHealth
	// Metrics is told about changes and syncs. Optional.
	Metrics Metrics
	// AfterFullSync is called after every successful full sync, on the
	// sync goroutine, before the next sync can start. A full sync is the
	// peak of the proxy's memory use and rare; wasp run returns the freed
	// heap to the operating system there. Optional.
	AfterFullSync func()
}

// Stats count a Proxy's syncs, for metrics.
type Stats struct {
	Syncs        uint64 // syncs run, failed ones included
	SyncFailures uint64 // failed listings, and failed backend Syncs (one per family)
	FullSyncs    uint64 // syncs that evaluated every service port
	PartialSyncs uint64 // syncs that evaluated only the changed Services' ports

	LastSyncDuration time.Duration // of the last sync, failed or not
	LastQueued       time.Time     // when a change last asked for a sync; zero: never
	LastSynced       time.Time     // when a sync last succeeded; zero: never

	// LastEvaluated is how many service ports the last sync evaluated.
	LastEvaluated int
	// ServicePorts is how many service ports (of every family) the last
	// sync programmed.
	ServicePorts int
	// PendingChanges is how many Services changed since the last sync
	// started: the next one evaluates them.
	PendingChanges int
}

// Proxy keeps a node's dataplane in line with the cluster. Create it with
// New and start it with Run.
type Proxy struct {
	opts      Opts
	families  []backends.Family // sorted, IPv4 first
	kfamilies []v1.IPFamily     // the same, as Kubernetes names
	clock     clock.Clock
	runner    *runner
	tracker   tracker
	started   atomic.Bool   // the caches synced: changes now queue updates
	events    atomic.Uint64 // informer events handled, for tests

	// Set by Run before the first sync.
	services   corelisters.ServiceLister
	slices     discoverylisters.EndpointSliceLister
	sliceIndex cache.Indexer // with sliceServiceIndex
	nodes      corelisters.NodeLister
	cidrs      networkinglisters.ServiceCIDRLister // nil: the API is not served

	// Owned by sync.
	syncState

	statsMu sync.Mutex
	stats   Stats

	swapMu sync.Mutex
	swap   *moduleSwap // the next sync's module swap; nil: none

	addrMu sync.Mutex
	addrs  *addresses // resolved by Opts.NodeAddresses; nil: Opts.State's
}

// moduleSwap is a SetModules waiting for the sync goroutine.
type moduleSwap struct {
	mods     [len(abi.Stages) + 1]pipeline.Module
	policies [len(abi.Stages) + 1]pipeline.FailurePolicy
	done     func(applied bool)
}

// SetModules swaps the module chain and the stages' failure policies (hot
// reload): the next sync, which is queued now, puts mods and policies into
// the pipeline and re-evaluates every service port; the backends then
// program only what changed. done, if not nil, is called once: with true,
// on the sync goroutine, when the pipeline runs mods (the previous modules
// are no longer used and may be closed); or with false, by the SetModules
// that replaced this one before it was applied (mods were never used). A
// port the new modules fail for gets what its stage's policy says
// (pipeline.FailurePolicy). Safe to call at any time, before Run included.
func (p *Proxy) SetModules(mods [len(abi.Stages) + 1]pipeline.Module, policies [len(abi.Stages) + 1]pipeline.FailurePolicy, done func(applied bool)) {
	p.swapMu.Lock()
	old := p.swap
	p.swap = &moduleSwap{mods: mods, policies: policies, done: done}
	p.swapMu.Unlock()
	if old != nil && old.done != nil {
		old.done(false)
	}
	p.Resync()
}

// applySwap puts a pending module swap into the pipeline; it reports
// whether there was one. Called by sync only.
func (p *Proxy) applySwap() bool {
	p.swapMu.Lock()
	sw := p.swap
	p.swap = nil
	p.swapMu.Unlock()
	if sw == nil {
		return false
	}
	p.opts.Pipeline.SetModules(sw.mods, sw.policies)
	if sw.done != nil {
		sw.done(true)
	}
	return true
}

// New checks opts and returns a Proxy.
func New(opts Opts) (*Proxy, error) {
	return newProxy(opts, clock.RealClock{})
}

func newProxy(opts Opts, c clock.Clock) (*Proxy, error) {
	var errs []error
	if opts.NodeName == "" {
		errs = append(errs, errors.New("nodeName: required"))
	}
	if opts.Client == nil {
		errs = append(errs, errors.New("client: required"))
	}
	if opts.Pipeline == nil {
		errs = append(errs, errors.New("pipeline: required"))
	}
	if len(opts.Backends) == 0 {
		errs = append(errs, errors.New("backends: at least one required"))
	}
	for f, b := range opts.Backends {
		if _, ok := state.KubernetesFamily(f); !ok {
			errs = append(errs, fmt.Errorf("backends[%d]: unknown IP family", f))
		} else if b == nil {
			errs = append(errs, fmt.Errorf("backends[%d]: nil backend", f))
		}
	}
	if opts.MinSyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("minSyncPeriod: %v is negative", opts.MinSyncPeriod))
	}
	if opts.RetryPeriod < 0 {
		errs = append(errs, fmt.Errorf("retryPeriod: %v is negative", opts.RetryPeriod))
	}
	if opts.DriftCheckPeriod < 0 {
		errs = append(errs, fmt.Errorf("driftCheckPeriod: %v is negative", opts.DriftCheckPeriod))
	}
	if opts.AddressCheckPeriod < 0 {
		errs = append(errs, fmt.Errorf("addressCheckPeriod: %v is negative", opts.AddressCheckPeriod))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if opts.MinSyncPeriod == 0 {
		opts.MinSyncPeriod = DefaultMinSyncPeriod
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = DefaultRetryPeriod
	}
	if opts.DriftCheckPeriod == 0 {
		opts.DriftCheckPeriod = DefaultDriftCheckPeriod
	}
	p := &Proxy{opts: opts, clock: c}
	p.tracker.metrics, p.tracker.start = opts.Metrics, c.Now()
	p.families = slices.SortedFunc(maps.Keys(opts.Backends), func(a, b backends.Family) int { return cmp.Compare(a, b) })
	for _, f := range p.families {
		kf, _ := state.KubernetesFamily(f)
		p.kfamilies = append(p.kfamilies, kf)
	}
	p.syncState = newSyncState(len(p.families))
	p.runner = newRunner(p.sync, opts.MinSyncPeriod, syncBurst, opts.RetryPeriod, c)
	return p, nil
}

// Stats returns the counts so far. It is safe to call at any time.
func (p *Proxy) Stats() Stats {
	p.statsMu.Lock()
	s := p.stats
	p.statsMu.Unlock()
	s.PendingChanges = p.tracker.pending()
	return s
}

// Resync makes the next sync evaluate every service port again, and asks
// for it; call it when the module chain changed. It is safe to call at any
// time, also before Run (the first sync is a full one anyway).
func (p *Proxy) Resync() {
	p.tracker.markFull()
	p.queue()
}

// queue asks for a sync because of a change.
func (p *Proxy) queue() {
	if p.started.Load() {
		// Before the caches synced, the first sync is not late yet.
		if h := p.opts.Health; h != nil {
			for _, f := range p.families {
				h.QueuedUpdate(f)
			}
		}
		if m := p.opts.Metrics; m != nil {
			for _, f := range p.families {
				m.QueuedUpdate(f)
			}
		}
		p.statsMu.Lock()
		p.stats.LastQueued = p.clock.Now()
		p.statsMu.Unlock()
	}
	p.runner.request()
}

// sliceServiceIndex indexes EndpointSlices by the Service they belong to,
// "namespace/name" (see sliceService).
const sliceServiceIndex = "service"

func indexSliceByService(obj any) ([]string, error) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	n, ok := sliceService(es)
	if !ok {
		return nil, nil
	}
	return []string{n.String()}, nil
}

// Run watches the cluster and syncs the backends until ctx is done. It
// asks discovery whether ServiceCIDRs are served, starts the informers,
// waits for their caches, then syncs once and again on every change, and
// checks the backends for drift every DriftCheckPeriod. Call it once.
func (p *Proxy) Run(ctx context.Context) {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", p.opts.NodeName))
	shutdown, ok := p.start(ctx)
	if !ok {
		return
	}
	defer shutdown()
	drift := make(chan struct{})
	go func() {
		defer close(drift)
		p.driftLoop(ctx)
	}()
	defer func() { <-drift }()
	if p.opts.NodeAddresses != nil && p.opts.AddressCheckPeriod > 0 {
		addrs := make(chan struct{})
		go func() {
			defer close(addrs)
			p.addressLoop(ctx)
		}()
		defer func() { <-addrs }()
	}
	p.runner.loop(ctx)
}

// start starts the informers and waits for their caches. On success it
// returns the factory's Shutdown, which returns once ctx is done; ok is
// false when ctx ended first.
func (p *Proxy) start(ctx context.Context) (shutdown func(), ok bool) {
	logger := klog.FromContext(ctx)
	watchCIDRs, ok := serviceCIDRsServed(ctx, p.opts.Client.Discovery())
	if !ok {
		return nil, false
	}

	// One factory. Services and EndpointSlices use its label selector; the
	// Node and ServiceCIDR informers, registered under the same type keys
	// the factory would use, do not: the Node one watches only this node,
	// and ServiceCIDRs carry no proxy labels.
	factory := informers.NewSharedInformerFactoryWithOptions(p.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = model.LabelSelector }),
		informers.WithTransform(slim))
	nodeName := p.opts.NodeName
	nodeInformer := factory.InformerFor(&v1.Node{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredNodeInformer(c, resync, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
		})
	})
	svcInformer := factory.Core().V1().Services()
	sliceInformer := factory.Discovery().V1().EndpointSlices()
	if err := sliceInformer.Informer().AddIndexers(cache.Indexers{sliceServiceIndex: indexSliceByService}); err != nil {
		// Only fails once the informer has started.
		logger.Error(err, "Adding the EndpointSlice index failed")
		return nil, false
	}
	p.services = svcInformer.Lister()
	p.slices = sliceInformer.Lister()
	p.sliceIndex = sliceInformer.Informer().GetIndexer()
	p.nodes = corelisters.NewNodeLister(nodeInformer.GetIndexer())

	type registration struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}
	regs := []registration{
		{svcInformer.Informer(), eventHandler(p, p.tracker.onService, nil)},
		{sliceInformer.Informer(), eventHandler(p, p.tracker.onEndpointSlice, nil)},
		{nodeInformer, eventHandler(p, p.tracker.onNode, func(n *v1.Node) {
			p.syncNode(n)
			if p.started.Load() {
				p.readdress(logger, n)
			}
		})},
	}
	if watchCIDRs {
		cidrInformer := factory.InformerFor(&networkingv1.ServiceCIDR{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			return networkinginformers.NewServiceCIDRInformer(c, resync, cache.Indexers{})
		})
		p.cidrs = factory.Networking().V1().ServiceCIDRs().Lister()
		regs = append(regs, registration{cidrInformer, eventHandler(p, p.tracker.onServiceCIDR, nil)})
	}
	var handlersSynced []cache.InformerSynced
	for _, r := range regs {
		reg, err := r.inf.AddEventHandler(r.h)
		if err != nil {
			// Only fails once an informer has stopped, which cannot
			// have happened before Start.
			logger.Error(err, "Adding an event handler failed")
			return nil, false
		}
		handlersSynced = append(handlersSynced, reg.HasSynced)
	}

	factory.Start(ctx.Done())
	logger.Info("Waiting for informer caches to sync", "serviceCIDRs", watchCIDRs)
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			logger.Info("Stopped before informer caches synced", "type", typ.String())
			factory.Shutdown()
			return nil, false
		}
	}
	// Also wait until the handlers have seen every object of the initial
	// lists, as upstream does: the first sync then takes their changes,
	// and no late initial event starts a second evaluation of the same.
	if !cache.WaitForCacheSync(ctx.Done(), handlersSynced...) {
		logger.Info("Stopped before event handlers synced")
		factory.Shutdown()
		return nil, false
	}
	p.started.Store(true)
	n := p.localNode()
	if p.opts.Health != nil {
		p.opts.Health.SyncNode(n)
	}
	p.readdress(logger, n)
	// The initial list requested a sync already; make sure of it even if
	// the cluster is empty, and tell Health it is queued.
	p.queue()
	return factory.Shutdown, true
}

// syncNode tells Health about the Node of an event (nil: deleted).
func (p *Proxy) syncNode(n *v1.Node) {
	if h := p.opts.Health; h != nil {
		h.SyncNode(n)
	}
}

func familyName(f backends.Family) string {
	kf, ok := state.KubernetesFamily(f)
	if !ok {
		return fmt.Sprintf("family%d", f)
	}
	return string(kf)
}

// nodeEqual reports whether two nodes are the same for the modules.
func nodeEqual(a, b abi.Node) bool {
	return a.Name == b.Name && slices.Equal(a.Labels, b.Labels)
}

// serviceOf names the Service of a port.
func serviceOf(sp *model.ServicePort) types.NamespacedName {
	return types.NamespacedName{Namespace: sp.Namespace, Name: sp.Name}
}

// slim drops, before the informers cache an object, what wasp never reads:
// the server-side apply bookkeeping (often the largest part of an object
// in a real cluster), the last-applied-configuration annotation (a copy of
// the whole object; host/model never shows it to modules), and of an
// EndpointSlice its annotations but the last-change-trigger-time (for
// Metrics), its owner references, and each endpoint's targetRef, hostname
// and deprecatedTopology; the endpoints' node and zone names are shared.
// At 100k endpoints that is tens of MiB. Anything else passes through
// unchanged.
func slim(obj any) (any, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	m.SetManagedFields(nil)
	if a := m.GetAnnotations(); a != nil {
		delete(a, v1.LastAppliedConfigAnnotation)
	}
	if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
		if at, ok := es.Annotations[v1.EndpointsLastChangeTriggerTime]; !ok {
			es.Annotations = nil
		} else if len(es.Annotations) > 1 {
			es.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: at}
		}
		// The controller's owner reference and name prefix are not read.
		es.OwnerReferences, es.GenerateName = nil, ""
		// Decoding grew the list by appending, up to twice its length.
		es.Endpoints = slices.Clone(es.Endpoints)
		var names internedNames
		for i := range es.Endpoints {
			ep := &es.Endpoints[i]
			ep.TargetRef, ep.Hostname, ep.DeprecatedTopology = nil, nil, nil
			ep.NodeName, ep.Zone = names.intern(ep.NodeName), names.intern(ep.Zone)
		}
	}
	return obj, nil
}

// internedNames shares the node and zone names of one EndpointSlice's
// endpoints: the endpoints with the same name get one pointer, and every
// slice the same bytes (package unique), where decoding gave each its own
// copy of both. Few names recur across 100k endpoints.
type internedNames []*string

// maxInternedNames bounds the names one slice's endpoints share pointers
// to, and so the scan for one.
const maxInternedNames = 16

func (n *internedNames) intern(s *string) *string {
	if s == nil {
		return nil
	}
	for _, p := range *n {
		if *p == *s {
			return p
		}
	}
	v := unique.Make(*s).Value()
	if len(*n) < maxInternedNames {
		*n = append(*n, &v)
	}
	return &v
}
