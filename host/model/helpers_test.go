package model

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasp-proxy/wasp/abi"
)

// Test address plan: ClusterIPs in 10.96.0.0/16 and fd00:96::/64, pods in
// 10.244.0.0/16 and fd00:244::/64, node and external addresses in TEST-NET
// 198.51.100.0/24 and 203.0.113.0/24 and 2001:db8::/32.

const testNode = "node-a"

func ptr[T any](v T) *T { return &v }

// service returns an IPv4 ClusterIP Service "ns/name" with one TCP port
// "http" 80, modified by each mutator in turn.
func service(ns, name string, mutators ...func(*v1.Service)) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	for _, m := range mutators {
		m(svc)
	}
	return svc
}

// dualStack makes a Service IPv4-primary dual-stack.
func dualStack(svc *v1.Service) {
	svc.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
}

// slice returns an EndpointSlice of service in ns with one port "http" 8080
// and the given endpoints.
func slice(ns, name, svcName string, at discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns,
			Name:      name,
			Labels:    map[string]string{LabelServiceName: svcName},
		},
		AddressType: at,
		Ports:       []discoveryv1.EndpointPort{slicePort("http", 8080)},
		Endpoints:   eps,
	}
}

func slicePort(name string, port int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(port), Protocol: ptr(v1.ProtocolTCP)}
}

// endpoint returns a ready endpoint with no conditions set (all defaults)
// on node-b.
func endpoint(addr string, mutators ...func(*discoveryv1.Endpoint)) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr("node-b")}
	for _, m := range mutators {
		m(&ep)
	}
	return ep
}

func onNode(n string) func(*discoveryv1.Endpoint) {
	return func(ep *discoveryv1.Endpoint) { ep.NodeName = ptr(n) }
}

func conditions(ready, serving, terminating *bool) func(*discoveryv1.Endpoint) {
	return func(ep *discoveryv1.Endpoint) {
		ep.Conditions = discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}
	}
}

// terminating sets the conditions of a serving, terminating endpoint.
func terminating(ep *discoveryv1.Endpoint) {
	conditions(ptr(false), ptr(true), ptr(true))(ep)
}

// abiEndpoint is the abi.Endpoint that endpoint(addr) gives on port 8080.
func abiEndpoint(addr string, mutators ...func(*abi.Endpoint)) abi.Endpoint {
	e := abi.Endpoint{Addr: netip.MustParseAddr(addr), Port: 8080, Ready: true, Serving: true, NodeName: "node-b"}
	for _, m := range mutators {
		m(&e)
	}
	return e
}

// mustFind returns the port with the given key string.
func mustFind(t *testing.T, m *Model, key string) *ServicePort {
	t.Helper()
	for i := range m.Ports {
		if m.Ports[i].String() == key {
			return &m.Ports[i]
		}
	}
	t.Fatalf("no service port %q; have %v", key, keys(m))
	return nil
}

// keys returns the key strings of m's ports, in order.
func keys(m *Model) []string {
	var out []string
	for i := range m.Ports {
		out = append(out, m.Ports[i].String())
	}
	return out
}

// equal reports a mismatch between got and want with t.Errorf.
func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got: %s\nwant: %s", what, dump(got), dump(want))
	}
}

func dump(v any) string {
	return fmt.Sprintf("%+v", v)
}
