package objects_test

import (
	"os"
	"reflect"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/objects"
)

// samplePath is the bundled sample cluster, the default input of
// `wasp explain`.
const samplePath = "../../examples/cluster/sample.yaml"

func TestSampleCluster(t *testing.T) {
	f, err := os.Open(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o, err := objects.Decode(f, "sample.yaml")
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if len(o.Nodes) != 3 || len(o.Services) != 7 || len(o.EndpointSlices) != 8 {
		t.Fatalf("got %d nodes, %d services, %d slices; want 3, 7, 8", len(o.Nodes), len(o.Services), len(o.EndpointSlices))
	}
	node, err := o.Node("node-a")
	if err != nil {
		t.Fatal(err)
	}
	m := model.Build(model.Input{NodeName: "node-a", Node: node, Services: o.Services, EndpointSlices: o.EndpointSlices})

	if zone, _ := m.Node.Label(abi.LabelTopologyZone); zone != "zone-a" {
		t.Errorf("node-a zone = %q, want zone-a", zone)
	}

	var keys []string
	byKey := map[string]*model.ServicePort{}
	for i := range m.Ports {
		keys = append(keys, m.Ports[i].String())
		byKey[m.Ports[i].String()] = &m.Ports[i]
	}
	wantKeys := []string{ // db is headless: absent
		"demo/api:grpc/TCP/IPv4",
		"demo/draining:http/TCP/IPv4",
		"demo/dual:http/TCP/IPv4",
		"demo/dual:http/TCP/IPv6",
		"demo/frontend:http/TCP/IPv4",
		"demo/metrics:metrics/TCP/IPv4",
		"demo/web:http/TCP/IPv4",
	}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("ports:\n got %q\nwant %q", keys, wantKeys)
	}

	tests := []struct {
		key           string
		endpoints     int
		local         int
		check         func(*model.ServicePort) bool
		checkDescribe string
	}{
		{key: "demo/web:http/TCP/IPv4", endpoints: 3, local: 1},
		{key: "demo/frontend:http/TCP/IPv4", endpoints: 2, local: 1,
			check: func(sp *model.ServicePort) bool {
				return sp.ExternalPolicyLocal && sp.ExternallyAccessible && sp.NodePort == 30080
			},
			checkDescribe: "eTP=Local NodePort 30080"},
		{key: "demo/metrics:metrics/TCP/IPv4", endpoints: 2, local: 0,
			check:         func(sp *model.ServicePort) bool { return sp.InternalPolicyLocal },
			checkDescribe: "iTP=Local"},
		{key: "demo/api:grpc/TCP/IPv4", endpoints: 4, local: 2,
			check: func(sp *model.ServicePort) bool {
				for _, e := range sp.Endpoints {
					if len(e.ZoneHints) != 1 || e.ZoneHints[0] != e.Zone {
						return false
					}
				}
				return true
			},
			checkDescribe: "every endpoint hinted for its zone"},
		{key: "demo/draining:http/TCP/IPv4", endpoints: 3, local: 1,
			check: func(sp *model.ServicePort) bool {
				for _, e := range sp.Endpoints {
					if e.Ready || !e.Terminating {
						return false
					}
				}
				return true
			},
			checkDescribe: "all endpoints terminating"},
		{key: "demo/dual:http/TCP/IPv6", endpoints: 2, local: 1,
			check:         func(sp *model.ServicePort) bool { return sp.IPv6 && sp.ClusterIP.String() == "fd00:10:96::70" },
			checkDescribe: "IPv6 ClusterIP"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			sp := byKey[tt.key]
			local := 0
			for _, e := range sp.Endpoints {
				if e.Local {
					local++
				}
			}
			if len(sp.Endpoints) != tt.endpoints || local != tt.local {
				t.Errorf("%d endpoints, %d local; want %d, %d", len(sp.Endpoints), local, tt.endpoints, tt.local)
			}
			if tt.check != nil && !tt.check(sp) {
				t.Errorf("want %s: %+v", tt.checkDescribe, sp)
			}
		})
	}
}
