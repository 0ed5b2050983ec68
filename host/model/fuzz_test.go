package model

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/wasp-proxy/wasp/abi"
)

// FuzzBuild: whatever Service and EndpointSlice the apiserver serves (any
// JSON that decodes into them), Build does not panic, gives the same model
// twice, keeps its ports sorted and of their own family, and the ports
// encode into a batch the modules can decode.
func FuzzBuild(f *testing.F) {
	in := corpus()
	for i := range 4 {
		svc, err := json.Marshal(in.Services[i])
		if err != nil {
			f.Fatal(err)
		}
		es, err := json.Marshal(in.EndpointSlices[i])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(svc, es)
	}
	f.Add([]byte(`{"metadata":{"namespace":"a","name":"b"},"spec":{"type":"NodePort","clusterIP":"10.0.0.1","ports":[{"port":0,"nodePort":70000,"protocol":"SCTP"}],"sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":-1}}}}`),
		[]byte(`{"metadata":{"namespace":"a","name":"c","labels":{"kubernetes.io/service-name":"b"}},"addressType":"FQDN","endpoints":[{"addresses":["x"]}],"ports":[{"port":-1}]}`))
	f.Add([]byte(`{"metadata":{"namespace":"a","name":"b"},"spec":{"clusterIPs":["fd00::1","10.0.0.1","1.2.3.04"],"externalIPs":["::ffff:1.2.3.4"],"loadBalancerSourceRanges":["1.2.3.4/33"],"ports":[{"port":80}]}}`),
		[]byte(`{"metadata":{"namespace":"a","name":"c","labels":{"kubernetes.io/service-name":"b"}},"addressType":"IPv6","endpoints":[{"addresses":["fd00::1","10.0.0.1"],"nodeName":"node-a","conditions":{}}],"ports":[{}]}`))
	f.Fuzz(func(t *testing.T, svcJSON, sliceJSON []byte) {
		var svc v1.Service
		var es discoveryv1.EndpointSlice
		if json.Unmarshal(svcJSON, &svc) != nil || json.Unmarshal(sliceJSON, &es) != nil {
			return
		}
		in := Input{NodeName: testNode, Services: []*v1.Service{&svc}, EndpointSlices: []*discoveryv1.EndpointSlice{&es}}
		m := Build(in)
		if again := Build(in); !reflect.DeepEqual(m, again) {
			t.Fatal("two builds of the same objects differ")
		}
		if !slices.IsSortedFunc(m.Ports, func(a, b ServicePort) int { return a.Key().Compare(b.Key()) }) {
			t.Fatalf("ports not sorted: %v", keys(m))
		}
		ports := make([]abi.ServicePort, len(m.Ports))
		for i := range m.Ports {
			sp := &m.Ports[i]
			if sp.ClusterIP.IsValid() && familyOf(sp.ClusterIP) != sp.Family {
				t.Fatalf("%s: ClusterIP %s of the other family", sp, sp.ClusterIP)
			}
			for _, ep := range sp.Endpoints {
				if familyOf(ep.Addr) != sp.Family {
					t.Fatalf("%s: endpoint %s of the other family", sp, ep.Addr)
				}
			}
			ports[i] = sp.ServicePort
		}
		var enc abi.Encoder
		buf, err := enc.Encode(nil, &abi.Batch{Stage: abi.Stages[0], Node: m.Node, Ports: ports})
		if err != nil {
			t.Fatalf("encode the model's ports: %v", err)
		}
		if _, err := abi.DecodeBatch(buf); err != nil {
			t.Fatalf("the model's ports encode to a batch that does not decode: %v", err)
		}
	})
}
