package demo

import (
	"bytes"
	"context"
	"reflect"
	"testing"

	"github.com/wasp-proxy/wasp/host/explain"
	"github.com/wasp-proxy/wasp/host/objects"
	"github.com/wasp-proxy/wasp/host/pipeline"
)

// TestCluster: the bundled cluster decodes, and node-a, where the demo
// runs the proxy, sees what the demo's report promises: web's ports and
// web-np reach all three pods, web-local's external traffic only node-a's.
func TestCluster(t *testing.T) {
	objs, err := objects.Decode(bytes.NewReader(Cluster), "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := explain.Explain(context.Background(), objs, "node-a", pipeline.New(pipeline.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"10.244.1.11:8080", "10.244.1.12:8080", "10.244.2.11:8080"}
	local := all[:2]
	type sets struct{ cluster, local []string }
	want := map[string]sets{
		"demo/web:http/TCP":       {all, nil},
		"demo/web:echo-udp/UDP":   {all, nil},
		"demo/web-np:http/TCP":    {all, nil},
		"demo/web-local:http/TCP": {all, local},
	}
	got := map[string]sets{}
	for _, d := range docs {
		got[d.Service+":"+d.Port+"/"+d.Protocol] = sets{d.ClusterEndpoints, d.LocalEndpoints}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("node-a's endpoint sets:\n got  %v\n want %v", got, want)
	}
}
