package proxy

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/pipeline"
)

// with returns a deep copy of obj changed by f.
func with[T interface{ DeepCopy() T }](obj T, f func(T)) T {
	c := obj.DeepCopy()
	f(c)
	return c
}

// event is one informer notification: old nil for an add, new nil for a
// delete.
type event struct {
	old, new any
}

func (e event) deliver(h cache.ResourceEventHandlerFuncs) {
	switch {
	case e.old == nil:
		h.OnAdd(e.new, false)
	case e.new == nil:
		h.OnDelete(e.old)
	default:
		h.OnUpdate(e.old, e.new)
	}
}

func TestChangeDetection(t *testing.T) {
	web := service("web", "10.96.0.10", nil)
	webSlice := slice("web", "10.244.1.10")
	n := node()
	cidr := &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}},
	}
	nn := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "default", Name: name} }
	bumpRV := func(o metav1.Object) { o.SetResourceVersion("42") }

	tests := []struct {
		name     string
		kind     string // "service", "slice", "node" or "servicecidr"
		ev       event
		services []types.NamespacedName // marked changed
		node     bool                   // node labels changed: the sync compares, and evaluates all if they differ
		cidrs    bool
		queued   bool // a sync is asked for
	}{
		{name: "service added", kind: "service", ev: event{new: web}, services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "service deleted", kind: "service", ev: event{old: web}, services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "service deleted, tombstone", kind: "service",
			ev:       event{old: cache.DeletedFinalStateUnknown{Key: "default/web", Obj: web}},
			services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "service resourceVersion only", kind: "service",
			ev: event{old: web, new: with(web, func(s *v1.Service) { bumpRV(s) })}},
		{name: "service managedFields and status conditions only", kind: "service",
			ev: event{old: web, new: with(web, func(s *v1.Service) {
				s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
				s.Status.Conditions = []metav1.Condition{{Type: "Ready"}}
			})}},
		{name: "service last-applied annotation only", kind: "service",
			ev: event{old: web, new: with(web, func(s *v1.Service) {
				s.Annotations = map[string]string{v1.LastAppliedConfigAnnotation: "{}"}
			})}},
		{name: "service annotation", kind: "service",
			ev: event{old: web, new: with(web, func(s *v1.Service) {
				s.Annotations = map[string]string{"example.com/weight": "3"}
			})},
			services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "service port", kind: "service",
			ev:       event{old: web, new: with(web, func(s *v1.Service) { s.Spec.Ports[0].Port = 81 })},
			services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "service load-balancer ingress", kind: "service",
			ev: event{old: web, new: with(web, func(s *v1.Service) {
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
			})},
			services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "service label", kind: "service",
			ev:       event{old: web, new: with(web, func(s *v1.Service) { s.Labels = map[string]string{"app": "web"} })},
			services: []types.NamespacedName{nn("web")}, queued: true},

		{name: "slice added", kind: "slice", ev: event{new: webSlice}, services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "slice deleted, tombstone", kind: "slice",
			ev:       event{old: cache.DeletedFinalStateUnknown{Key: "default/web-abc", Obj: webSlice}},
			services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "slice resourceVersion only", kind: "slice",
			ev: event{old: webSlice, new: with(webSlice, func(s *discoveryv1.EndpointSlice) { bumpRV(s) })}},
		{name: "slice endpoint condition", kind: "slice",
			ev: event{old: webSlice, new: with(webSlice, func(s *discoveryv1.EndpointSlice) {
				s.Endpoints[0].Conditions.Ready = ptr(false)
			})},
			services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "slice moved to another service", kind: "slice",
			ev: event{old: webSlice, new: with(webSlice, func(s *discoveryv1.EndpointSlice) {
				s.Labels[model.LabelServiceName] = "api"
			})},
			services: []types.NamespacedName{nn("api"), nn("web")}, queued: true},
		{name: "slice loses its service label", kind: "slice",
			ev: event{old: webSlice, new: with(webSlice, func(s *discoveryv1.EndpointSlice) {
				delete(s.Labels, model.LabelServiceName)
			})},
			services: []types.NamespacedName{nn("web")}, queued: true},
		{name: "slice of no service", kind: "slice",
			ev: event{new: with(webSlice, func(s *discoveryv1.EndpointSlice) { s.Labels = nil })}},

		{name: "node added with labels", kind: "node", ev: event{new: n}, node: true, queued: true},
		{name: "node added without labels", kind: "node", ev: event{new: with(n, func(n *v1.Node) { n.Labels = nil })}},
		{name: "node deleted", kind: "node", ev: event{old: n}, node: true, queued: true},
		{name: "node status only (heartbeat)", kind: "node",
			ev: event{old: n, new: with(n, func(n *v1.Node) {
				bumpRV(n)
				n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
				n.Spec.Taints = []v1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: v1.TaintEffectNoSchedule}}
			})}},
		{name: "node zone label", kind: "node",
			ev:   event{old: n, new: with(n, func(n *v1.Node) { n.Labels["topology.kubernetes.io/zone"] = "z2" })},
			node: true, queued: true},
		{name: "node region label added", kind: "node",
			ev:   event{old: n, new: with(n, func(n *v1.Node) { n.Labels["topology.kubernetes.io/region"] = "r1" })},
			node: true, queued: true},
		{name: "node other label: modules see every label", kind: "node",
			ev:   event{old: n, new: with(n, func(n *v1.Node) { n.Labels["example.com/rack"] = "r7" })},
			node: true, queued: true},

		{name: "servicecidr added", kind: "servicecidr", ev: event{new: cidr}, cidrs: true, queued: true},
		{name: "servicecidr deleted", kind: "servicecidr", ev: event{old: cidr}, cidrs: true, queued: true},
		{name: "servicecidr resourceVersion and status only", kind: "servicecidr",
			ev: event{old: cidr, new: with(cidr, func(c *networkingv1.ServiceCIDR) {
				bumpRV(c)
				c.Status.Conditions = []metav1.Condition{{Type: "Ready"}}
			})}},
		{name: "servicecidr cidrs", kind: "servicecidr",
			ev: event{old: cidr, new: with(cidr, func(c *networkingv1.ServiceCIDR) {
				c.Spec.CIDRs = append(c.Spec.CIDRs, "fd00:96::/112")
			})},
			cidrs: true, queued: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &fakeHealth{}
			p, err := New(Opts{
				NodeName: testNode, Client: fake.NewClientset(), Pipeline: pipeline.New(pipeline.Options{}),
				Backends: map[backends.Family]backends.Backend{backends.IPv4: backendfake.New(), backends.IPv6: backendfake.New()},
				Health:   h,
			})
			if err != nil {
				t.Fatal(err)
			}
			p.started.Store(true)
			var eh cache.ResourceEventHandlerFuncs
			switch tt.kind {
			case "service":
				eh = eventHandler(p, p.tracker.onService, nil)
			case "slice":
				eh = eventHandler(p, p.tracker.onEndpointSlice, nil)
			case "node":
				eh = eventHandler(p, p.tracker.onNode, p.syncNode)
			case "servicecidr":
				eh = eventHandler(p, p.tracker.onServiceCIDR, nil)
			}
			tt.ev.deliver(eh)

			c := p.tracker.take()
			got := slices.SortedFunc(maps.Keys(c.services), func(a, b types.NamespacedName) int {
				return strings.Compare(a.String(), b.String())
			})
			if !slices.Equal(got, tt.services) {
				t.Errorf("services marked %v; want %v", got, tt.services)
			}
			if c.nodeLabels != tt.node || c.serviceCIDRs != tt.cidrs || c.full {
				t.Errorf("nodeLabels %v, serviceCIDRs %v, full %v; want %v, %v, false", c.nodeLabels, c.serviceCIDRs, c.full, tt.node, tt.cidrs)
			}
			wantQueued := 0
			if tt.queued {
				wantQueued = 1
			}
			for _, f := range []backends.Family{backends.IPv4, backends.IPv6} {
				if q := h.queuedCount(f); q != wantQueued {
					t.Errorf("QueuedUpdate(%s) called %d times; want %d", familyName(f), q, wantQueued)
				}
			}
			if queued := !p.Stats().LastQueued.IsZero(); queued != tt.queued {
				t.Errorf("Stats().LastQueued set: %v; want %v", queued, tt.queued)
			}
			// Health hears of every node event, relevant to syncs or not.
			if wantNodes := tt.kind == "node"; (h.nodeCount() == 1) != wantNodes {
				t.Errorf("SyncNode called %d times; want 1 for a node event, 0 otherwise", h.nodeCount())
			}
			if p.events.Load() != 1 {
				t.Errorf("%d events counted; want 1", p.events.Load())
			}
		})
	}
}

func TestResyncMarksFull(t *testing.T) {
	h := &fakeHealth{}
	p, err := New(Opts{
		NodeName: testNode, Client: fake.NewClientset(), Pipeline: pipeline.New(pipeline.Options{}),
		Backends: map[backends.Family]backends.Backend{backends.IPv4: backendfake.New()},
		Health:   h,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Before Run: recorded, not reported as a queued update.
	p.Resync()
	if c := p.tracker.take(); !c.full {
		t.Error("Resync before Run did not mark a full sync")
	}
	if q := h.queuedCount(backends.IPv4); q != 0 {
		t.Errorf("QueuedUpdate called %d times before the caches synced; want 0", q)
	}
	p.started.Store(true)
	p.Resync()
	if c := p.tracker.take(); !c.full {
		t.Error("Resync did not mark a full sync")
	}
	if q := h.queuedCount(backends.IPv4); q != 1 {
		t.Errorf("QueuedUpdate called %d times; want 1", q)
	}
}

// TestTrackerMetrics: every event of a Service or of one of its
// EndpointSlices is counted, changed or not; the pending counts follow the
// changes and go back to zero when a sync takes them; trigger times newer
// than the tracker are kept per Service and family, and a deleted slice
// drops its Service's.
func TestTrackerMetrics(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) string { return start.Add(d).Format(time.RFC3339Nano) }
	triggered := func(es *discoveryv1.EndpointSlice, when string) *discoveryv1.EndpointSlice {
		return with(es, func(es *discoveryv1.EndpointSlice) {
			es.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: when}
		})
	}
	web, api := service("web", "10.96.0.10", nil), service("api", "10.96.0.11", nil)
	webSlice := slice("web", "10.244.1.10")
	webKey := serviceFamily{types.NamespacedName{Namespace: "default", Name: "web"}, backends.IPv4}
	orphan := with(slice("web", "10.244.1.10"), func(es *discoveryv1.EndpointSlice) { es.Labels = nil })

	m := &fakeMetrics{}
	tr := &tracker{metrics: m, start: start}
	steps := []struct {
		name                           string
		do                             func()
		serviceEvents, sliceEvents     int
		pendingServices, pendingSlices int
		triggers                       []time.Time // of web's IPv4 slices
	}{
		{"two services added", func() { tr.onService(nil, web); tr.onService(nil, api) }, 2, 0, 2, 0, nil},
		{"a service updated twice", func() {
			tr.onService(web, with(web, func(s *v1.Service) { s.Labels = map[string]string{"a": "b"} }))
			tr.onService(web, with(web, func(s *v1.Service) { s.Labels = map[string]string{"a": "c"} }))
		}, 4, 0, 2, 0, nil},
		{"a service update that changes nothing", func() {
			tr.onService(web, with(web, func(s *v1.Service) { s.ResourceVersion = "9" }))
		}, 5, 0, 2, 0, nil},
		{"a slice from before the start", func() { tr.onEndpointSlice(nil, triggered(webSlice, at(-time.Second))) }, 5, 1, 2, 1, nil},
		{"a slice update", func() {
			tr.onEndpointSlice(webSlice, triggered(slice("web", "10.244.1.11"), at(time.Second)))
		}, 5, 2, 2, 2, []time.Time{start.Add(time.Second)}},
		{"a slice update that changes nothing", func() {
			tr.onEndpointSlice(webSlice, triggered(webSlice, at(2*time.Second)))
		}, 5, 3, 2, 2, []time.Time{start.Add(time.Second)}},
		{"a slice of no service", func() { tr.onEndpointSlice(nil, orphan) }, 5, 3, 2, 2, []time.Time{start.Add(time.Second)}},
		{"an unparsable trigger time", func() {
			tr.onEndpointSlice(webSlice, triggered(slice("web", "10.244.1.12"), "yesterday"))
		}, 5, 4, 2, 3, []time.Time{start.Add(time.Second)}},
		{"the slice deleted", func() { tr.onEndpointSlice(triggered(webSlice, at(3*time.Second)), nil) }, 5, 5, 2, 4, nil},
		{"a sync takes the changes", func() { tr.take() }, 5, 5, 0, 0, nil},
	}
	for _, st := range steps {
		st.do()
		se, le, ps, pl := m.counts()
		if se != st.serviceEvents || le != st.sliceEvents || ps != st.pendingServices || pl != st.pendingSlices {
			t.Errorf("%s: events %d services, %d slices; pending %d services, %d slices; want %d, %d; %d, %d",
				st.name, se, le, ps, pl, st.serviceEvents, st.sliceEvents, st.pendingServices, st.pendingSlices)
		}
		tr.mu.Lock()
		got := tr.c.triggers[webKey]
		tr.mu.Unlock()
		if !slices.Equal(got, st.triggers) {
			t.Errorf("%s: trigger times %v, want %v", st.name, got, st.triggers)
		}
	}
}
