package catalog

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
)

func object(name, stage, source string, priority int32, selector map[string]string) *ServiceProxyModule {
	o := &ServiceProxyModule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ServiceProxyModuleSpec{
		ModuleConfiguration: v1alpha1.ModuleConfiguration{Stage: stage, Source: source},
		Priority:            priority,
	}}
	if selector != nil {
		o.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	return o
}

func TestSelect(t *testing.T) {
	canary := map[string]string{"wasp.dev/canary": "true"}
	objs := []*ServiceProxyModule{
		object("b-default", "endpoint-selection", "file:///b.wasm", 0, nil),
		object("a-default", "endpoint-selection", "file:///a.wasm", 0, nil),
		object("canary", "endpoint-selection", "file:///canary.wasm", 10, canary),
		object("zones", "topology", "file:///zones.wasm", 0, map[string]string{"topology.kubernetes.io/zone": "z1"}),
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   map[abi.Stage]string // object per stage
	}{
		{"no labels: the tie goes to the first name", nil,
			map[abi.Stage]string{abi.StageEndpointSelection: "a-default"}},
		{"canary node: the higher priority", map[string]string{"wasp.dev/canary": "true"},
			map[abi.Stage]string{abi.StageEndpointSelection: "canary"}},
		{"zone z1: its topology module too", map[string]string{"topology.kubernetes.io/zone": "z1"},
			map[abi.Stage]string{abi.StageEndpointSelection: "a-default", abi.StageTopology: "zones"}},
		{"zone z2: not picked", map[string]string{"topology.kubernetes.io/zone": "z2"},
			map[abi.Stage]string{abi.StageEndpointSelection: "a-default"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Select(objs, tt.labels)
			if len(got) != len(tt.want) {
				t.Fatalf("Select = %v, want %v", got, tt.want)
			}
			for s, name := range tt.want {
				if got[s].Object != name {
					t.Errorf("stage %s: %q, want %q", s, got[s].Object, name)
				}
			}
		})
	}
	if Select(nil, nil) == nil || len(Select(nil, nil)) != 0 {
		t.Error("Select of no objects: want an empty choice")
	}
}

func TestEqual(t *testing.T) {
	a := Select([]*ServiceProxyModule{object("x", "topology", "file:///x.wasm", 0, nil)}, nil)
	b := Select([]*ServiceProxyModule{object("x", "topology", "file:///x.wasm", 5, nil)}, nil)
	c := Select([]*ServiceProxyModule{object("x", "topology", "file:///y.wasm", 0, nil)}, nil)
	if !Equal(a, b) || Equal(a, c) || Equal(a, nil) {
		t.Errorf("Equal: same module %v, other source %v, none %v; want true, false, false", Equal(a, b), Equal(a, c), Equal(a, nil))
	}
}

func TestFromUnstructured(t *testing.T) {
	mk := func(spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "wasp.dev/v1alpha1", "kind": Kind,
			"metadata": map[string]any{"name": "m"},
			"spec":     spec,
		}}
	}
	withStatus := mk(map[string]any{"stage": "endpoint-selection", "source": "file:///m.wasm", "priority": int64(3)})
	// The status the nodes write must not make the object invalid.
	withStatus.Object["status"] = map[string]any{"nodes": []any{map[string]any{
		"node": "node-a", "phase": PhaseActive, "digest": "sha256:ab", "observedGeneration": int64(1), "lastUpdateTime": "2026-11-25T12:00:00Z"}}}
	good, err := FromUnstructured(withStatus)
	if err != nil {
		t.Fatal(err)
	}
	if good.Spec.Priority != 3 || good.Spec.FailurePolicy != v1alpha1.KeepLastGood || good.Spec.Limits.Timeout == nil {
		t.Errorf("FromUnstructured = %+v; want priority 3 and the module defaults (KeepLastGood, a timeout)", good.Spec)
	}
	for _, tt := range []struct {
		name string
		spec map[string]any
		want []string // in the error
	}{
		{"unknown stage", map[string]any{"stage": "routing", "source": "file:///m.wasm"}, []string{`"m"`, "spec.stage"}},
		{"bad source", map[string]any{"stage": "topology", "source": "ftp://x"}, []string{"spec.source"}},
		{"bad failure policy", map[string]any{"stage": "topology", "source": "file:///m.wasm", "failurePolicy": "Retry"}, []string{"spec.failurePolicy"}},
		{"guardrails of a topology module", map[string]any{"stage": "topology", "source": "file:///m.wasm", "guardrails": map[string]any{"allowNotServing": true}},
			[]string{"spec.guardrails.allowNotServing", "only a traffic-policy module"}},
		{"unknown guardrail", map[string]any{"stage": "traffic-policy", "source": "file:///m.wasm", "guardrails": map[string]any{"allowAnything": true}}, []string{"allowAnything"}},
		{"bad selector", map[string]any{"stage": "topology", "source": "file:///m.wasm",
			"nodeSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "k", "operator": "Near"}}}}, []string{"spec.nodeSelector"}},
		{"unknown field", map[string]any{"stage": "topology", "source": "file:///m.wasm", "replicas": int64(2)}, []string{"replicas"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromUnstructured(mk(tt.spec))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
