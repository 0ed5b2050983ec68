package proxy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/pipeline"
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
	p, err := New(Opts{
		NodeName:      testNode,
		Client:        client,
		Pipeline:      pipeline.New(pipeline.Options{}),
		Backends:      map[backends.Family]backends.Backend{backends.IPv4: be},
		MinSyncPeriod: 10 * time.Millisecond,
		RetryPeriod:   10 * time.Millisecond,
	})
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
	return p, be
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
	p, err := New(Opts{
		NodeName:      testNode,
		Client:        client,
		Pipeline:      pipeline.New(pipeline.Options{}),
		Backends:      map[backends.Family]backends.Backend{backends.IPv4: be},
		MinSyncPeriod: 10 * time.Millisecond,
		RetryPeriod:   10 * time.Millisecond,
	})
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
	defer func() {
		cancel()
		<-done
	}()

	// The first sync fails; a retry (or a late event of the initial list)
	// lands the state.
	waitFor(t, "the retried first sync", func() bool { return be.Dump() == webDump })

	// One event, whose sync fails: only the retry can land it.
	be.FailNextSync(errors.New("injected failure"))
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, slice("web", "10.244.1.10", "10.244.2.10"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried sync", func() bool { return strings.Contains(be.Dump(), "10.244.2.10:8080") })
	if c := be.Counts(); c.FailedSyncs != 2 || c.Syncs < 4 {
		t.Errorf("backend counts %+v; want 2 failed syncs and at least 4 syncs", c)
	}
	if s := p.Stats(); s.SyncFailures != 2 {
		t.Errorf("Stats().SyncFailures = %d; want 2", s.SyncFailures)
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
				MinSyncPeriod: -1,
			},
			want: []string{"backends[4]: nil backend", "backends[5]: unknown IP family", "minSyncPeriod"},
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
