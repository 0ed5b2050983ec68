package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/state"
)

// Address plan of the randomized test: ClusterIPs 10.96.0.0/24 and
// fd00:96::/112, external IPs 192.0.2.0/24, load-balancer VIPs
// 203.0.113.0/24 and 2001:db8::/64, pods 10.244.0.0/24 and fd00:244::/112.

var (
	eqNamespaces = []string{"a", "b"}
	eqServices   = []string{"s0", "s1", "s2", "s3", "s4"}
	eqSlices     = []string{"x", "y"} // per Service and family
	eqCIDRs      = []string{"c0", "c1"}
	eqFamilies   = []backends.Family{backends.IPv4, backends.IPv6}
	// The configured Service CIDRs, which ServiceCIDR objects join.
	eqConfigured = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}
)

// TestIncrementalMatchesFull applies random sequences of Service,
// EndpointSlice, Node and ServiceCIDR changes to a fake clientset and,
// after each sync, compares what the backend holds, and what ServiceHealth
// got, with a from-scratch build of the same objects.
func TestIncrementalMatchesFull(t *testing.T) {
	seeds, steps := 6, 80
	if testing.Short() {
		seeds, steps = 2, 40
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := newWorld(t, uint64(seed))
			for step := range steps {
				w.step(t, step)
			}
			s := w.p.Stats()
			t.Logf("stats: %+v", s)
			if s.PartialSyncs == 0 || s.FullSyncs == 0 {
				t.Errorf("%d partial and %d full syncs; the test wants both", s.PartialSyncs, s.FullSyncs)
			}
		})
	}
}

// world is a Proxy over a fake clientset that the test syncs by hand.
type world struct {
	r      *rand.Rand
	ctx    context.Context
	client *fake.Clientset
	p      *Proxy
	be     *backendfake.Fake
	sh     *fakeServiceHealth
	events uint64 // informer events the changes so far make
}

func newWorld(t *testing.T, seed uint64) *world {
	t.Helper()
	w := &world{r: rand.New(rand.NewPCG(seed, 0x5eed)), be: backendfake.New(), sh: &fakeServiceHealth{}}
	w.client = fake.NewClientset(w.node())
	w.client.Resources = []*metav1.APIResourceList{{
		GroupVersion: networkingv1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "servicecidrs", Kind: "ServiceCIDR"}},
	}}
	w.events = 1 // the Node
	p, err := New(Opts{
		NodeName:      testNode,
		Client:        w.client,
		Pipeline:      pipeline.New(pipeline.Options{}),
		Backends:      map[backends.Family]backends.Backend{backends.IPv4: w.be, backends.IPv6: w.be},
		State:         state.Options{ServiceCIDRs: eqConfigured},
		ServiceHealth: w.sh,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.p = p
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	w.ctx = ctx
	shutdown, ok := p.start(ctx)
	if !ok {
		t.Fatal("the informers never synced")
	}
	if p.cidrs == nil {
		t.Fatal("ServiceCIDRs are not watched")
	}
	t.Cleanup(func() {
		cancel()
		shutdown()
	})
	return w
}

// step makes a few random changes, waits for the Proxy to see them, syncs
// (sometimes with a Resync or a failing backend first) and compares.
func (w *world) step(t *testing.T, step int) {
	t.Helper()
	for range 1 + w.r.IntN(4) {
		w.change(t)
	}
	waitFor(t, "the informer events", func() bool { return w.p.events.Load() == w.events })
	if got := w.p.events.Load(); got != w.events {
		t.Fatalf("step %d: %d events; want %d", step, got, w.events)
	}
	switch w.r.IntN(12) {
	case 0:
		w.p.Resync()
	case 1:
		w.be.FailNextSync(fmt.Errorf("injected failure"))
		if err := w.p.sync(w.ctx); err == nil {
			t.Fatalf("step %d: the sync with a failing backend succeeded", step)
		}
	}
	if err := w.p.sync(w.ctx); err != nil {
		t.Fatalf("step %d: sync: %v", step, err)
	}
	w.compare(t, step)
}

func (w *world) pick(s []string) string { return s[w.r.IntN(len(s))] }

// change makes one random change through the clientset and counts the
// informer event it makes.
func (w *world) change(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	ns, name := w.pick(eqNamespaces), w.pick(eqServices)
	var err error
	switch op := w.r.IntN(20); {
	case op < 5: // create or replace a Service
		svc := w.service(ns, name)
		if _, err = w.client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = w.client.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
		}
	case op < 6: // a small update of one field
		old, gerr := w.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return
		}
		switch w.r.IntN(3) {
		case 0: // nothing the model reads
			old.ResourceVersion = fmt.Sprint(w.r.IntN(1000))
			old.Status.Conditions = []metav1.Condition{{Type: "Seen", Reason: fmt.Sprint(w.r.IntN(1000))}}
		case 1: // only the load balancer's status
			old.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: fmt.Sprintf("203.0.113.%d", 100+w.r.IntN(3))}}
		default: // only an annotation
			old.Annotations = map[string]string{"example.com/weight": fmt.Sprint(w.r.IntN(3))}
		}
		_, err = w.client.CoreV1().Services(ns).Update(ctx, old, metav1.UpdateOptions{})
	case op < 7:
		if err = w.client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
			return
		}
	case op < 13: // create or replace an EndpointSlice
		es := w.slice(ns, name)
		if _, err = w.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = w.client.DiscoveryV1().EndpointSlices(ns).Update(ctx, es, metav1.UpdateOptions{})
		}
	case op < 15:
		sliceName := name + "-" + w.pick([]string{"4", "6"}) + "-" + w.pick(eqSlices)
		if err = w.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, sliceName, metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
			return
		}
	case op < 17: // the Node: labels, a heartbeat, or gone and back
		n := w.node()
		switch w.r.IntN(8) {
		case 0:
			if err = w.client.CoreV1().Nodes().Delete(ctx, testNode, metav1.DeleteOptions{}); err == nil {
				w.events++
				_, err = w.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			}
		case 1, 2, 3: // a heartbeat: status only
			old, gerr := w.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
			if gerr != nil {
				t.Fatal(gerr)
			}
			old.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: fmt.Sprint(w.r.IntN(1000))}}
			_, err = w.client.CoreV1().Nodes().Update(ctx, old, metav1.UpdateOptions{})
		default:
			_, err = w.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		}
	default: // ServiceCIDRs
		c := w.serviceCIDR(w.pick(eqCIDRs))
		if w.r.IntN(4) == 0 {
			if err = w.client.NetworkingV1().ServiceCIDRs().Delete(ctx, c.Name, metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
				return
			}
		} else if _, err = w.client.NetworkingV1().ServiceCIDRs().Create(ctx, c, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = w.client.NetworkingV1().ServiceCIDRs().Update(ctx, c, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	w.events++
}

// node returns the Node with random labels: topology ones and another
// (modules see every label).
func (w *world) node() *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{}}}
	if w.r.IntN(4) > 0 {
		n.Labels[abiZone] = w.pick([]string{"z1", "z2"})
	}
	if w.r.IntN(2) == 0 {
		n.Labels["topology.kubernetes.io/region"] = "r1"
	}
	if w.r.IntN(2) == 0 {
		n.Labels["example.com/rack"] = w.pick([]string{"r1", "r2"})
	}
	return n
}

const abiZone = "topology.kubernetes.io/zone"

// index numbers a Service for its addresses.
func index(ns, name string) int {
	return slices.Index(eqNamespaces, ns)*len(eqServices) + slices.Index(eqServices, name)
}

func (w *world) service(ns, name string) *v1.Service {
	k := index(ns, name)
	v4, v6 := fmt.Sprintf("10.96.0.%d", 10+k), fmt.Sprintf("fd00:96::%x", 10+k)
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	switch w.r.IntN(4) {
	case 0:
		svc.Spec.IPFamilies, svc.Spec.ClusterIPs = []v1.IPFamily{v1.IPv4Protocol}, []string{v4}
	case 1:
		svc.Spec.IPFamilies, svc.Spec.ClusterIPs = []v1.IPFamily{v1.IPv6Protocol}, []string{v6}
	case 2:
		svc.Spec.IPFamilies, svc.Spec.ClusterIPs = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, []string{v4, v6}
	default:
		svc.Spec.IPFamilies, svc.Spec.ClusterIPs = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}, []string{v6, v4}
	}
	svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	switch t := w.r.IntN(12); {
	case t < 5:
		svc.Spec.Type = v1.ServiceTypeClusterIP
	case t < 8:
		svc.Spec.Type = v1.ServiceTypeNodePort
	case t < 11:
		svc.Spec.Type = v1.ServiceTypeLoadBalancer
	default: // headless: not proxied
		svc.Spec.Type = v1.ServiceTypeClusterIP
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = v1.ClusterIPNone, []string{v1.ClusterIPNone}
	}
	ports := []v1.ServicePort{
		{Name: "http", Port: 80, Protocol: v1.ProtocolTCP},
		{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
		{Name: "metrics", Port: 9090, Protocol: v1.ProtocolTCP},
	}
	for i, p := range ports {
		if i == 0 || w.r.IntN(2) == 0 {
			if svc.Spec.Type != v1.ServiceTypeClusterIP {
				p.NodePort = int32(30000 + 3*k + i)
			}
			svc.Spec.Ports = append(svc.Spec.Ports, p)
		}
	}
	if len(svc.Spec.Ports) == 1 && w.r.IntN(3) == 0 {
		svc.Spec.Ports[0].Name = "" // the unnamed port
	}
	external := svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer
	if external && w.r.IntN(2) == 0 {
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
			svc.Spec.HealthCheckNodePort = int32(32000 + k)
		}
	}
	if w.r.IntN(4) == 0 {
		svc.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
	}
	if w.r.IntN(5) == 0 {
		svc.Spec.ExternalIPs = []string{fmt.Sprintf("192.0.2.%d", k)}
	}
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer && w.r.IntN(2) == 0 {
		svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: fmt.Sprintf("203.0.113.%d", k)}, {IP: fmt.Sprintf("2001:db8::%x", k)}}
	}
	if w.r.IntN(5) == 0 {
		svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}}
	}
	if w.r.IntN(3) == 0 {
		svc.Annotations = map[string]string{"example.com/weight": fmt.Sprint(w.r.IntN(3))}
	}
	if w.r.IntN(20) == 0 {
		svc.Labels = map[string]string{model.LabelServiceProxyName: "someone-else"}
	}
	return svc
}

func (w *world) slice(ns, svc string) *discoveryv1.EndpointSlice {
	v6 := w.r.IntN(2) == 0
	fam := "4"
	if v6 {
		fam = "6"
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns,
			Name:      svc + "-" + fam + "-" + w.pick(eqSlices),
			Labels:    map[string]string{model.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if v6 {
		es.AddressType = discoveryv1.AddressTypeIPv6
	}
	switch w.r.IntN(20) {
	case 0: // moved to another Service
		es.Labels[model.LabelServiceName] = w.pick(eqServices)
	case 1:
		delete(es.Labels, model.LabelServiceName)
	}
	ports := []discoveryv1.EndpointPort{
		{Name: ptr("http"), Port: ptr[int32](8080), Protocol: ptr(v1.ProtocolTCP)},
		{Name: ptr("dns"), Port: ptr[int32](5353), Protocol: ptr(v1.ProtocolUDP)},
		{Name: ptr(""), Port: ptr[int32](8080), Protocol: ptr(v1.ProtocolTCP)},
		{Name: ptr("metrics"), Port: ptr[int32](9100 + int32(w.r.IntN(2)))},
	}
	for _, p := range ports {
		if w.r.IntN(2) == 0 {
			es.Ports = append(es.Ports, p)
		}
	}
	for range w.r.IntN(5) {
		// Few addresses, so that slices of one Service share some.
		host := 1 + w.r.IntN(6)
		addr := fmt.Sprintf("10.244.0.%d", host)
		if v6 {
			addr = fmt.Sprintf("fd00:244::%x", host)
		}
		ep := discoveryv1.Endpoint{Addresses: []string{addr}}
		ep.Conditions.Ready = w.boolPtr()
		ep.Conditions.Serving = w.boolPtr()
		ep.Conditions.Terminating = w.boolPtr()
		if w.r.IntN(5) > 0 {
			ep.NodeName = ptr(w.pick([]string{testNode, "node-b"}))
		}
		ep.Zone = ptr(w.pick([]string{"z1", "z2"}))
		if w.r.IntN(3) == 0 {
			ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: w.pick([]string{"z1", "z2"})}}}
			if w.r.IntN(2) == 0 {
				ep.Hints.ForNodes = []discoveryv1.ForNode{{Name: w.pick([]string{testNode, "node-b"})}}
			}
		}
		es.Endpoints = append(es.Endpoints, ep)
	}
	return es
}

// boolPtr returns nil, true or false.
func (w *world) boolPtr() *bool {
	switch w.r.IntN(3) {
	case 0:
		return nil
	case 1:
		return ptr(true)
	}
	return ptr(false)
}

func (w *world) serviceCIDR(name string) *networkingv1.ServiceCIDR {
	c := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, s := range []string{"10.96.0.0/16", "fd00:96::/112", "10.100.0.0/24", "not-a-cidr", "10.97.0.1/16", "::ffff:10.0.0.0/104"} {
		if w.r.IntN(3) == 0 {
			c.Spec.CIDRs = append(c.Spec.CIDRs, s)
		}
	}
	return c
}

// compare checks the backend's States and ServiceHealth's maps against a
// from-scratch build of the clientset's objects.
func (w *world) compare(t *testing.T, step int) {
	t.Helper()
	ctx := context.Background()
	in := model.Input{NodeName: testNode, Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}}
	svcs, err := w.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		in.Services = append(in.Services, &svcs.Items[i])
	}
	eps, err := w.client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range eps.Items {
		in.EndpointSlices = append(in.EndpointSlices, &eps.Items[i])
	}
	if n, err := w.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{}); err == nil {
		in.Node = n
	}
	cidrObjs, err := w.client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cidrs := slices.Clone(eqConfigured)
	for _, o := range cidrObjs.Items {
		for _, s := range o.Spec.CIDRs {
			if p, err := netip.ParsePrefix(s); err == nil && !p.Addr().Is4In6() && !slices.Contains(cidrs, p.Masked()) {
				cidrs = append(cidrs, p.Masked())
			}
		}
	}

	m := model.Build(in)
	ports := make([]pipeline.Port, len(m.Ports))
	for i := range m.Ports {
		ports[i] = pipeline.Port{Key: m.Ports[i].String(), ServicePort: m.Ports[i].ServicePort}
	}
	results := pipeline.New(pipeline.Options{}).Run(ctx, m.Node, ports)
	for _, f := range eqFamilies {
		want := state.Build(f, state.Options{ServiceCIDRs: cidrs}, m.Ports, results)
		got := w.be.State(f)
		if got == nil {
			t.Fatalf("step %d: nothing programmed for %s", step, familyName(f))
		}
		if g, w := backendfake.DumpState(got), backendfake.DumpState(want); g != w {
			t.Fatalf("step %d: %s programmed:\n%s\nwant (full build):\n%s", step, familyName(f), g, w)
		}
		if !reflect.DeepEqual(got.Services, want.Services) {
			t.Fatalf("step %d: %s services differ from the full build's though they dump alike", step, familyName(f))
		}
	}

	// Health-check ports and local Ready IPs, per Service.
	wantPorts := map[types.NamespacedName]uint16{}
	ips := map[types.NamespacedName]map[v1.IPFamily]map[netip.Addr]bool{}
	for _, sp := range m.Ports {
		if sp.HealthCheckNodePort == 0 {
			continue
		}
		n := types.NamespacedName{Namespace: sp.Namespace, Name: sp.Name}
		wantPorts[n] = uint16(sp.HealthCheckNodePort)
		if ips[n] == nil {
			ips[n] = map[v1.IPFamily]map[netip.Addr]bool{}
		}
		if ips[n][sp.Family] == nil {
			ips[n][sp.Family] = map[netip.Addr]bool{}
		}
		for _, ep := range sp.Endpoints {
			if ep.Local && ep.Ready {
				ips[n][sp.Family][ep.Addr] = true
			}
		}
	}
	wantLocal := map[types.NamespacedName]int{}
	for n, byFamily := range ips {
		wantLocal[n] = max(len(byFamily[v1.IPv4Protocol]), len(byFamily[v1.IPv6Protocol]))
	}
	gotPorts, gotLocal, _ := w.sh.last()
	if !reflect.DeepEqual(gotPorts, wantPorts) {
		t.Fatalf("step %d: SyncServices got %v; want %v", step, gotPorts, wantPorts)
	}
	if !reflect.DeepEqual(gotLocal, wantLocal) {
		t.Fatalf("step %d: SyncEndpoints got %v; want %v", step, gotLocal, wantLocal)
	}
}
