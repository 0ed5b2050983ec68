package catalog

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestFromUnstructuredConfig: spec.config, an object in the apiserver,
// reaches the module as its JSON.
func TestFromUnstructuredConfig(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "wasp.dev/v1alpha1", "kind": "ServiceProxyModule",
		"metadata": map[string]any{"name": "zone-drain", "generation": int64(2)},
		"spec": map[string]any{
			"stage": "endpoint-selection", "source": "file:///zone-drain.wasm",
			"config": map[string]any{"drainedZones": []any{"zone-b"}},
		},
	}}
	m, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(m.Spec.Config), `{"drainedZones":["zone-b"]}`; got != want {
		t.Errorf("spec.config as %s, want %s", got, want)
	}
	a := Select([]*ServiceProxyModule{m}, nil)
	m2, _ := FromUnstructured(u)
	m2.Spec.Config = []byte(`{"drainedZones":[]}`)
	if Equal(a, Select([]*ServiceProxyModule{m2}, nil)) {
		t.Errorf("choices that differ only in spec.config are Equal: a change of configuration would not reload")
	}
}
