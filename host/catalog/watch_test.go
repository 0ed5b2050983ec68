package catalog

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/wasp-proxy/wasp/abi"
)

func unstructuredModule(name, stage, source string, priority int64, selector map[string]any) *unstructured.Unstructured {
	spec := map[string]any{"stage": stage, "source": source, "priority": priority}
	if selector != nil {
		spec["nodeSelector"] = map[string]any{"matchLabels": selector}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/" + Version, "kind": Kind,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

// TestWatcher follows objects and the Node's labels: the choice is
// reported at start and on every change of it, and an invalid object is
// reported and ignored.
func TestWatcher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{}}}
	client := fake.NewClientset(node)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GVR: Kind + "List"},
		unstructuredModule("default", "endpoint-selection", "file:///default.wasm", 0, nil))

	changes := make(chan map[abi.Stage]Choice, 10)
	invalid := make(chan string, 10)
	w := NewWatcher(WatcherOpts{Dynamic: dyn, Client: client, NodeName: "node-a",
		OnChange:  func(c map[abi.Stage]Choice) { changes <- c },
		OnInvalid: func(name string, _ error) { invalid <- name },
	})
	go func() { _ = w.Run(ctx) }()
	want := func(what, object string) {
		t.Helper()
		select {
		case c := <-changes:
			if c[abi.StageEndpointSelection].Object != object {
				t.Fatalf("%s: choice %v, want endpoint-selection from %q", what, c, object)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported", what)
		}
	}
	want("at start", "default")

	objs := dyn.Resource(GVR)
	if _, err := objs.Create(ctx, unstructuredModule("canary", "endpoint-selection", "file:///canary.wasm", 10, map[string]any{"wasp.dev/canary": "true"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Labels["wasp.dev/canary"] = "true"
	if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("node labelled for the canary", "canary")

	if _, err := objs.Create(ctx, unstructuredModule("broken", "routing", "file:///x.wasm", 100, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-invalid:
		if name != "broken" {
			t.Fatalf("invalid object %q reported, want broken", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the invalid object was not reported")
	}
	if err := objs.Delete(ctx, "canary", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("canary deleted", "default")
}
