package model

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasp-proxy/wasp/abi"
)

func TestBuildNode(t *testing.T) {
	tests := []struct {
		name string
		node *v1.Node
		want abi.Node
	}{
		{
			name: "nil Node: name only",
			want: abi.Node{Name: testNode},
		},
		{
			name: "all labels, sorted",
			node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{
				abi.LabelTopologyZone:    "zone-a",
				"kubernetes.io/hostname": testNode,
				abi.LabelTopologyRegion:  "region-1",
				"custom":                 "",
			}}},
			want: abi.Node{Name: testNode, Labels: []abi.Label{
				{Key: "custom", Value: ""},
				{Key: "kubernetes.io/hostname", Value: testNode},
				{Key: abi.LabelTopologyRegion, Value: "region-1"},
				{Key: abi.LabelTopologyZone, Value: "zone-a"},
			}},
		},
		{
			name: "Node without labels",
			node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}},
			want: abi.Node{Name: testNode},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Build(Input{NodeName: testNode, Node: tt.node})
			equal(t, "node", m.Node, tt.want)
			if len(m.Ports) != 0 {
				t.Errorf("got ports %v, want none", keys(m))
			}
		})
	}
}

func TestBuildPortOrder(t *testing.T) {
	svcs := []*v1.Service{
		service("b", "web", dualStack),
		service("a", "zz"),
		service("a", "web", dualStack, func(s *v1.Service) {
			s.Spec.Ports = []v1.ServicePort{{Name: "https", Port: 443}, {Name: "http", Port: 80, Protocol: v1.ProtocolUDP}, {Name: "http", Port: 80}}
		}),
	}
	m := Build(Input{NodeName: testNode, Services: svcs})
	equal(t, "order", keys(m), []string{
		"a/web:http/TCP/IPv4",
		"a/web:http/TCP/IPv6",
		"a/web:http/UDP/IPv4",
		"a/web:http/UDP/IPv6",
		"a/web:https/TCP/IPv4",
		"a/web:https/TCP/IPv6",
		"a/zz:http/TCP/IPv4",
		"b/web:http/TCP/IPv4",
		"b/web:http/TCP/IPv6",
	})
}

func TestNormalizeFamilies(t *testing.T) {
	tests := []struct {
		name string
		in   []v1.IPFamily
		want []v1.IPFamily
	}{
		{"nil means both", nil, []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}},
		{"IPv4 first, duplicates dropped", []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol, v1.IPv6Protocol}, []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}},
		{"unknown dropped", []v1.IPFamily{"IPv5", v1.IPv6Protocol}, []v1.IPFamily{v1.IPv6Protocol}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			equal(t, "families", normalizeFamilies(tt.in), tt.want)
		})
	}
}

// corpus returns a cluster with many corner cases at once: dual-stack,
// duplicates across slices, merged ports, hints, skipped objects.
func corpus() Input {
	var svcs []*v1.Service
	var eps []*discoveryv1.EndpointSlice
	for i := range 6 {
		ns := fmt.Sprintf("ns-%d", i%2)
		name := fmt.Sprintf("svc-%d", i)
		svcs = append(svcs, service(ns, name, dualStack, func(s *v1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP})
			s.Annotations = map[string]string{"b": "2", "a": "1", "c": "3"}
			s.Spec.ExternalIPs = []string{"203.0.113.1", "2001:db8::1"}
		}))
		for j := range 4 {
			v4 := slice(ns, fmt.Sprintf("%s-v4-%d", name, j), name, discoveryv1.AddressTypeIPv4,
				endpoint(fmt.Sprintf("10.244.%d.%d", i, j), onNode(fmt.Sprintf("node-%c", 'a'+j%3))),
				// the same address in every slice, terminating in some
				endpoint("10.244.99.1", func(ep *discoveryv1.Endpoint) {
					if j%2 == 0 {
						terminating(ep)
					}
					ep.NodeName = ptr(fmt.Sprintf("node-%d", j))
				}),
				endpoint(fmt.Sprintf("10.244.%d.1%d", i, j), func(ep *discoveryv1.Endpoint) {
					ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-b"}, {Name: "zone-a"}}}
				}),
			)
			v4.Ports = append(v4.Ports, discoveryv1.EndpointPort{Name: ptr("dns"), Port: ptr(int32(5300 + j)), Protocol: ptr(v1.ProtocolUDP)})
			v6 := slice(ns, fmt.Sprintf("%s-v6-%d", name, j), name, discoveryv1.AddressTypeIPv6,
				endpoint(fmt.Sprintf("fd00:244::%d:%d", i, j)),
				endpoint("fd00:244::99", func(ep *discoveryv1.Endpoint) { ep.NodeName = ptr(fmt.Sprintf("node-%d", j)) }),
			)
			eps = append(eps, v4, v6)
		}
	}
	svcs = append(svcs,
		service("ns-0", "headless", func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
		service("ns-0", "other-proxy", func(s *v1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "x"} }),
	)
	return Input{
		NodeName: testNode,
		Node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{
			"z": "1", "a": "2", abi.LabelTopologyZone: "zone-a",
		}}},
		Services:       svcs,
		EndpointSlices: eps,
	}
}

func TestBuildDeterministic(t *testing.T) {
	in := corpus()
	want := Build(in)
	if len(want.Ports) != 6*4 {
		t.Fatalf("corpus gave %d ports, want 24", len(want.Ports))
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		shuffled := in
		shuffled.Services = slices.Clone(in.Services)
		shuffled.EndpointSlices = slices.Clone(in.EndpointSlices)
		rng.Shuffle(len(shuffled.Services), func(a, b int) {
			shuffled.Services[a], shuffled.Services[b] = shuffled.Services[b], shuffled.Services[a]
		})
		rng.Shuffle(len(shuffled.EndpointSlices), func(a, b int) {
			shuffled.EndpointSlices[a], shuffled.EndpointSlices[b] = shuffled.EndpointSlices[b], shuffled.EndpointSlices[a]
		})
		if got := Build(shuffled); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffle %d: model differs from the unshuffled one", i)
		}
	}
}

func TestBuildCorpusDuplicates(t *testing.T) {
	// 10.244.99.1 is in every v4 slice; slices svc-0-v4-1 and -3 have it
	// non-terminating. The last non-terminating copy by slice name wins:
	// svc-0-v4-3 (node-3).
	m := Build(corpus())
	sp := mustFind(t, m, "ns-0/svc-0:http/TCP/IPv4")
	for _, e := range sp.Endpoints {
		if e.Addr.String() == "10.244.99.1" {
			if e.NodeName != "node-3" || e.Terminating {
				t.Errorf("duplicate resolved to %+v, want the non-terminating copy on node-3", e)
			}
			return
		}
	}
	t.Errorf("10.244.99.1 missing from %v", sp.Endpoints)
}

func TestBuildDoesNotModifyInput(t *testing.T) {
	in := corpus()
	before := make([]*v1.Service, len(in.Services))
	for i, s := range in.Services {
		before[i] = s.DeepCopy()
	}
	beforeSlices := make([]*discoveryv1.EndpointSlice, len(in.EndpointSlices))
	for i, es := range in.EndpointSlices {
		beforeSlices[i] = es.DeepCopy()
	}
	order := slices.Clone(in.EndpointSlices)

	Build(in)

	equal(t, "services", in.Services, before)
	equal(t, "slices", in.EndpointSlices, beforeSlices)
	for i := range order {
		if order[i] != in.EndpointSlices[i] {
			t.Fatalf("Build reordered the input EndpointSlices")
		}
	}
}

func TestBuildNilEntries(t *testing.T) {
	m := Build(Input{NodeName: testNode, Services: []*v1.Service{nil}, EndpointSlices: []*discoveryv1.EndpointSlice{nil}})
	if len(m.Ports) != 0 {
		t.Errorf("got ports %v, want none", keys(m))
	}
}
