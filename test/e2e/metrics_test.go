//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fw "github.com/wasp-proxy/wasp/test/framework"
)

// metricsAddr is wasp's default --metrics-bind-address, on the loopback of
// the proxy node's namespace.
const metricsAddr = "127.0.0.1:10249"

// scrape GETs wasp's /metrics from inside the proxy node and parses it.
func scrape(s *suite) (map[string]*dto.MetricFamily, error) {
	c := &http.Client{Timeout: ask, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return s.nodeA().NS.Dial(ctx, network, addr)
		},
	}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("/metrics: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// sample returns the value of the series name whose labels include
// labels ("k=v" each): a counter's or gauge's value, a histogram's sample
// count; summed over every matching series.
func sample(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, found
}

// testMetrics scrapes /metrics, changes a Service, and checks that the
// series operators chart move with it: upstream's sync, change and
// network programming series and wasp's module series.
func testMetrics(t *testing.T, s *suite) {
	// The mode's own failure series, upstream's names.
	failures := "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"
	if s.env.Dataplane().IPTables() {
		failures = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"
	}
	var before map[string]*dto.MetricFamily
	fw.Eventually(t, converge, func() (err error) {
		before, err = scrape(s)
		return err
	})
	for _, name := range []string{"wasp_module_info", "process_resident_memory_bytes", failures} {
		if _, ok := before[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	// The stages run their builtin modules natively: they are reported,
	// and make no module calls.
	if v, ok := sample(before, "wasp_module_info", "stage=endpoint-selection", "module=builtin:selection"); !ok || v != 1 {
		t.Errorf("wasp_module_info{stage=endpoint-selection,module=builtin:selection} = %v (present %v), want 1", v, ok)
	}
	// The start's load of the chain is counted.
	if v, ok := sample(before, "wasp_module_loads_total", "stage=endpoint-selection", "result=ok"); !ok || v < 1 {
		t.Errorf("wasp_module_loads_total{stage=endpoint-selection,result=ok} = %v (present %v), want at least 1", v, ok)
	}

	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "metered", Namespace: ns})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1")...)
	// The endpointslice controller's trigger time: network programming
	// duration is measured from it.
	slices := s.env.Client.DiscoveryV1().EndpointSlices(ns)
	es, err := slices.Get(s.ctx, "metered-v4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if es.Annotations == nil {
		es.Annotations = map[string]string{}
	}
	es.Annotations[v1.EndpointsLastChangeTriggerTime] = time.Now().UTC().Format(time.RFC3339Nano)
	es.Endpoints = append(es.Endpoints, es.Endpoints[0])
	es.Endpoints[1].Addresses = []string{s.env.Cluster.Pod("a-2").IPv4.String()}
	if _, err := slices.Update(s.ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1", "a-2")

	moved := []struct {
		name   string
		labels []string
	}{
		{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", []string{"ip_family=IPv4"}},
		{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", []string{"ip_family=IPv4"}},
		{"kubeproxy_sync_proxy_rules_duration_seconds", []string{"ip_family=IPv4"}},
		{"kubeproxy_sync_partial_proxy_rules_duration_seconds", []string{"ip_family=IPv4"}},
		{"kubeproxy_sync_proxy_rules_service_changes_total", nil},
		{"kubeproxy_sync_proxy_rules_endpoint_changes_total", nil},
		{"kubeproxy_network_programming_duration_seconds", []string{"ip_family=IPv4"}},
	}
	fw.Eventually(t, converge, func() error {
		after, err := scrape(s)
		if err != nil {
			return err
		}
		var still []string
		for _, m := range moved {
			b, _ := sample(before, m.name, m.labels...)
			a, ok := sample(after, m.name, m.labels...)
			if !ok || a <= b {
				still = append(still, fmt.Sprintf("%s%v %v -> %v", m.name, m.labels, b, a))
			}
		}
		if v, _ := sample(after, failures, "ip_family=IPv4"); v != 0 {
			still = append(still, fmt.Sprintf("%s %v, want 0", failures, v))
		}
		if s.env.Dataplane().IPTables() {
			if v, _ := sample(after, "kubeproxy_sync_proxy_rules_iptables_total", "ip_family=IPv4", "table=nat"); v == 0 {
				still = append(still, "kubeproxy_sync_proxy_rules_iptables_total{table=nat} is 0")
			}
		}
		if len(still) > 0 {
			return fmt.Errorf("series that did not move with the change: %s", strings.Join(still, "; "))
		}
		return nil
	})
}
