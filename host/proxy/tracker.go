package proxy

import (
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/model"
)

// changes is what happened since a sync last took the changes.
type changes struct {
	// services changed: their ports must be evaluated again.
	services map[types.NamespacedName]struct{}
	// full asks for every port to be evaluated again (Resync).
	full bool
	// nodeLabels: the local Node's labels changed. The sync compares the
	// node the model is built for with the one the cache was evaluated
	// for, and evaluates everything again if they differ.
	nodeLabels bool
	// serviceCIDRs: a ServiceCIDR object changed; every State changes,
	// no port needs evaluating.
	serviceCIDRs bool

	// Kept for Metrics only, when the tracker has one.
	//
	// serviceObjects are the Services whose object changed.
	serviceObjects map[types.NamespacedName]struct{}
	// sliceChanges counts the EndpointSlice events that changed something.
	sliceChanges int
	// triggers are the last-change-trigger-times of the EndpointSlices
	// that changed, per Service and family.
	triggers map[serviceFamily][]time.Time
}

// serviceFamily names one family's part of a Service.
type serviceFamily struct {
	service types.NamespacedName
	family  backends.Family
}

// tracker records changes from informer events. Each on* method is given
// the old and new object of an event (old nil for an add, new nil for a
// delete), records what matters and reports whether a sync is needed. It is
// safe for concurrent use.
type tracker struct {
	mu sync.Mutex
	c  changes

	// metrics, optional, is told about the events and the pending
	// changes. Trigger times before start, when the Proxy was created,
	// are of changes made before it ran, and are not kept: the first
	// sync would report how long wasp was not running.
	metrics Metrics
	start   time.Time
}

// take returns the changes recorded so far and starts afresh.
func (t *tracker) take() changes {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.c
	t.c = changes{}
	if t.metrics != nil {
		t.metrics.PendingChanges(0, 0)
	}
	return c
}

// pending returns how many Services changed since the last take.
func (t *tracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.c.services)
}

func (t *tracker) markFull() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.c.full = true
}

func (t *tracker) markServices(names ...types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.markServicesLocked(names...)
}

func (t *tracker) markServicesLocked(names ...types.NamespacedName) {
	if t.c.services == nil {
		t.c.services = map[types.NamespacedName]struct{}{}
	}
	for _, n := range names {
		t.c.services[n] = struct{}{}
	}
}

// pendingChangedLocked tells Metrics what waits for the next sync.
func (t *tracker) pendingChangedLocked() {
	t.metrics.PendingChanges(len(t.c.serviceObjects), t.c.sliceChanges)
}

// onService records a Service event.
func (t *tracker) onService(old, new *v1.Service) bool {
	if t.metrics != nil {
		t.metrics.ServiceEvent()
	}
	if old != nil && new != nil && !serviceChanged(old, new) {
		return false
	}
	o := cmpOr(new, old)
	name := types.NamespacedName{Namespace: o.Namespace, Name: o.Name}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.markServicesLocked(name)
	if t.metrics != nil {
		if t.c.serviceObjects == nil {
			t.c.serviceObjects = map[types.NamespacedName]struct{}{}
		}
		t.c.serviceObjects[name] = struct{}{}
		t.pendingChangedLocked()
	}
	return true
}

// serviceChanged reports whether an update changed anything model.Build
// reads of a Service: its spec, the load-balancer part of its status, its
// labels (which may hand it to another proxy) and the annotations modules
// see. Bookkeeping (resourceVersion, managedFields, status conditions)
// does not count.
func serviceChanged(old, new *v1.Service) bool {
	return !reflect.DeepEqual(old.Spec, new.Spec) ||
		!reflect.DeepEqual(old.Status.LoadBalancer, new.Status.LoadBalancer) ||
		!maps.Equal(old.Labels, new.Labels) ||
		!annotationsEqual(old.Annotations, new.Annotations)
}

// annotationsEqual compares annotations as modules see them: without the
// last-applied configuration, which model.Build leaves out.
func annotationsEqual(a, b map[string]string) bool {
	n := 0
	for k, v := range a {
		if k == v1.LastAppliedConfigAnnotation {
			continue
		}
		if w, ok := b[k]; !ok || w != v {
			return false
		}
		n++
	}
	if _, ok := b[v1.LastAppliedConfigAnnotation]; ok {
		n++
	}
	return n == len(b)
}

// onEndpointSlice records an EndpointSlice event. Both the old and the new
// object's Service are marked: relabelling a slice moves its endpoints from
// one Service to another.
func (t *tracker) onEndpointSlice(old, new *discoveryv1.EndpointSlice) bool {
	var names []types.NamespacedName
	for _, es := range []*discoveryv1.EndpointSlice{old, new} {
		if n, ok := sliceService(es); ok && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		// A slice of no Service, before and after: model.Build skips it.
		return false
	}
	if t.metrics != nil {
		t.metrics.EndpointSliceEvent()
	}
	if old != nil && new != nil && !endpointSliceChanged(old, new) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.markServicesLocked(names...)
	if t.metrics != nil {
		t.c.sliceChanges++
		t.triggerLocked(old, new)
		t.pendingChangedLocked()
	}
	return true
}

// triggerLocked keeps the last-change-trigger-time of a changed
// EndpointSlice, as upstream's EndpointsChangeTracker: the time of an
// added or updated slice is added to its Service's; a deleted slice drops
// them, as its annotation tells the time of an earlier change.
func (t *tracker) triggerLocked(old, new *discoveryv1.EndpointSlice) {
	es := cmpOr(new, old)
	name, ok := sliceService(es)
	fam, famOK := sliceFamily(es)
	if !ok || !famOK {
		return
	}
	key := serviceFamily{name, fam}
	if new == nil {
		delete(t.c.triggers, key)
		return
	}
	at := triggerTime(new)
	if at.IsZero() || !at.After(t.start) {
		return
	}
	if t.c.triggers == nil {
		t.c.triggers = map[serviceFamily][]time.Time{}
	}
	t.c.triggers[key] = append(t.c.triggers[key], at)
}

// triggerTime returns an EndpointSlice's last-change-trigger-time, the
// zero time if it has none or it does not parse.
func triggerTime(es *discoveryv1.EndpointSlice) time.Time {
	v, ok := es.Annotations[v1.EndpointsLastChangeTriggerTime]
	if !ok {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}
	}
	return at
}

// sliceFamily returns the IP family of an EndpointSlice's addresses.
func sliceFamily(es *discoveryv1.EndpointSlice) (backends.Family, bool) {
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4:
		return backends.IPv4, true
	case discoveryv1.AddressTypeIPv6:
		return backends.IPv6, true
	}
	return 0, false
}

// endpointSliceChanged reports whether an update changed anything
// model.Build reads of an EndpointSlice.
func endpointSliceChanged(old, new *discoveryv1.EndpointSlice) bool {
	return old.AddressType != new.AddressType ||
		!maps.Equal(old.Labels, new.Labels) ||
		!reflect.DeepEqual(old.Endpoints, new.Endpoints) ||
		!reflect.DeepEqual(old.Ports, new.Ports)
}

// sliceService returns the Service an EndpointSlice belongs to, as
// model.Build groups them: its namespace and its LabelServiceName label.
func sliceService(es *discoveryv1.EndpointSlice) (types.NamespacedName, bool) {
	if es == nil || es.Namespace == "" {
		return types.NamespacedName{}, false
	}
	name := es.Labels[model.LabelServiceName]
	if name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: es.Namespace, Name: name}, true
}

// onNode records an event of the local Node. model.Build reads nothing of
// the Node but its labels, and passes every one of them to the modules
// (abi.Node.Labels), so a change of any label, not only the topology ones
// upstream looks at, may change any port's decision. Status updates (the
// kubelet's heartbeats) change no label and need no sync.
func (t *tracker) onNode(old, new *v1.Node) bool {
	if maps.Equal(nodeLabels(old), nodeLabels(new)) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.c.nodeLabels = true
	return true
}

func nodeLabels(n *v1.Node) map[string]string {
	if n == nil {
		return nil
	}
	return n.Labels
}

// onServiceCIDR records a ServiceCIDR event.
func (t *tracker) onServiceCIDR(old, new *networkingv1.ServiceCIDR) bool {
	if old != nil && new != nil && slices.Equal(old.Spec.CIDRs, new.Spec.CIDRs) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.c.serviceCIDRs = true
	return true
}

// cmpOr returns a if it is not nil, else b.
func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// eventHandler adapts a tracker method to informer events of type T: it
// calls each with the new object (nil for a delete) when each is not nil,
// then on, and queues a sync when on reports one is needed.
func eventHandler[T any](p *Proxy, on func(old, new *T) bool, each func(*T)) cache.ResourceEventHandlerFuncs {
	call := func(old, new *T) {
		if each != nil {
			each(new)
		}
		if on(old, new) {
			p.queue()
		}
		p.events.Add(1)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(*T); ok {
				call(nil, o)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*T)
			n, ok2 := newObj.(*T)
			if ok1 && ok2 {
				call(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(*T); ok {
				call(o, nil)
			}
		},
	}
}
