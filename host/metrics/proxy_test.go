package metrics

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/proxy"
)

// eventually is a failure guard, not a timing assertion.
const eventually = 30 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll := func(context.Context) (bool, error) { return cond(), nil }
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, eventually, true, poll); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestProxyFeedsMetrics runs a Proxy over a fake cluster with the hooks
// wired as wasp run wires them, and reads the series as a change goes
// through: the changes are counted, then taken, the sync moves the last
// sync timestamp and the duration histograms, and an EndpointSlice change
// with a trigger time is observed as network programming duration.
func TestProxyFeedsMetrics(t *testing.T) {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}, IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
	}
	es := func(addrs ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080), Protocol: ptr(v1.ProtocolTCP)}},
		}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		return s
	}
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, svc, es("10.244.1.10"))
	m := New(backends.IPv4)
	reg := m.Registry()
	p, err := proxy.New(proxy.Opts{
		NodeName:      "node-a",
		Client:        client,
		Pipeline:      pipeline.New(pipeline.Options{Observer: m.Pipeline()}),
		Backends:      map[backends.Family]backends.Backend{backends.IPv4: backendfake.New()},
		MinSyncPeriod: 10 * time.Millisecond,
		RetryPeriod:   10 * time.Millisecond,
		Metrics:       m.Proxy(),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() { p.Run(ctx) })
	defer running.Wait()
	defer cancel()

	v4 := "ip_family=IPv4"
	lastSync := func() float64 { return value(t, reg, "kubeproxy_sync_proxy_rules_last_timestamp_seconds", v4) }
	waitFor(t, "the first sync", func() bool { return lastSync() > 0 })
	if got := value(t, reg, "kubeproxy_sync_proxy_rules_service_changes_total"); got != 1 {
		t.Errorf("service changes after the initial list: %v, want 1", got)
	}
	if got := value(t, reg, "kubeproxy_sync_proxy_rules_endpoint_changes_total"); got != 1 {
		t.Errorf("endpoint changes after the initial list: %v, want 1", got)
	}
	if got := value(t, reg, "wasp_syncs_total", "result=success", "type=full"); got != 1 {
		t.Errorf("full syncs: %v, want 1", got)
	}
	first := lastSync()

	// An endpoint change, stamped by the endpointslice controller.
	changed := es("10.244.1.10", "10.244.2.10")
	changed.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the partial sync", func() bool { return value(t, reg, "wasp_syncs_total", "result=success", "type=partial") == 1 })
	if got := lastSync(); got <= first {
		t.Errorf("last sync timestamp %v did not move from %v", got, first)
	}
	if got := value(t, reg, "kubeproxy_sync_proxy_rules_endpoint_changes_total"); got != 2 {
		t.Errorf("endpoint changes: %v, want 2", got)
	}
	if got := value(t, reg, "kubeproxy_sync_proxy_rules_endpoint_changes_pending"); got != 0 {
		t.Errorf("endpoint changes pending after the sync: %v, want 0", got)
	}
	for _, name := range []string{"kubeproxy_network_programming_duration_seconds", "kubeproxy_sync_partial_proxy_rules_duration_seconds"} {
		if got := observations(t, reg, name, v4); got != 1 {
			t.Errorf("%s: %d observations, want 1", name, got)
		}
	}
	if got := observations(t, reg, "kubeproxy_sync_proxy_rules_duration_seconds", v4); got != 2 {
		t.Errorf("sync durations: %d observations, want 2", got)
	}
}
