package model

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/wasp-proxy/wasp/abi"
)

func TestBuildEndpoints(t *testing.T) {
	const v4, v6 = discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	withLabel := func(k, v string) func(*discoveryv1.EndpointSlice) {
		return func(es *discoveryv1.EndpointSlice) { es.Labels[k] = v }
	}
	withPorts := func(ps ...discoveryv1.EndpointPort) func(*discoveryv1.EndpointSlice) {
		return func(es *discoveryv1.EndpointSlice) { es.Ports = ps }
	}
	mod := func(es *discoveryv1.EndpointSlice, ms ...func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
		for _, m := range ms {
			m(es)
		}
		return es
	}
	at := func(addr string, port uint16, ms ...func(*abi.Endpoint)) abi.Endpoint {
		return abiEndpoint(addr, append([]func(*abi.Endpoint){func(e *abi.Endpoint) { e.Port = port }}, ms...)...)
	}
	isTerminating := func(e *abi.Endpoint) { e.Ready, e.Serving, e.Terminating = false, true, true }
	isLocal := func(e *abi.Endpoint) { e.Local, e.NodeName = true, testNode }

	tests := []struct {
		name     string
		svc      *v1.Service // default: service("default", "web", dualStack)
		nodeName string      // default: testNode
		slices   []*discoveryv1.EndpointSlice
		port     string // key of the port to check; default "default/web:http/TCP/IPv4"
		want     []abi.Endpoint
	}{
		{
			name: "no slice: port present, endpoints nil",
		},
		{
			name:   "one endpoint",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4, endpoint("10.244.1.5"))},
			want:   []abi.Endpoint{abiEndpoint("10.244.1.5")},
		},
		{
			name: "slice without the service-name label is ignored",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				func(es *discoveryv1.EndpointSlice) { es.Labels = map[string]string{"app": "web"} })},
		},
		{
			name: "slice with an empty service-name label is ignored",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				withLabel(LabelServiceName, ""))},
		},
		{
			name:   "slice without a name is ignored",
			slices: []*discoveryv1.EndpointSlice{slice("default", "", "web", v4, endpoint("10.244.1.5"))},
		},
		{
			name:   "slice without a namespace is ignored",
			slices: []*discoveryv1.EndpointSlice{slice("", "web-1", "web", v4, endpoint("10.244.1.5"))},
		},
		{
			name:   "slice of another namespace does not match",
			slices: []*discoveryv1.EndpointSlice{slice("other", "web-1", "web", v4, endpoint("10.244.1.5"))},
		},
		{
			name: "slice labelled headless is ignored",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				withLabel(LabelHeadless, ""))},
		},
		{
			name: "slice labelled service-proxy-name is ignored",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				withLabel(LabelServiceProxyName, "other"))},
		},
		{
			name:   "IPv6 slice does not feed the IPv4 port",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v6, endpoint("fd00:244::5"))},
		},
		{
			name:   "IPv6 slice feeds the IPv6 port",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v6, endpoint("fd00:244::5"))},
			port:   "default/web:http/TCP/IPv6",
			want:   []abi.Endpoint{abiEndpoint("fd00:244::5")},
		},
		{
			name:   "FQDN slice is ignored",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", discoveryv1.AddressTypeFQDN, endpoint("10.244.1.5"))},
		},
		{
			name:   "address of the wrong family in a slice is dropped",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4, endpoint("fd00:244::5"), endpoint("10.244.1.5"))},
			want:   []abi.Endpoint{abiEndpoint("10.244.1.5")},
		},
		{
			name: "port with a nil name is ignored",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				withPorts(discoveryv1.EndpointPort{Port: ptr[int32](8080), Protocol: ptr(v1.ProtocolTCP)}))},
			svc:  service("default", "web", func(s *v1.Service) { s.Spec.Ports[0].Name = "" }),
			port: "default/web/TCP/IPv4",
		},
		{
			name: "port named \"\" is the unnamed port",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				withPorts(slicePort("", 8080)))},
			svc:  service("default", "web", func(s *v1.Service) { s.Spec.Ports[0].Name = "" }),
			port: "default/web/TCP/IPv4",
			want: []abi.Endpoint{abiEndpoint("10.244.1.5")},
		},
		{
			name: "port with a nil number is ignored",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				withPorts(discoveryv1.EndpointPort{Name: ptr("http"), Protocol: ptr(v1.ProtocolTCP)}))},
		},
		{
			name: "port 0 is ignored",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				withPorts(slicePort("http", 0)))},
		},
		{
			name: "port with a nil protocol is TCP",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				withPorts(discoveryv1.EndpointPort{Name: ptr("http"), Port: ptr[int32](8080)}))},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5")},
		},
		{
			name: "port of another protocol does not match",
			slices: []*discoveryv1.EndpointSlice{mod(slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				withPorts(discoveryv1.EndpointPort{Name: ptr("http"), Port: ptr[int32](8080), Protocol: ptr(v1.ProtocolUDP)}))},
		},
		{
			name: "same name and protocol, different numbers, across slices: merged",
			slices: []*discoveryv1.EndpointSlice{
				slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				mod(slice("default", "web-2", "web", v4, endpoint("10.244.2.5")), withPorts(slicePort("http", 9090))),
			},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5"), at("10.244.2.5", 9090)},
		},
		{
			name: "same ip, different numbers: two endpoints",
			slices: []*discoveryv1.EndpointSlice{
				slice("default", "web-1", "web", v4, endpoint("10.244.1.5")),
				mod(slice("default", "web-2", "web", v4, endpoint("10.244.1.5")), withPorts(slicePort("http", 9090))),
			},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5"), at("10.244.1.5", 9090)},
		},
		{
			name: "only the first address counts; no address: ignored",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4,
				discoveryv1.Endpoint{Addresses: []string{"10.244.1.5", "10.244.1.6"}, NodeName: ptr("node-b")},
				discoveryv1.Endpoint{NodeName: ptr("node-b")},
			)},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5")},
		},
		{
			name:   "IPv4-mapped address canonicalised to IPv4",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4, endpoint("::ffff:10.244.1.5"))},
			want:   []abi.Endpoint{abiEndpoint("10.244.1.5")},
		},
		{
			name:   "IPv4 octets with leading zeros read as decimal, as ParseIPSloppy",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4, endpoint("010.244.001.005"))},
			want:   []abi.Endpoint{abiEndpoint("10.244.1.5")},
		},
		{
			name: "unparsable and zoned addresses are dropped",
			slices: []*discoveryv1.EndpointSlice{
				slice("default", "web-1", "web", v4, endpoint("10.244.1.256"), endpoint("10.244.1"), endpoint("10.244.1.5")),
			},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5")},
		},
		{
			name:   "IPv6 zoned address dropped, long form canonicalised",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v6, endpoint("fe80::1%eth0"), endpoint("FD00:0244:0000::0005"))},
			port:   "default/web:http/TCP/IPv6",
			want:   []abi.Endpoint{abiEndpoint("fd00:244::5")},
		},
		{
			name: "duplicate ip:port: a later terminating copy does not replace the first",
			slices: []*discoveryv1.EndpointSlice{
				slice("default", "web-a", "web", v4, endpoint("10.244.1.5", onNode("node-x"))),
				slice("default", "web-b", "web", v4, endpoint("10.244.1.5", terminating)),
			},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5", func(e *abi.Endpoint) { e.NodeName = "node-x" })},
		},
		{
			name: "duplicate ip:port: a later non-terminating copy replaces a terminating one",
			slices: []*discoveryv1.EndpointSlice{
				slice("default", "web-a", "web", v4, endpoint("10.244.1.5", terminating)),
				slice("default", "web-b", "web", v4, endpoint("10.244.1.5", onNode("node-x"))),
			},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5", func(e *abi.Endpoint) { e.NodeName = "node-x" })},
		},
		{
			name: "duplicate ip:port: a later non-terminating copy replaces a non-terminating one",
			slices: []*discoveryv1.EndpointSlice{
				slice("default", "web-a", "web", v4, endpoint("10.244.1.5")),
				slice("default", "web-b", "web", v4, endpoint("10.244.1.5", onNode("node-x"))),
			},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5", func(e *abi.Endpoint) { e.NodeName = "node-x" })},
		},
		{
			name: "duplicate ip:port: both terminating, first by slice name wins whatever the input order",
			slices: []*discoveryv1.EndpointSlice{
				slice("default", "web-b", "web", v4, endpoint("10.244.1.5", terminating, onNode("node-y"))),
				slice("default", "web-a", "web", v4, endpoint("10.244.1.5", terminating, onNode("node-x"))),
			},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5", isTerminating, func(e *abi.Endpoint) { e.NodeName = "node-x" })},
		},
		{
			name: "duplicate ip:port within one slice: same rule",
			slices: []*discoveryv1.EndpointSlice{
				slice("default", "web-a", "web", v4, endpoint("10.244.1.5", onNode("node-x")), endpoint("10.244.1.5", terminating)),
			},
			want: []abi.Endpoint{abiEndpoint("10.244.1.5", func(e *abi.Endpoint) { e.NodeName = "node-x" })},
		},
		{
			name: "conditions: nil defaults and explicit values",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4,
				endpoint("10.244.1.1", conditions(nil, nil, nil)),
				endpoint("10.244.1.2", conditions(ptr(false), nil, nil)),
				endpoint("10.244.1.3", conditions(ptr(false), ptr(false), ptr(false))),
				endpoint("10.244.1.4", conditions(nil, nil, ptr(true))),
				endpoint("10.244.1.5", conditions(ptr(false), ptr(true), ptr(true))),
			)},
			want: []abi.Endpoint{
				abiEndpoint("10.244.1.1"),
				abiEndpoint("10.244.1.2", func(e *abi.Endpoint) { e.Ready = false }),
				abiEndpoint("10.244.1.3", func(e *abi.Endpoint) { e.Ready, e.Serving = false, false }),
				abiEndpoint("10.244.1.4", func(e *abi.Endpoint) { e.Terminating = true }),
				abiEndpoint("10.244.1.5", isTerminating),
			},
		},
		{
			name: "hints: zones and nodes, sorted and distinct; empty lists nil",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4,
				endpoint("10.244.1.1", func(ep *discoveryv1.Endpoint) {
					ep.Hints = &discoveryv1.EndpointHints{
						ForZones: []discoveryv1.ForZone{{Name: "zone-b"}, {Name: "zone-a"}, {Name: "zone-b"}},
						ForNodes: []discoveryv1.ForNode{{Name: "node-b"}},
					}
				}),
				endpoint("10.244.1.2", func(ep *discoveryv1.Endpoint) {
					ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{}, ForNodes: []discoveryv1.ForNode{}}
				}),
				endpoint("10.244.1.3", func(ep *discoveryv1.Endpoint) {
					ep.Hints = &discoveryv1.EndpointHints{ForNodes: []discoveryv1.ForNode{{Name: "node-b"}}}
				}),
			)},
			want: []abi.Endpoint{
				abiEndpoint("10.244.1.1", func(e *abi.Endpoint) { e.ZoneHints, e.NodeHints = []string{"zone-a", "zone-b"}, []string{"node-b"} }),
				abiEndpoint("10.244.1.2"),
				abiEndpoint("10.244.1.3", func(e *abi.Endpoint) { e.NodeHints = []string{"node-b"} }),
			},
		},
		{
			name: "node name and zone copied; local when on this node",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4,
				endpoint("10.244.1.1", onNode(testNode), func(ep *discoveryv1.Endpoint) { ep.Zone = ptr("zone-a") }),
				endpoint("10.244.1.2", func(ep *discoveryv1.Endpoint) { ep.NodeName = nil }),
				endpoint("10.244.1.3", onNode("node-a.example")),
			)},
			want: []abi.Endpoint{
				abiEndpoint("10.244.1.1", isLocal, func(e *abi.Endpoint) { e.Zone = "zone-a" }),
				abiEndpoint("10.244.1.2", func(e *abi.Endpoint) { e.NodeName = "" }),
				abiEndpoint("10.244.1.3", func(e *abi.Endpoint) { e.NodeName = "node-a.example" }),
			},
		},
		{
			name:     "empty proxy node name: nothing is local, not even endpoints with an empty node name",
			nodeName: "-",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4,
				endpoint("10.244.1.1", onNode("")),
				endpoint("10.244.1.2", onNode(testNode)),
			)},
			want: []abi.Endpoint{
				abiEndpoint("10.244.1.1", func(e *abi.Endpoint) { e.NodeName = "" }),
				abiEndpoint("10.244.1.2", func(e *abi.Endpoint) { e.NodeName = testNode }),
			},
		},
		{
			name: "sorted by ip:port string, as upstream",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v4,
				endpoint("10.0.1.2"), endpoint("10.0.1.10"), endpoint("10.0.1.1"), endpoint("9.0.0.1"),
			)},
			want: []abi.Endpoint{abiEndpoint("10.0.1.10"), abiEndpoint("10.0.1.1"), abiEndpoint("10.0.1.2"), abiEndpoint("9.0.0.1")},
		},
		{
			name: "sorted by ip:port string: port compared as text",
			slices: []*discoveryv1.EndpointSlice{
				mod(slice("default", "web-1", "web", v4, endpoint("10.0.1.1")), withPorts(slicePort("http", 80))),
				mod(slice("default", "web-2", "web", v4, endpoint("10.0.1.1")), withPorts(slicePort("http", 8080))),
				mod(slice("default", "web-3", "web", v4, endpoint("10.0.1.1")), withPorts(slicePort("http", 9))),
			},
			want: []abi.Endpoint{at("10.0.1.1", 80), at("10.0.1.1", 8080), at("10.0.1.1", 9)},
		},
		{
			name: "IPv6 sorted by \"[ip]:port\"",
			slices: []*discoveryv1.EndpointSlice{slice("default", "web-1", "web", v6,
				endpoint("fd00:244::a"), endpoint("fd00:244::1:0"), endpoint("fd00:244::1"),
			)},
			port: "default/web:http/TCP/IPv6",
			// "[fd00:244::1:0]:8080" < "[fd00:244::1]:8080" < "[fd00:244::a]:8080"
			want: []abi.Endpoint{abiEndpoint("fd00:244::1:0"), abiEndpoint("fd00:244::1"), abiEndpoint("fd00:244::a")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := tt.svc
			if svc == nil {
				svc = service("default", "web", dualStack)
			}
			nodeName := tt.nodeName
			switch nodeName {
			case "":
				nodeName = testNode
			case "-":
				nodeName = ""
			}
			port := tt.port
			if port == "" {
				port = "default/web:http/TCP/IPv4"
			}
			m := Build(Input{NodeName: nodeName, Services: []*v1.Service{svc}, EndpointSlices: tt.slices})
			equal(t, "endpoints", mustFind(t, m, port).Endpoints, tt.want)
		})
	}
}

func TestBuildEndpointsPerPort(t *testing.T) {
	// A slice's ports each map to their own service port; a slice port
	// with no matching service port is dropped.
	svc := service("default", "dns", func(s *v1.Service) {
		s.Spec.Ports = []v1.ServicePort{{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP}, {Name: "dns-tcp", Port: 53}}
	})
	es := slice("default", "dns-1", "dns", discoveryv1.AddressTypeIPv4, endpoint("10.244.1.5"))
	es.Ports = []discoveryv1.EndpointPort{
		{Name: ptr("dns"), Port: ptr[int32](5353), Protocol: ptr(v1.ProtocolUDP)},
		{Name: ptr("dns-tcp"), Port: ptr[int32](5353), Protocol: ptr(v1.ProtocolTCP)},
		{Name: ptr("metrics"), Port: ptr[int32](9153), Protocol: ptr(v1.ProtocolTCP)},
	}
	m := Build(Input{NodeName: testNode, Services: []*v1.Service{svc}, EndpointSlices: []*discoveryv1.EndpointSlice{es}})
	equal(t, "ports", keys(m), []string{"default/dns:dns/UDP/IPv4", "default/dns:dns-tcp/TCP/IPv4"})
	for i := range m.Ports {
		equal(t, m.Ports[i].String()+" endpoints", m.Ports[i].Endpoints, []abi.Endpoint{
			{Addr: netip.MustParseAddr("10.244.1.5"), Port: 5353, Ready: true, Serving: true, NodeName: "node-b"},
		})
	}
}
