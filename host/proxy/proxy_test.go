package proxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/pipeline"
	waspruntime "github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/state"
	"github.com/wasp-proxy/wasp/internal/modbuild"
)

// Test address plan: ClusterIPs in 10.96.0.0/16, pods in 10.244.0.0/16.

const testNode = "node-a"

// eventually is a failure guard, not a timing assertion: it only bounds how
// long a broken sync loop can hang the test.
const eventually = 30 * time.Second

func ptr[T any](v T) *T { return &v }

func node() *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}}}
}

// service returns an IPv4 ClusterIP Service default/name with TCP port
// "http" 80 on clusterIP.
func service(name, clusterIP string, labels map[string]string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
}

// slice returns the IPv4 EndpointSlice of Service default/svc with port
// "http" 8080 and one ready endpoint per address, on node-b.
func slice(svc string, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default",
			Name:      svc + "-abc",
			Labels:    map[string]string{model.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080), Protocol: ptr(v1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: ptr("node-b")})
	}
	return s
}

// start runs a Proxy over client with a fake IPv4 backend until the test
// ends.
func start(t *testing.T, client *fake.Clientset) (*Proxy, *backendfake.Fake) {
	t.Helper()
	be := backendfake.New()
	return startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be}}), be
}

// waitFor polls cond until it holds, failing the test after eventually.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(eventually)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const webDump = `family ipv4
  node-port-addresses any

service default/web:http/TCP/IPv4
  cluster-ip 10.96.0.10 tcp dport 80
  internal cluster -> goto cluster
  cluster { 10.244.1.10:8080 weight 1 }
  local unused
  serving { 10.244.1.10 }
`

func TestFirstSyncWaitsForCaches(t *testing.T) {
	client := fake.NewClientset(node(), service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"))
	// Hold the Service list, so the caches cannot sync. The fake
	// clientset runs reactors under its lock, so this holds every other
	// call too.
	release, listing := make(chan struct{}), make(chan struct{})
	var once sync.Once
	client.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(listing) })
		<-release
		return false, nil, nil
	})
	var unblock sync.Once
	t.Cleanup(func() { unblock.Do(func() { close(release) }) })

	_, be := start(t, client)
	select {
	case <-listing:
	case <-time.After(eventually):
		t.Fatal("the Service informer never listed")
	}
	// A broken loop would sync the empty caches now; give it the chance.
	time.Sleep(50 * time.Millisecond)
	if c := be.Counts(); c.Syncs != 0 {
		t.Fatalf("%d syncs before the caches synced; want 0", c.Syncs)
	}

	unblock.Do(func() { close(release) })
	waitFor(t, "the first sync", func() bool { return be.Counts().Syncs > 0 })
	if got := be.Dump(); got != webDump {
		t.Errorf("first sync programmed:\n%s\nwant:\n%s", got, webDump)
	}
}

func TestLaterObjectsReachBackend(t *testing.T) {
	client := fake.NewClientset(node())
	p, be := start(t, client)
	waitFor(t, "the first sync", func() bool { return be.State(backends.IPv4) != nil })
	if s := be.State(backends.IPv4); len(s.Services) != 0 {
		t.Fatalf("empty cluster programmed %d services", len(s.Services))
	}

	ctx := context.Background()
	if _, err := client.CoreV1().Services("default").Create(ctx, service("web", "10.96.0.10", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("web", "10.244.1.10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new service", func() bool { return be.Dump() == webDump })

	if err := client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the service removal", func() bool { return !strings.Contains(be.Dump(), "service ") })
	if s := p.Stats(); s.SyncFailures != 0 {
		t.Errorf("Stats().SyncFailures = %d; want 0", s.SyncFailures)
	}
}

func TestFailedSyncIsRetried(t *testing.T) {
	client := fake.NewClientset(node(), service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"))
	be := backendfake.New()
	be.FailNextSync(errors.New("injected failure"))
	p := startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be}})
	ctx := context.Background()

	// The first sync fails; a retry (or a late event of the initial list)
	// lands the state.
	waitFor(t, "the retried first sync", func() bool { return be.Dump() == webDump })

	// One event, whose sync fails: only the retry can land it, as a full
	// sync.
	fullBefore := p.Stats().FullSyncs
	be.FailNextSync(errors.New("injected failure"))
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice("web", "10.244.1.10", "10.244.2.10"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried sync", func() bool { return strings.Contains(be.Dump(), "10.244.2.10:8080") })
	if c := be.Counts(); c.FailedSyncs != 2 || c.Syncs < 4 {
		t.Errorf("backend counts %+v; want 2 failed syncs and at least 4 syncs", c)
	}
	if s := p.Stats(); s.SyncFailures != 2 || s.FullSyncs <= fullBefore {
		t.Errorf("Stats() = %+v; want 2 failures and a full sync after the failed one", s)
	}
}

// housekeepingBackend programs through its Backend, then fails the
// housekeeping of the syncs while fail is set.
type housekeepingBackend struct {
	backends.Backend
	fail atomic.Bool
}

func (b *housekeepingBackend) Sync(ctx context.Context, s *backends.State) (backends.SyncResult, error) {
	r, err := b.Backend.Sync(ctx, s)
	if err != nil {
		return r, err
	}
	if b.fail.Load() {
		return r, fmt.Errorf("conntrack: injected: %w", backends.ErrHousekeeping)
	}
	return r, nil
}

// TestHousekeepingFailureIsNoSyncFailure: a backend that programmed its
// dataplane but failed the work after it (ErrHousekeeping) counts as
// synced: no failure, no forced full resync.
func TestHousekeepingFailureIsNoSyncFailure(t *testing.T) {
	client := fake.NewClientset(node(), service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"))
	be := &housekeepingBackend{Backend: backendfake.New()}
	p := startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be}})
	ctx := context.Background()
	dump := func() string { return be.Backend.(*backendfake.Fake).Dump() }
	waitFor(t, "the first sync", func() bool { return dump() == webDump })
	waitFor(t, "the first sync's stats", func() bool { return p.Stats().Syncs > 0 })

	before := p.Stats()
	be.fail.Store(true)
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice("web", "10.244.1.10", "10.244.2.10"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change", func() bool { return strings.Contains(dump(), "10.244.2.10:8080") })
	waitFor(t, "its stats", func() bool { return p.Stats().Syncs > before.Syncs })
	time.Sleep(100 * time.Millisecond) // ten retry periods: a retry would show
	if s := p.Stats(); s.SyncFailures != 0 || s.FullSyncs != before.FullSyncs {
		t.Errorf("Stats() = %+v after a housekeeping failure; want no failure and no full sync (before: %+v)", s, before)
	}
}

func TestServiceProxyNameIsIgnored(t *testing.T) {
	other := map[string]string{model.LabelServiceProxyName: "someone-else"}
	client := fake.NewClientset(node(),
		service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"),
		service("theirs", "10.96.0.20", other), slice("theirs", "10.244.1.20"))
	_, be := start(t, client)
	waitFor(t, "the first sync", func() bool { return be.Dump() == webDump })

	// Also one created later, and then one relabelled away from wasp.
	ctx := context.Background()
	if _, err := client.CoreV1().Services("default").Create(ctx, service("later", "10.96.0.30", other), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := service("web", "10.96.0.10", other)
	if _, err := client.CoreV1().Services("default").Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web to be handed away", func() bool { return !strings.Contains(be.Dump(), "service ") })
	if got := be.Dump(); strings.Contains(got, "theirs") || strings.Contains(got, "later") {
		t.Errorf("a service of another proxy was programmed:\n%s", got)
	}

	// The informers ask the apiserver to filter, as upstream does.
	var selectors []string
	for _, a := range client.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource != "nodes" {
			selectors = append(selectors, l.GetListRestrictions().Labels.String())
		}
	}
	if len(selectors) == 0 {
		t.Fatal("no list action recorded")
	}
	for _, s := range selectors {
		if !strings.Contains(s, "!"+model.LabelServiceProxyName) {
			t.Errorf("list with label selector %q; want it to exclude %s", s, model.LabelServiceProxyName)
		}
	}
}

func TestNewRejectsBadOpts(t *testing.T) {
	tests := []struct {
		name string
		opts Opts
		want []string
	}{
		{name: "empty", opts: Opts{}, want: []string{"nodeName", "client", "pipeline", "backends"}},
		{
			name: "bad backends",
			opts: Opts{
				NodeName: testNode, Client: fake.NewClientset(), Pipeline: pipeline.New(pipeline.Options{}),
				Backends:      map[backends.Family]backends.Backend{backends.IPv4: nil, 5: backendfake.New()},
				MinSyncPeriod: -1, DriftCheckPeriod: -time.Second,
			},
			want: []string{"backends[4]: nil backend", "backends[5]: unknown IP family", "minSyncPeriod", "driftCheckPeriod: -1s is negative"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil {
				t.Fatal("New succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// startWith runs a Proxy with opts (NodeName, Pipeline and short periods
// filled in) until the test ends.
func startWith(t *testing.T, opts Opts) *Proxy {
	t.Helper()
	opts.NodeName = testNode
	if opts.Pipeline == nil {
		opts.Pipeline = pipeline.New(pipeline.Options{})
	}
	opts.MinSyncPeriod = 10 * time.Millisecond
	opts.RetryPeriod = 10 * time.Millisecond
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return p
}

// serveServiceCIDRs makes client's discovery report the ServiceCIDR API.
func serveServiceCIDRs(client *fake.Clientset) {
	client.Resources = []*metav1.APIResourceList{{
		GroupVersion: networkingv1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "servicecidrs", Kind: "ServiceCIDR"}},
	}}
}

func TestPartialAndFullSyncs(t *testing.T) {
	client := fake.NewClientset(node(),
		service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"),
		service("api", "10.96.0.11", nil), slice("api", "10.244.1.11"))
	be, h := backendfake.New(), &fakeHealth{}
	p := startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be}, Health: h})
	waitFor(t, "the first sync", func() bool { return p.Stats().Syncs == 1 && be.Counts().Syncs == 1 })
	if s := p.Stats(); s.FullSyncs != 1 || s.LastEvaluated != 2 || s.ServicePorts != 2 || s.LastSynced.IsZero() {
		t.Fatalf("after the first sync, Stats() = %+v; want 1 full sync of 2 ports", s)
	}
	if h.updatedCount(backends.IPv4) != 1 || h.queuedCount(backends.IPv4) < 1 {
		t.Errorf("Health got %d QueuedUpdate and %d Updated; want at least 1 and 1", h.queuedCount(backends.IPv4), h.updatedCount(backends.IPv4))
	}
	if n := h.lastNode(); n == nil || n.Name != testNode {
		t.Errorf("Health's node is %v; want %s", n, testNode)
	}

	// One Service's endpoints change: only its port is evaluated.
	ctx := context.Background()
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice("web", "10.244.1.10", "10.244.2.10"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new endpoint", func() bool { return strings.Contains(be.Dump(), "10.244.2.10:8080") })
	waitFor(t, "the sync's stats", func() bool { return p.Stats().PartialSyncs == 1 })
	if s := p.Stats(); s.FullSyncs != 1 || s.LastEvaluated != 1 || s.ServicePorts != 2 {
		t.Errorf("after an EndpointSlice change, Stats() = %+v; want a partial sync of 1 port", s)
	}

	// A heartbeat: Health hears of the Node, nothing is queued or synced.
	syncs, queued, events := p.Stats().Syncs, h.queuedCount(backends.IPv4), p.events.Load()
	beat := node()
	beat.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	if _, err := client.CoreV1().Nodes().Update(ctx, beat, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node event", func() bool { return p.events.Load() > events })
	if n := h.lastNode(); n == nil || len(n.Status.Conditions) == 0 {
		t.Errorf("Health's node is %v; want the heartbeat's", n)
	}
	if q := h.queuedCount(backends.IPv4); q != queued {
		t.Errorf("a heartbeat queued an update")
	}

	// Any label change: every port again.
	relabelled := node()
	relabelled.Labels["example.com/rack"] = "r7"
	if _, err := client.CoreV1().Nodes().Update(ctx, relabelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a full sync for the label", func() bool { return p.Stats().FullSyncs == 2 })
	if s := p.Stats(); s.LastEvaluated != 2 || s.Syncs != syncs+1 {
		t.Errorf("after a node label change, Stats() = %+v; want one more sync, of 2 ports", s)
	}

	// Resync: every port again.
	p.Resync()
	waitFor(t, "a full sync for Resync", func() bool { return p.Stats().FullSyncs == 3 })
	if s := p.Stats(); s.LastEvaluated != 2 || s.SyncFailures != 0 || s.PendingChanges != 0 {
		t.Errorf("after Resync, Stats() = %+v; want 2 ports evaluated, no failure, nothing pending", s)
	}
}

func TestServiceCIDRs(t *testing.T) {
	cidr := func(name string, cidrs ...string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	}
	configured := state.Options{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}}
	client := fake.NewClientset(node(), service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"),
		cidr("kubernetes", "10.96.0.0/16", "fd00:96::/112"))
	serveServiceCIDRs(client)
	be := backendfake.New()
	p := startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be, backends.IPv6: be}, State: configured})
	waitFor(t, "the first sync", func() bool { return p.Stats().Syncs == 1 && be.Counts().Syncs == 2 })
	if s := be.State(backends.IPv4); !slices.Equal(s.ServiceCIDRs, []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}) {
		t.Errorf("IPv4 service CIDRs %v; want the configured one once", s.ServiceCIDRs)
	}
	if s := be.State(backends.IPv6); !slices.Equal(s.ServiceCIDRs, []netip.Prefix{netip.MustParsePrefix("fd00:96::/112")}) {
		t.Errorf("IPv6 service CIDRs %v; want the object's", s.ServiceCIDRs)
	}

	// A second range, and garbage that is skipped: no port is evaluated.
	ctx := context.Background()
	if _, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, cidr("extra", "10.100.0.0/24", "not-a-cidr"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new range", func() bool { return strings.Contains(be.Dump(), "service-cidrs { 10.96.0.0/16, 10.100.0.0/24 }") })
	waitFor(t, "the sync's stats", func() bool { return p.Stats().Syncs == 2 })
	if s := p.Stats(); s.PartialSyncs != 1 || s.LastEvaluated != 0 || s.SyncFailures != 0 {
		t.Errorf("after a ServiceCIDR change, Stats() = %+v; want a partial sync evaluating nothing", s)
	}

	if err := client.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the range's removal", func() bool {
		s := be.State(backends.IPv6)
		return s != nil && len(s.ServiceCIDRs) == 0
	})
}

func TestServiceCIDRsNotServed(t *testing.T) {
	configured := state.Options{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}}
	client := fake.NewClientset(node(), service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"))
	be := backendfake.New()
	p := startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be}, State: configured})
	waitFor(t, "the first sync", func() bool { return p.Stats().Syncs == 1 })
	if !strings.Contains(be.Dump(), "service-cidrs { 10.96.0.0/16 }") {
		t.Errorf("programmed:\n%s\nwant the configured service CIDR", be.Dump())
	}
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "servicecidrs" {
			t.Errorf("%s of servicecidrs though discovery does not serve them", a.GetVerb())
		}
	}
}

// TestStateOptionsReachBackend: every node-wide option reaches the
// backend's State of its family, the node IPs of the
// loadBalancerSourceRanges exception among them. It fails when an option
// is added to state.Options and sync leaves it behind.
func TestStateOptionsReachBackend(t *testing.T) {
	opts := state.Options{
		NodePortAddresses: []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::1")},
		NodeIPs:           []netip.Addr{netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("2001:db8::2")},
		ServiceCIDRs:      []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:96::/112")},
		ClusterCIDRs:      []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")},
		MasqueradeAll:     true,
	}
	ov := reflect.ValueOf(opts)
	for i := range ov.NumField() {
		if ov.Field(i).IsZero() {
			t.Fatalf("the test leaves state.Options.%s unset: set it", ov.Type().Field(i).Name)
		}
	}
	be := backendfake.New()
	p := startWith(t, Opts{Client: fake.NewClientset(node()), State: opts,
		Backends: map[backends.Family]backends.Backend{backends.IPv4: be, backends.IPv6: be}})
	waitFor(t, "the first sync", func() bool { return p.Stats().Syncs == 1 })
	for _, f := range []backends.Family{backends.IPv4, backends.IPv6} {
		got, want := be.State(f), state.Build(f, opts, nil, nil)
		if !got.Equal(want) {
			t.Errorf("%v: programmed:\n%s\nwant:\n%s", f, backendfake.DumpState(got), backendfake.DumpState(want))
		}
	}
}

func TestServiceHealth(t *testing.T) {
	lb := service("lb", "10.96.0.20", nil)
	lb.Spec.Type = v1.ServiceTypeLoadBalancer
	lb.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	lb.Spec.HealthCheckNodePort = 32000
	lb.Spec.Ports = append(lb.Spec.Ports, v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP})
	for i := range lb.Spec.Ports {
		lb.Spec.Ports[i].NodePort = int32(30080 + i)
	}
	es := slice("lb")
	es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr("https"), Port: ptr[int32](8443), Protocol: ptr(v1.ProtocolTCP)})
	local := func(addr string, c discoveryv1.EndpointConditions) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr(testNode), Conditions: c}
	}
	es.Endpoints = []discoveryv1.Endpoint{
		local("10.244.1.10", discoveryv1.EndpointConditions{}), // ready, on both ports: counted once
		local("10.244.1.11", discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}),
		local("10.244.1.12", discoveryv1.EndpointConditions{Ready: ptr(false)}),
		{Addresses: []string{"10.244.2.10"}, NodeName: ptr("node-b")},
	}
	// Cluster policy: no health-check port.
	client := fake.NewClientset(node(), lb, es, service("web", "10.96.0.10", nil), slice("web", "10.244.1.13"))
	sh := &fakeServiceHealth{}
	p := startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: backendfake.New()}, ServiceHealth: sh})
	waitFor(t, "the first sync", func() bool { return p.Stats().Syncs == 1 })
	ports, counts, calls := sh.last()
	lbName := types.NamespacedName{Namespace: "default", Name: "lb"}
	if want := map[types.NamespacedName]uint16{lbName: 32000}; !maps.Equal(ports, want) || calls != 1 {
		t.Errorf("SyncServices got %v in %d calls; want %v in 1", ports, calls, want)
	}
	if want := map[types.NamespacedName]int{lbName: 1}; !maps.Equal(counts, want) {
		t.Errorf("SyncEndpoints got %v; want %v", counts, want)
	}

	// The Service goes: neither map holds it.
	if err := client.CoreV1().Services("default").Delete(context.Background(), "lb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the next sync", func() bool { return p.Stats().Syncs == 2 })
	if ports, counts, _ := sh.last(); len(ports) != 0 || len(counts) != 0 {
		t.Errorf("after the Service's removal, SyncServices got %v and SyncEndpoints %v; want none", ports, counts)
	}
}

// TestMetrics: Metrics hears of the events, the queued updates and every
// sync: full or partial, how long, the outcome of each family's backend,
// the ports without local endpoints, and how long after its trigger time
// an EndpointSlice change was programmed.
func TestMetrics(t *testing.T) {
	// default/local: internal traffic policy Local; default/lb: a
	// LoadBalancer with external traffic policy Local; both with endpoints
	// on node-b only.
	local := service("local", "10.96.0.12", nil)
	local.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
	lb := service("lb", "10.96.0.13", nil)
	lb.Spec.Type = v1.ServiceTypeLoadBalancer
	lb.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	lb.Spec.Ports[0].NodePort = 30080
	client := fake.NewClientset(node(),
		service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"),
		local, slice("local", "10.244.1.12"), lb, slice("lb", "10.244.1.13"))
	be, m := backendfake.New(), &fakeMetrics{}
	startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be}, Metrics: m})
	waitFor(t, "the first sync", func() bool { _, n := m.lastReport(); return n == 1 })
	r, _ := m.lastReport()
	want := FamilySync{Family: backends.IPv4, ServicePorts: 3, NoLocalInternal: 1, NoLocalExternal: 1}
	if !r.Full || r.Evaluated != 3 || r.Err != nil || len(r.Families) != 1 || !reflect.DeepEqual(r.Families[0], want) {
		t.Errorf("first sync: %+v; want a full sync of 3 ports and %+v", r, want)
	}
	if se, le, ps, pl := m.counts(); se != 3 || le != 3 || ps != 0 || pl != 0 {
		t.Errorf("after the first sync: events %d services, %d slices; pending %d, %d; want 3, 3; 0, 0", se, le, ps, pl)
	}
	if q := m.queuedCount(backends.IPv4); q < 1 {
		t.Errorf("QueuedUpdate called %d times; want at least once", q)
	}

	// An endpoint change with a trigger time: a partial sync reports how
	// long after it the change was programmed.
	trigger := time.Now()
	es := slice("web", "10.244.1.10", "10.244.2.10")
	es.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: trigger.Format(time.RFC3339Nano)}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(context.Background(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second sync", func() bool { _, n := m.lastReport(); return n == 2 })
	r, _ = m.lastReport()
	if r.Full || r.Evaluated != 1 || len(r.Families) != 1 || len(r.Families[0].NetworkProgramming) != 1 {
		t.Fatalf("after an EndpointSlice change: %+v; want a partial sync of 1 port and 1 network programming duration", r)
	}
	if d := r.Families[0].NetworkProgramming[0]; d < 0 || d > time.Since(trigger) {
		t.Errorf("network programming duration %v; want between 0 and the time since the trigger", d)
	}

	// A failing backend is reported with its error, and its changes were
	// not programmed unless only housekeeping failed.
	for i, tt := range []struct {
		err        error
		programmed bool
	}{
		{errors.New("nft says no"), false},
		{fmt.Errorf("conntrack cleanup: %w", backends.ErrHousekeeping), true},
	} {
		be.FailNextSync(tt.err)
		es = slice("web", "10.244.1.10", fmt.Sprintf("10.244.3.%d", i))
		es.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
		if _, err := client.DiscoveryV1().EndpointSlices("default").Update(context.Background(), es, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		var failed FamilySync
		waitFor(t, "the failed sync", func() bool {
			r, ok := m.find(func(r SyncReport) bool { return len(r.Families) == 1 && r.Families[0].Err == tt.err })
			if ok {
				failed = r.Families[0]
			}
			return ok
		})
		if failed.Programmed() != tt.programmed || (len(failed.NetworkProgramming) == 1) != tt.programmed {
			t.Errorf("backend error %q: %+v; want programmed %v, with a programming duration if so", tt.err, failed, tt.programmed)
		}
		if !tt.programmed {
			waitFor(t, "a sync after the failed one", func() bool {
				r, _ := m.lastReport()
				return r.Families[0].Err == nil
			})
		}
	}
}

func TestSlim(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo",
		Annotations:   map[string]string{"wasp.dev/x": "kept", v1.LastAppliedConfigAnnotation: "{...}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}}}
	got, err := slim(svc)
	if err != nil {
		t.Fatal(err)
	}
	out := got.(*v1.Service)
	if out.ManagedFields != nil || len(out.Annotations) != 1 || out.Annotations["wasp.dev/x"] != "kept" || out.Name != "web" {
		t.Errorf("slim(service) = %+v, want it without managedFields and last-applied only", out.ObjectMeta)
	}

	ready := true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "demo", Labels: map[string]string{discoveryv1.LabelServiceName: "web"},
			Annotations: map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "now"}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.244.1.10"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName: ptr("node-a"), Zone: ptr("zone-a"), Hostname: ptr("web-1"),
			TargetRef:          &v1.ObjectReference{Kind: "Pod", Name: "web-1"},
			DeprecatedTopology: map[string]string{"x": "y"},
			Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
		}},
	}
	want := slice.DeepCopy()
	want.Endpoints[0].TargetRef, want.Endpoints[0].Hostname, want.Endpoints[0].DeprecatedTopology = nil, nil, nil
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		want        map[string]string
	}{
		{"trigger time only", map[string]string{v1.EndpointsLastChangeTriggerTime: "now"}, map[string]string{v1.EndpointsLastChangeTriggerTime: "now"}},
		{"trigger time and more", map[string]string{v1.EndpointsLastChangeTriggerTime: "now", "example.com/x": "y"}, map[string]string{v1.EndpointsLastChangeTriggerTime: "now"}},
		{"no trigger time", map[string]string{"example.com/x": "y"}, nil},
	} {
		in := slice.DeepCopy()
		in.Annotations, want.Annotations = tt.annotations, tt.want
		got, err = slim(in)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: slim(slice) = %+v\nwant %+v", tt.name, got, want)
		}
	}

	// Endpoints on one node or in one zone share the name; the list is
	// exactly sized; the owner reference is gone.
	many := slice.DeepCopy()
	many.OwnerReferences = []metav1.OwnerReference{{Kind: "Service", Name: "web"}}
	many.GenerateName = "web-"
	many.Endpoints = make([]discoveryv1.Endpoint, 3, 8)
	for i, node := range []string{"node-a", "node-b", "node-a"} {
		many.Endpoints[i] = discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.1.%d", i)}, NodeName: ptr(node), Zone: ptr("zone-a")}
	}
	got, err = slim(many)
	if err != nil {
		t.Fatal(err)
	}
	eps := got.(*discoveryv1.EndpointSlice).Endpoints
	switch {
	case got.(*discoveryv1.EndpointSlice).OwnerReferences != nil || got.(*discoveryv1.EndpointSlice).GenerateName != "":
		t.Errorf("slim kept the owner reference or name prefix: %+v", got.(*discoveryv1.EndpointSlice).ObjectMeta)
	case len(eps) != 3 || cap(eps) != 3:
		t.Errorf("slim: %d endpoints, capacity %d; want 3 and 3", len(eps), cap(eps))
	case *eps[0].NodeName != "node-a" || *eps[1].NodeName != "node-b" || *eps[2].NodeName != "node-a":
		t.Errorf("slim changed the node names: %s %s %s", *eps[0].NodeName, *eps[1].NodeName, *eps[2].NodeName)
	case eps[0].NodeName != eps[2].NodeName || eps[0].Zone != eps[1].Zone || eps[1].Zone != eps[2].Zone:
		t.Errorf("slim: endpoints with the same node or zone do not share its name")
	}

	// Tombstones and other non-objects pass through.
	tomb := cache.DeletedFinalStateUnknown{Key: "demo/web", Obj: svc}
	if got, err := slim(tomb); err != nil || got != tomb {
		t.Errorf("slim(tombstone) = %v, %v", got, err)
	}
}

// loadModule builds the test module in dir and loads it under name into a
// runtime that lives as long as the test.
func loadModule(t *testing.T, dir, name string) *waspruntime.Module {
	t.Helper()
	wasm, err := modbuild.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := waspruntime.New(waspruntime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	m, err := rt.Load(context.Background(), name, wasm, waspruntime.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSetModules hot-swaps the endpoint-selection module of a running
// proxy: the next sync re-evaluates every port with it, and a swap
// replaced before it was applied is reported as such.
func TestSetModules(t *testing.T) {
	double := loadModule(t, "testdata/modules/double", "double")

	client := fake.NewClientset(node(), service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"))
	p, be := start(t, client)
	waitFor(t, "the first sync", func() bool { return be.Dump() == webDump })

	var (
		mods     [len(abi.Stages) + 1]pipeline.Module
		policies [len(abi.Stages) + 1]pipeline.FailurePolicy
	)
	mods[abi.StageEndpointSelection] = double
	applied := make(chan bool, 2)
	p.SetModules(mods, policies, func(ok bool) { applied <- ok })
	waitFor(t, "the new module's weights", func() bool { return strings.Contains(be.Dump(), "10.244.1.10:8080 weight 2") })
	if ok := <-applied; !ok {
		t.Fatal("the swap was reported not applied")
	}

	// Back to the native semantics; a swap replaced before any sync ran
	// is reported unapplied.
	p.SetModules(mods, policies, func(ok bool) { applied <- ok })
	p.SetModules([len(abi.Stages) + 1]pipeline.Module{}, policies, func(ok bool) { applied <- ok })
	waitFor(t, "the default weights again", func() bool { return be.Dump() == webDump })
	got := []bool{<-applied, <-applied}
	if !reflect.DeepEqual(got, []bool{false, true}) && !reflect.DeepEqual(got, []bool{true, true}) {
		// The first may have been applied if a sync ran in between.
		t.Errorf("done calls %v; want the replaced swap unapplied (or applied, if a sync came between) and the last applied", got)
	}
}

// fallbacks is a pipeline.Observer that keeps the count of ports on a
// fallback.
type fallbacks struct{ n atomic.Int64 }

func (*fallbacks) Call(string, abi.Stage, int, time.Duration, error)            {}
func (*fallbacks) PortFailed(string, abi.Stage, string, pipeline.Source, error) {}
func (f *fallbacks) Fallbacks(n *pipeline.Fallbacks) {
	total := 0
	for _, byStage := range n {
		for _, c := range byStage {
			total += c
		}
	}
	f.n.Store(int64(total))
}

// TestNotIsolatedReevaluated: when a failing module's ports are not
// isolated within the pipeline's budget (here: no budget at all), their
// Services are evaluated again after RetryPeriod without any change, and
// the good ports among them get their module's decision; only the failing
// one stays on a fallback.
func TestNotIsolatedReevaluated(t *testing.T) {
	m := loadModule(t, "../runtime/testdata/modules/misbehave", "misbehave")
	obs := &fallbacks{}
	var po pipeline.Options
	po.Modules[abi.StageEndpointSelection] = m
	po.BisectBudget = time.Nanosecond
	po.Observer = obs

	bad := service("bad", "10.96.0.12", nil)
	bad.Annotations = map[string]string{"wasp.test/behaviour": "trap"}
	client := fake.NewClientset(node(),
		service("web", "10.96.0.10", nil), slice("web", "10.244.1.10"),
		service("api", "10.96.0.11", nil), slice("api", "10.244.1.11"),
		bad, slice("bad", "10.244.1.12"))
	be := backendfake.New()
	p := startWith(t, Opts{Client: client, Backends: map[backends.Family]backends.Backend{backends.IPv4: be}, Pipeline: pipeline.New(po)})
	waitFor(t, "the first sync", func() bool { return p.Stats().Syncs >= 1 })
	waitFor(t, "the good ports off the fallback", func() bool { return obs.n.Load() == 1 })
	if s := p.Stats(); s.PartialSyncs == 0 {
		t.Errorf("Stats() = %+v; want a partial sync that evaluated the ports again", s)
	}
}
