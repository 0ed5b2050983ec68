package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/proxy"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/modules"
)

// family returns the gathered family called name, failing the test if
// there is none.
func family(t *testing.T, g prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("no metric family %s", name)
	return nil
}

// series returns the metric of family name whose labels are labels
// ("k=v" pairs, every label of the series), or nil.
func series(t *testing.T, g prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	t.Helper()
	for _, m := range family(t, g, name).GetMetric() {
		var got []string
		for _, l := range m.GetLabel() {
			got = append(got, l.GetName()+"="+l.GetValue())
		}
		if slices.Equal(got, labels) {
			return m
		}
	}
	return nil
}

// value returns the value of a counter or gauge series, failing the test
// if it does not exist.
func value(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m := series(t, g, name, labels...)
	switch {
	case m == nil:
		t.Fatalf("no series %s%v", name, labels)
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s%v is no counter or gauge", name, labels)
	return 0
}

// observations returns the sample count of a histogram series, 0 if it
// does not exist.
func observations(t *testing.T, g prometheus.Gatherer, name string, labels ...string) uint64 {
	t.Helper()
	m := series(t, g, name, labels...)
	if m == nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

// want is the expected value, or number of observations, of a series.
type want struct {
	name   string
	labels []string // "k=v", every label of the series
	want   float64
}

// checkValues checks counter and gauge series.
func checkValues(t *testing.T, g prometheus.Gatherer, wants []want) {
	t.Helper()
	for _, w := range wants {
		if got := value(t, g, w.name, w.labels...); got != w.want {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.want)
		}
	}
}

// checkObservations checks the sample counts of histogram series.
func checkObservations(t *testing.T, g prometheus.Gatherer, wants []want) {
	t.Helper()
	for _, w := range wants {
		if got := observations(t, g, w.name, w.labels...); float64(got) != w.want {
			t.Errorf("%s%v: %d observations, want %v", w.name, w.labels, got, w.want)
		}
	}
}

// TestUpstreamSeries: every kubeproxy_ series wasp exports has upstream's
// type, labels and buckets, and is exported from the start.
func TestUpstreamSeries(t *testing.T) {
	m := New(backends.IPv4, backends.IPv6)
	syncB := []float64{0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384}
	var npdB []float64
	npdB = append(npdB, 0.25, 0.5)
	for s := 1; s <= 59; s++ {
		npdB = append(npdB, float64(s))
	}
	for s := 60; s <= 115; s += 5 {
		npdB = append(npdB, float64(s))
	}
	for s := 120; s <= 300; s += 30 {
		npdB = append(npdB, float64(s))
	}
	fam := []string{"ip_family"}
	tests := []struct {
		name    string
		typ     dto.MetricType
		labels  []string
		buckets []float64
	}{
		{"kubeproxy_sync_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, fam, syncB},
		{"kubeproxy_sync_full_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, fam, syncB},
		{"kubeproxy_sync_partial_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, fam, syncB},
		{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", dto.MetricType_GAUGE, fam, nil},
		{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", dto.MetricType_GAUGE, fam, nil},
		{"kubeproxy_network_programming_duration_seconds", dto.MetricType_HISTOGRAM, fam, npdB},
		{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", dto.MetricType_GAUGE, nil, nil},
		{"kubeproxy_sync_proxy_rules_endpoint_changes_total", dto.MetricType_COUNTER, nil, nil},
		{"kubeproxy_sync_proxy_rules_service_changes_pending", dto.MetricType_GAUGE, nil, nil},
		{"kubeproxy_sync_proxy_rules_service_changes_total", dto.MetricType_COUNTER, nil, nil},
		{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", dto.MetricType_GAUGE, []string{"ip_family", "traffic_policy"}, nil},
		{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", dto.MetricType_COUNTER, fam, nil},
		{"kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", dto.MetricType_COUNTER, fam, nil},
		{"kubeproxy_conntrack_reconciler_sync_duration_seconds", dto.MetricType_HISTOGRAM, fam, syncB},
		{"kubeproxy_conntrack_reconciler_deleted_entries_total", dto.MetricType_COUNTER, fam, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mf := family(t, m.Registry(), tt.name)
			if mf.GetType() != tt.typ {
				t.Errorf("type %s, want %s", mf.GetType(), tt.typ)
			}
			wantSeries := 1
			if len(tt.labels) > 0 {
				wantSeries = 2 // IPv4 and IPv6
			}
			if len(tt.labels) > 1 {
				wantSeries = 4 // and internal, external
			}
			if n := len(mf.GetMetric()); n != wantSeries {
				t.Errorf("%d series at start, want %d", n, wantSeries)
			}
			for _, s := range mf.GetMetric() {
				var names []string
				for _, l := range s.GetLabel() {
					names = append(names, l.GetName())
				}
				if !slices.Equal(names, tt.labels) {
					t.Errorf("labels %v, want %v", names, tt.labels)
				}
				if tt.buckets == nil {
					continue
				}
				var got []float64
				for _, b := range s.GetHistogram().GetBucket() {
					got = append(got, b.GetUpperBound())
				}
				if !slices.EqualFunc(got, tt.buckets, func(a, b float64) bool { return fmt.Sprintf("%.6g", a) == fmt.Sprintf("%.6g", b) }) {
					t.Errorf("buckets %v\nwant %v", got, tt.buckets)
				}
			}
		})
	}
	// Counted per request, with the code as label: no series before one.
	for _, name := range []string{"kubeproxy_proxy_healthz_total", "kubeproxy_proxy_livez_total"} {
		if n, err := testutil.GatherAndCount(m.Registry(), name); err != nil || n != 0 {
			t.Errorf("%s: %d series at start (%v), want 0", name, n, err)
		}
	}
}

// loadChain loads the default chain, and returns it with each stage's
// module bytes.
func loadChain(t *testing.T) (*chain.Chain, map[abi.Stage][]byte) {
	t.Helper()
	ctx := context.Background()
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	c, err := chain.Load(ctx, rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	wasm := map[abi.Stage][]byte{}
	for _, b := range modules.Builtins {
		if wasm[b.Stage], err = modules.Wasm(b.Name); err != nil {
			t.Fatal(err)
		}
	}
	return c, wasm
}

// TestLint: every series of the registry, in each mode, passes promlint,
// but for the upstream names promlint dislikes.
func TestLint(t *testing.T) {
	// Upstream's names for gauges; kept for their dashboards.
	gauges := []string{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", "kubeproxy_sync_proxy_rules_iptables_total"}
	for _, mode := range []Mode{NFTables, IPTables} {
		t.Run(string(mode), func(t *testing.T) {
			m, err := NewWith(Options{Mode: mode, Families: []backends.Family{backends.IPv4, backends.IPv6}})
			if err != nil {
				t.Fatal(err)
			}
			c, _ := loadChain(t)
			m.SetChain(c)
			// Give the vectors without series at start one each.
			m.Health().Healthz(200)
			m.Health().Livez(200)
			problems, err := testutil.GatherAndLint(m.Registry())
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				if slices.Contains(gauges, p.Metric) && strings.Contains(p.Text, "_total") {
					continue
				}
				t.Errorf("%s: %s", p.Metric, p.Text)
			}
		})
	}
}

// TestProxyHook drives the proxy hook and reads the series back.
func TestProxyHook(t *testing.T) {
	m := New(backends.IPv4, backends.IPv6)
	h, reg := m.Proxy(), m.Registry()
	v4, v6 := "ip_family=IPv4", "ip_family=IPv6"

	for range 3 {
		h.ServiceEvent()
	}
	h.EndpointSliceEvent()
	h.PendingChanges(2, 1)
	before := time.Now()
	h.QueuedUpdate(backends.IPv4)
	checkValues(t, reg, []want{
		{"kubeproxy_sync_proxy_rules_service_changes_total", nil, 3},
		{"kubeproxy_sync_proxy_rules_endpoint_changes_total", nil, 1},
		{"kubeproxy_sync_proxy_rules_service_changes_pending", nil, 2},
		{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", nil, 1},
	})
	if q := value(t, reg, "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", v4); q < float64(before.Unix()) {
		t.Errorf("last queued timestamp %v, before the update was queued (%v)", q, before.Unix())
	}
	if q := value(t, reg, "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", v6); q != 0 {
		t.Errorf("IPv6 last queued timestamp %v; nothing was queued for it", q)
	}

	// A full sync: IPv4 programmed, IPv6 failed.
	if got := value(t, reg, "kubeproxy_sync_proxy_rules_last_timestamp_seconds", v4); got != 0 {
		t.Fatalf("last sync timestamp %v before any sync", got)
	}
	h.PendingChanges(0, 0)
	before = time.Now()
	h.Synced(&proxy.SyncReport{Full: true, Duration: 1500 * time.Millisecond, Evaluated: 7, Families: []proxy.FamilySync{
		{Family: backends.IPv4, ServicePorts: 7, NoLocalInternal: 2, NoLocalExternal: 1,
			NetworkProgramming: []time.Duration{300 * time.Millisecond, 2 * time.Second}},
		{Family: backends.IPv6, ServicePorts: 3, Err: errors.New("nft says no")},
	}})
	after := time.Now()
	if got := value(t, reg, "kubeproxy_sync_proxy_rules_last_timestamp_seconds", v4); got < float64(before.Unix()) || got > float64(after.Unix()+1) {
		t.Errorf("IPv4 last sync timestamp %v, want the time of the sync (%v)", got, before.Unix())
	}
	checkValues(t, reg, []want{
		{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", []string{v6}, 0},
		{"kubeproxy_sync_proxy_rules_service_changes_pending", nil, 0},
		{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", []string{v4, "traffic_policy=internal"}, 2},
		{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", []string{v4, "traffic_policy=external"}, 1},
		{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", []string{v4}, 0},
		{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", []string{v6}, 1},
		{"wasp_service_ports", []string{v4}, 7},
		{"wasp_service_ports", []string{v6}, 3},
		{"wasp_sync_evaluated_service_ports", nil, 7},
		{"wasp_syncs_total", []string{"result=failure", "type=full"}, 1},
		{"wasp_syncs_total", []string{"result=success", "type=full"}, 0},
	})
	checkObservations(t, reg, []want{
		{"kubeproxy_sync_proxy_rules_duration_seconds", []string{v4}, 1},
		{"kubeproxy_sync_proxy_rules_duration_seconds", []string{v6}, 1},
		{"kubeproxy_sync_full_proxy_rules_duration_seconds", []string{v4}, 1},
		{"kubeproxy_sync_partial_proxy_rules_duration_seconds", []string{v4}, 0},
		{"kubeproxy_network_programming_duration_seconds", []string{v4}, 2},
		{"kubeproxy_network_programming_duration_seconds", []string{v6}, 0},
	})

	// A partial sync that programmed both, IPv6 with a housekeeping
	// failure; then one that failed listing, before any backend.
	h.Synced(&proxy.SyncReport{Duration: time.Millisecond, Families: []proxy.FamilySync{
		{Family: backends.IPv4},
		{Family: backends.IPv6, Err: fmt.Errorf("conntrack: %w", backends.ErrHousekeeping)},
	}})
	h.Synced(&proxy.SyncReport{Duration: time.Millisecond, Err: errors.New("list services: gone")})
	if got := value(t, reg, "kubeproxy_sync_proxy_rules_last_timestamp_seconds", v6); got < float64(before.Unix()) {
		t.Errorf("IPv6 last sync timestamp %v after a sync that programmed it", got)
	}
	checkValues(t, reg, []want{
		{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", []string{v6}, 1},
		{"wasp_sync_housekeeping_failures_total", []string{v6}, 1},
		{"wasp_syncs_total", []string{"result=success", "type=partial"}, 1},
		{"wasp_syncs_total", []string{"result=failure", "type=partial"}, 1},
	})
	if got := observations(t, reg, "kubeproxy_sync_partial_proxy_rules_duration_seconds", v6); got != 2 {
		t.Errorf("IPv6 partial syncs observed: %d, want 2 (the failed listing counts for every family)", got)
	}
}

// TestDriftHook: drift checks are counted by result, and a drifted one by
// the kinds and numbers of objects it found.
func TestDriftHook(t *testing.T) {
	m := New(backends.IPv4, backends.IPv6)
	h, reg := m.Proxy(), m.Registry()
	v4, v6 := "ip_family=IPv4", "ip_family=IPv6"
	h.DriftChecked(&proxy.DriftReport{Family: backends.IPv4, Duration: time.Millisecond})
	h.DriftChecked(&proxy.DriftReport{Family: backends.IPv4, Duration: 20 * time.Millisecond, Drift: &backends.Drift{
		Objects: map[string]int{backends.DriftElement: 3, backends.DriftRule: 2}}})
	h.DriftChecked(&proxy.DriftReport{Family: backends.IPv6, Err: errors.New("netlink: no")})
	checkValues(t, reg, []want{
		{"wasp_dataplane_drift_checks_total", []string{v4, "result=clean"}, 1},
		{"wasp_dataplane_drift_checks_total", []string{v4, "result=drifted"}, 1},
		{"wasp_dataplane_drift_checks_total", []string{v6, "result=failed"}, 1},
		{"wasp_dataplane_drift_checks_total", []string{v6, "result=drifted"}, 0},
		{"wasp_dataplane_drift_repairs_total", []string{v4, "object=element"}, 1},
		{"wasp_dataplane_drift_repairs_total", []string{v4, "object=rule"}, 1},
		{"wasp_dataplane_drift_repairs_total", []string{v4, "object=chain"}, 0},
		{"wasp_dataplane_drifted_objects_total", []string{v4, "object=element"}, 3},
		{"wasp_dataplane_drifted_objects_total", []string{v4, "object=rule"}, 2},
		{"wasp_dataplane_drifted_objects_total", []string{v6, "object=element"}, 0},
	})
	checkObservations(t, reg, []want{
		{"wasp_dataplane_drift_check_duration_seconds", []string{v4}, 2},
		{"wasp_dataplane_drift_check_duration_seconds", []string{v6}, 1},
	})
}

// TestPipelineHook drives the pipeline hook and reads the series back.
func TestPipelineHook(t *testing.T) {
	m := New()
	h, reg := m.Pipeline(), m.Registry()
	mod, stage := "file:///m.wasm", abi.StageEndpointSelection
	trap := &runtime.CallError{Module: mod, Stage: stage, Reason: runtime.ReasonTrap, Err: errors.New("unreachable")}
	declined := &runtime.CallError{Module: mod, Stage: stage, Reason: runtime.ReasonModuleError, Err: errors.New("module error: no")}

	h.Call(mod, stage, 100, 3*time.Millisecond, nil)
	h.Call(mod, stage, 100, 5*time.Millisecond, trap)
	h.Call(mod, stage, 50, 5*time.Millisecond, context.Canceled)
	h.PortFailed(mod, stage, "ns/a:http/TCP/IPv4", pipeline.SourceBuiltin, trap)
	h.PortFailed(mod, stage, "ns/b:http/TCP/IPv4", pipeline.SourceLastGood, declined)
	var n pipeline.Fallbacks
	n[stage][pipeline.SourceBuiltin], n[stage][pipeline.SourceLastGood] = 1, 4
	h.Fallbacks(&n)

	ms, st := "module="+mod, "stage=endpoint-selection"
	checkValues(t, reg, []want{
		{"wasp_module_calls_total", []string{ms, st}, 3},
		{"wasp_module_call_failures_total", []string{ms, "reason=trap", st}, 1},
		{"wasp_module_call_failures_total", []string{ms, "reason=other", st}, 1},
		{"wasp_module_service_port_failures_total", []string{ms, "reason=trap", st}, 1},
		{"wasp_module_service_port_failures_total", []string{ms, "reason=module-error", st}, 1},
		{"wasp_fallback_service_ports", []string{"source=builtin", st}, 1},
		{"wasp_fallback_service_ports", []string{"source=last-good", st}, 4},
		{"wasp_fallback_service_ports", []string{"source=builtin", "stage=topology"}, 0},
	})
	if got := observations(t, reg, "wasp_module_call_duration_seconds", ms, st); got != 3 {
		t.Errorf("call durations observed: %d, want 3", got)
	}
}

// TestSetChain: wasp_module_info names each stage's module with the sha256
// of its bytes, and the module's failure series exist at zero.
func TestSetChain(t *testing.T) {
	m := New()
	c, wasm := loadChain(t)
	m.SetChain(c)
	for _, stage := range abi.Stages {
		mod := c.Modules[stage]
		labels := []string{
			"digest=" + runtime.Digest(wasm[stage]), "module=" + c.Sources[stage],
			"name=" + mod.Metadata.Name, "stage=" + stage.String(), "version=" + mod.Metadata.Version,
		}
		if got := value(t, m.Registry(), "wasp_module_info", labels...); got != 1 {
			t.Errorf("wasp_module_info%v = %v, want 1", labels, got)
		}
		if got := value(t, m.Registry(), "wasp_module_call_failures_total", "module="+c.Sources[stage], "reason=timeout", "stage="+stage.String()); got != 0 {
			t.Errorf("%s: timeouts %v at start, want 0", stage, got)
		}
	}
	if n, _ := testutil.GatherAndCount(m.Registry(), "wasp_module_info"); n != len(abi.Stages) {
		t.Errorf("%d wasp_module_info series, want one per stage", n)
	}
	// A new chain replaces the info.
	m.SetChain(&chain.Chain{})
	if n, _ := testutil.GatherAndCount(m.Registry(), "wasp_module_info"); n != 0 {
		t.Errorf("%d wasp_module_info series after an empty chain, want 0", n)
	}

	// A chain whose stages run their builtin modules natively names them
	// as the Wasm chain did, and has no call series for them.
	m = New()
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	native, err := chain.Loader{Runtime: rt, NativeBuiltins: true}.Load(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m.SetChain(native)
	for _, stage := range abi.Stages {
		md := c.Modules[stage].Metadata
		labels := []string{
			"digest=" + runtime.Digest(wasm[stage]), "module=" + c.Sources[stage],
			"name=" + md.Name, "stage=" + stage.String(), "version=" + md.Version,
		}
		if got := value(t, m.Registry(), "wasp_module_info", labels...); got != 1 {
			t.Errorf("native: wasp_module_info%v = %v, want 1", labels, got)
		}
	}
	if n, _ := testutil.GatherAndCount(m.Registry(), "wasp_module_call_failures_total"); n != 0 {
		t.Errorf("native: %d call failure series, want none", n)
	}
}

// TestHealthAndConntrackHooks drives the health and conntrack hooks.
func TestHealthAndConntrackHooks(t *testing.T) {
	m := New(backends.IPv4)
	reg := m.Registry()
	m.Health().Healthz(200)
	m.Health().Healthz(503)
	m.Health().Healthz(200)
	m.Health().Livez(200)
	ct := m.Conntrack()
	ct.Reconciled(backends.IPv4, 2*time.Millisecond, 3, nil)
	ct.Reconciled(backends.IPv4, 2*time.Millisecond, 1, errors.New("netlink says no"))
	checkValues(t, reg, []want{
		{"kubeproxy_proxy_healthz_total", []string{"code=200"}, 2},
		{"kubeproxy_proxy_healthz_total", []string{"code=503"}, 1},
		{"kubeproxy_proxy_livez_total", []string{"code=200"}, 1},
		{"kubeproxy_conntrack_reconciler_deleted_entries_total", []string{"ip_family=IPv4"}, 4},
		{"wasp_conntrack_reconciler_failures_total", []string{"ip_family=IPv4"}, 1},
	})
	if got := observations(t, reg, "kubeproxy_conntrack_reconciler_sync_duration_seconds", "ip_family=IPv4"); got != 2 {
		t.Errorf("conntrack durations observed: %d, want 2", got)
	}
}

// TestServe: the server answers /metrics in the text format until its
// context ends.
func TestServe(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	m := New(backends.IPv4)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := func(network, addr string) (net.Listener, error) { return ln, nil }
	done := make(chan error, 1)
	go func() { done <- m.serve(ctx, listen, "test") }()

	resp, err := http.Get("http://" + ln.Addr().String() + Path)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 0`) {
		t.Errorf("GET %s: %s\n%s", Path, resp.Status, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after the context ended: %v", err)
	}

	// Serve returns when its context ends, also while it waits to retry.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	m.Serve(ctx, "256.0.0.1:1")
}
