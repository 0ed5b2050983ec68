package catalog

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/abi"
)

// WatcherOpts configure a Watcher.
type WatcherOpts struct {
	// Dynamic reads the ServiceProxyModules. Required.
	Dynamic dynamic.Interface
	// Client reads the Node. Required.
	Client kubernetes.Interface
	// NodeName is this node. Required.
	NodeName string
	// OnChange gets the node's choice at start (once the caches synced)
	// and whenever it changes; calls never overlap. Required.
	OnChange func(map[abi.Stage]Choice)
	// OnInvalid is told about every object version that does not
	// validate. Optional.
	OnInvalid func(name string, err error)
}

// Watcher follows the ServiceProxyModules and the labels of its Node, and
// reports the node's choice of modules when it changes.
type Watcher struct {
	opts WatcherOpts

	mu      sync.Mutex
	last    map[abi.Stage]Choice
	started bool
	invalid map[string]string // name: resourceVersion reported
}

// NewWatcher returns a Watcher; Run runs it.
func NewWatcher(opts WatcherOpts) *Watcher {
	return &Watcher{opts: opts, invalid: map[string]string{}}
}

// Run watches until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(w.opts.Dynamic, 0)
	objs := dyn.ForResource(GVR).Informer()
	nf := informers.NewSharedInformerFactoryWithOptions(w.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.opts.NodeName).String()
		}))
	nodes := nf.Core().V1().Nodes().Informer()
	update := func() { w.update(ctx, objs.GetStore(), nodes.GetStore()) }
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	}
	for _, inf := range []cache.SharedIndexInformer{objs, nodes} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	dyn.Start(ctx.Done())
	nf.Start(ctx.Done())
	defer dyn.Shutdown()
	defer nf.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), objs.HasSynced, nodes.HasSynced) {
		return ctx.Err()
	}
	w.mu.Lock()
	w.started = true
	w.mu.Unlock()
	update()
	<-ctx.Done()
	return nil
}

// update computes the choice from the stores and reports a change.
func (w *Watcher) update(ctx context.Context, objs, nodes cache.Store) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		return // the first update comes once both caches synced
	}
	var labels map[string]string
	for _, o := range nodes.List() {
		if n, ok := o.(*v1.Node); ok && n.Name == w.opts.NodeName {
			labels = n.Labels
		}
	}
	var valid []*ServiceProxyModule
	for _, o := range objs.List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		m, err := FromUnstructured(u)
		if err != nil {
			if rv, seen := w.invalid[u.GetName()]; !seen || rv != u.GetResourceVersion() {
				w.invalid[u.GetName()] = u.GetResourceVersion()
				klog.FromContext(ctx).Error(err, "Ignoring an invalid ServiceProxyModule", "name", u.GetName())
				if w.opts.OnInvalid != nil {
					w.opts.OnInvalid(u.GetName(), err)
				}
			}
			continue
		}
		delete(w.invalid, u.GetName())
		valid = append(valid, m)
	}
	choice := Select(valid, labels)
	if w.last != nil && Equal(w.last, choice) {
		return
	}
	w.last = choice
	w.opts.OnChange(choice)
}

// Served reports whether the apiserver serves ServiceProxyModules,
// asking discovery (retrying while the answer is inconclusive, for up to
// wait).
func Served(ctx context.Context, client kubernetes.Interface, wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	for {
		list, err := client.Discovery().ServerResourcesForGroupVersion(Group + "/" + Version)
		switch {
		case err == nil:
			for _, r := range list.APIResources {
				if r.Name == Resource {
					return true, nil
				}
			}
			return false, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case time.Now().After(deadline):
			return false, fmt.Errorf("discovery of %s/%s: %w", Group, Version, err)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
