// Package proxy is wasp's sync loop: the seam between the Kubernetes watch
// and the dataplane. A Proxy watches Services and EndpointSlices (without
// those model.LabelSelector excludes) and the local Node, and on every
// change programs each IP family's backend with the node's desired state:
//
//	listers -> model.Build -> pipeline.Run -> state.Build (per family) -> Backend.Sync
//
// Like upstream kube-proxy:
//   - nothing is programmed before every informer's cache has synced, so a
//     partial view of the cluster never reaches the dataplane;
//   - syncs are rate limited by a bounded-frequency runner: events coalesce,
//     at most burst 2 syncs run back to back, then one per MinSyncPeriod;
//   - errors never go upward: a failed sync is logged, counted and retried
//     after RetryPeriod (sooner if another event comes).
//
// Unlike upstream, which has partial syncs, every sync of this first version
// recomputes everything: the model of every service port, the module chain
// over every port, and the complete State of each family. Per-port change
// tracking, so that a sync evaluates only the ports that changed, is the next
// step. There is also no maxInterval run (upstream's hourly sync).
//
// The Proxy does not own its backends: the caller closes (or cleans up) them
// after Run returns.
package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

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
	Backends map[backends.Family]backends.Backend
	// State holds the node-wide settings of every State. Optional.
	State state.Options
	// MinSyncPeriod is the least time between syncs after a burst of 2.
	// Optional; default DefaultMinSyncPeriod.
	MinSyncPeriod time.Duration
	// RetryPeriod is how long after a failed sync it is retried. Optional;
	// default DefaultRetryPeriod.
	RetryPeriod time.Duration
}

// Stats count a Proxy's syncs, for metrics.
type Stats struct {
	Syncs        uint64 // syncs run, failed ones included
	SyncFailures uint64 // failed listings, and failed backend Syncs (one per family)
}

// Proxy keeps a node's dataplane in line with the cluster. Create it with
// New and start it with Run.
type Proxy struct {
	opts     Opts
	families []backends.Family // sorted, IPv4 first
	clock    clock.Clock

	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	nodes     corelisters.NodeLister
	lastPorts map[string]bool // pipeline keys of the previous sync

	syncs, failures atomic.Uint64
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
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if opts.MinSyncPeriod == 0 {
		opts.MinSyncPeriod = DefaultMinSyncPeriod
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = DefaultRetryPeriod
	}
	families := slices.SortedFunc(maps.Keys(opts.Backends), func(a, b backends.Family) int { return cmp.Compare(a, b) })
	return &Proxy{opts: opts, families: families, clock: c}, nil
}

// Stats returns the counts so far. It is safe to call at any time.
func (p *Proxy) Stats() Stats {
	return Stats{Syncs: p.syncs.Load(), SyncFailures: p.failures.Load()}
}

// Run watches the cluster and syncs the backends until ctx is done. It
// starts the informers, waits for their caches, then syncs once and again
// on every change. Call it once.
func (p *Proxy) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("node", p.opts.NodeName)
	ctx = klog.NewContext(ctx, logger)

	// One factory. Services and EndpointSlices use its label selector; the
	// Node informer, registered under the same type key the factory would
	// use, watches only this node.
	factory := informers.NewSharedInformerFactoryWithOptions(p.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = model.LabelSelector }))
	nodeName := p.opts.NodeName
	nodeInformer := factory.InformerFor(&v1.Node{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredNodeInformer(c, resync, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
		})
	})
	svcInformer := factory.Core().V1().Services()
	sliceInformer := factory.Discovery().V1().EndpointSlices()
	p.services = svcInformer.Lister()
	p.slices = sliceInformer.Lister()
	p.nodes = corelisters.NewNodeLister(nodeInformer.GetIndexer())

	r := newRunner(p.sync, p.opts.MinSyncPeriod, syncBurst, p.opts.RetryPeriod, p.clock)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.request() },
		UpdateFunc: func(any, any) { r.request() },
		DeleteFunc: func(any) { r.request() },
	}
	for _, inf := range []cache.SharedIndexInformer{svcInformer.Informer(), sliceInformer.Informer(), nodeInformer} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			// Only fails once an informer has stopped, which cannot
			// have happened before Start.
			logger.Error(err, "Adding an event handler failed")
			return
		}
	}

	factory.Start(ctx.Done())
	defer factory.Shutdown()
	logger.Info("Waiting for informer caches to sync")
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			logger.Info("Stopped before informer caches synced", "type", typ.String())
			return
		}
	}
	// The initial list requested a sync already; make sure of it even if
	// the cluster is empty.
	r.request()
	r.loop(ctx)
}

// sync programs every family from the listers' current content. It logs
// and counts its own errors; the error it returns only tells the runner
// to retry.
func (p *Proxy) sync(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	p.syncs.Add(1)
	start := p.clock.Now()

	in, err := p.input()
	if err != nil {
		p.failures.Add(1)
		logger.Error(err, "Listing cluster objects failed; will retry", "retryIn", p.opts.RetryPeriod)
		return err
	}
	m := model.Build(in)

	ports := make([]pipeline.Port, len(m.Ports))
	keys := make(map[string]bool, len(m.Ports))
	for i := range m.Ports {
		k := m.Ports[i].String()
		ports[i] = pipeline.Port{Key: k, ServicePort: m.Ports[i].ServicePort}
		keys[k] = true
	}
	results := p.opts.Pipeline.Run(ctx, m.Node, ports)
	for k := range p.lastPorts {
		if !keys[k] {
			p.opts.Pipeline.Forget(k)
		}
	}
	p.lastPorts = keys

	var failed error
	for _, f := range p.families {
		s := state.Build(f, p.opts.State, m.Ports, results)
		if err := p.opts.Backends[f].Sync(ctx, s); err != nil {
			p.failures.Add(1)
			logger.Error(err, "Backend sync failed; will retry", "ipFamily", familyName(f), "retryIn", p.opts.RetryPeriod)
			failed = err
			continue
		}
		logger.V(4).Info("Backend synced", "ipFamily", familyName(f), "servicePorts", len(s.Services))
	}
	logger.V(2).Info("Sync done", "servicePorts", len(m.Ports), "elapsed", p.clock.Since(start))
	return failed
}

// input lists the cluster objects the model is built from.
func (p *Proxy) input() (model.Input, error) {
	in := model.Input{NodeName: p.opts.NodeName}
	for _, f := range p.families {
		kf, _ := state.KubernetesFamily(f)
		in.Families = append(in.Families, kf)
	}
	var err error
	if in.Services, err = p.services.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("list services: %w", err)
	}
	if in.EndpointSlices, err = p.slices.List(labels.Everything()); err != nil {
		return in, fmt.Errorf("list endpointslices: %w", err)
	}
	node, err := p.nodes.Get(p.opts.NodeName)
	switch {
	case apierrors.IsNotFound(err):
		// No Node object (yet): no node labels, as model.Input allows.
	case err != nil:
		return in, fmt.Errorf("get node %q: %w", p.opts.NodeName, err)
	default:
		in.Node = node
	}
	return in, nil
}

func familyName(f backends.Family) string {
	kf, ok := state.KubernetesFamily(f)
	if !ok {
		return fmt.Sprintf("family%d", f)
	}
	return string(kf)
}
