package state_test

import (
	"bytes"
	"context"
	"net/netip"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/examples/cluster"
	"github.com/wasp-proxy/wasp/host/model"
	"github.com/wasp-proxy/wasp/host/objects"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/state"
)

// Address plan (documentation and private ranges, as the sample cluster):
// ClusterIPs 10.96.0.0/16 and fd00:10:96::/112, pods 10.244.0.0/16 and
// fd00:10:244::/56, external IPs 192.0.2.0/24 (TEST-NET-1), LB VIPs
// 203.0.113.0/24 (TEST-NET-3), nodes 198.51.100.0/24 and 2001:db8:100::/64.

var (
	ip  = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

// port returns a TCP service port "demo/<name>:http" of family f.
func port(name string, f v1.IPFamily, clusterIP string, eps ...abi.Endpoint) model.ServicePort {
	return model.ServicePort{
		ServicePort: abi.ServicePort{
			Namespace: "demo", Name: name, PortName: "http", Protocol: abi.ProtocolTCP,
			IPv6: f == v1.IPv6Protocol, Port: 80, Endpoints: eps,
		},
		Family:    f,
		ClusterIP: ip(clusterIP),
	}
}

func ep(addr string) abi.Endpoint {
	return abi.Endpoint{Addr: ip(addr), Port: 8080, Ready: true, Serving: true}
}

// result returns a decision over eps with the given sets, weighing every
// index in weights by its value.
func result(eps []abi.Endpoint, cluster, local abi.Indices, weights ...abi.Weight) pipeline.Result {
	return pipeline.Result{
		Decision: abi.Decision{
			Cluster: cluster, Local: local,
			HasAnyEndpoints: len(cluster) > 0 || len(local) > 0,
			Weights:         weights,
		},
		Endpoints: eps,
	}
}

// bep is a programmed endpoint on port 8080.
func bep(addr string, w uint32) backends.Endpoint {
	return backends.Endpoint{Addr: ip(addr), Port: 8080, Weight: w}
}

// svc is the programmed form of port(name, ...) before endpoints.
func svc(name string, f v1.IPFamily, clusterIP string) backends.Service {
	return backends.Service{
		Key:       "demo/" + name + ":http/TCP/" + string(f),
		Namespace: "demo", Name: name, PortName: "http", Protocol: "TCP",
		ClusterIP: ip(clusterIP), Port: 80,
	}
}

func TestBuild(t *testing.T) {
	eps4 := []abi.Endpoint{ep("10.244.1.10"), ep("10.244.2.10"), ep("10.244.3.10")}
	eps6 := []abi.Endpoint{ep("fd00:10:244:1::10"), ep("fd00:10:244:2::10")}
	w := func(i, weight uint32) abi.Weight { return abi.Weight{Index: i, Weight: weight} }

	tests := []struct {
		name    string
		family  backends.Family
		opts    state.Options
		ports   []model.ServicePort
		results []pipeline.Result
		want    *backends.State
	}{
		{
			name:   "no ports",
			family: backends.IPv4,
			want:   &backends.State{Family: backends.IPv4},
		},
		{
			name:    "nil sets stay nil",
			family:  backends.IPv4,
			ports:   []model.ServicePort{port("web", v1.IPv4Protocol, "10.96.0.10")},
			results: []pipeline.Result{result(nil, nil, nil)},
			want: &backends.State{Family: backends.IPv4, Services: []backends.Service{
				svc("web", v1.IPv4Protocol, "10.96.0.10"),
			}},
		},
		{
			name:    "empty sets stay empty",
			family:  backends.IPv4,
			ports:   []model.ServicePort{port("web", v1.IPv4Protocol, "10.96.0.10")},
			results: []pipeline.Result{{Decision: abi.Decision{Cluster: abi.Indices{}, Local: abi.Indices{}, HasAnyEndpoints: true}}},
			want: &backends.State{Family: backends.IPv4, Services: []backends.Service{
				with(svc("web", v1.IPv4Protocol, "10.96.0.10"), func(s *backends.Service) {
					s.HasAnyEndpoints, s.Cluster, s.Local = true, []backends.Endpoint{}, []backends.Endpoint{}
				}),
			}},
		},
		{
			name:    "weights map by index",
			family:  backends.IPv4,
			ports:   []model.ServicePort{port("web", v1.IPv4Protocol, "10.96.0.10", eps4...)},
			results: []pipeline.Result{result(eps4, abi.Indices{0, 1, 2}, abi.Indices{0}, w(0, 3), w(1, 1), w(2, 65535))},
			want: &backends.State{Family: backends.IPv4, Services: []backends.Service{
				with(svc("web", v1.IPv4Protocol, "10.96.0.10"), func(s *backends.Service) {
					s.HasAnyEndpoints = true
					s.Cluster = []backends.Endpoint{bep("10.244.1.10", 3), bep("10.244.2.10", 1), bep("10.244.3.10", 65535)}
					s.Local = []backends.Endpoint{bep("10.244.1.10", 3)}
					s.Serving = []netip.Addr{ip("10.244.1.10"), ip("10.244.2.10"), ip("10.244.3.10")}
				}),
			}},
		},
		{
			name:   "endpoints left out by selection",
			family: backends.IPv4,
			ports: []model.ServicePort{
				port("all-out", v1.IPv4Protocol, "10.96.0.11", eps4...),
				port("some-out", v1.IPv4Protocol, "10.96.0.12", eps4...),
			},
			results: []pipeline.Result{
				// Selection weighed nothing: the used sets come out empty.
				result(eps4, abi.Indices{0, 1}, abi.Indices{0}),
				// Index 1 has no weight, index 2 a zero one.
				result(eps4, abi.Indices{0, 1, 2}, nil, w(0, 2), w(2, 0)),
			},
			want: &backends.State{Family: backends.IPv4, Services: []backends.Service{
				// Serving ignores the decision: every serving endpoint counts.
				with(svc("all-out", v1.IPv4Protocol, "10.96.0.11"), func(s *backends.Service) {
					s.HasAnyEndpoints, s.Cluster, s.Local = true, []backends.Endpoint{}, []backends.Endpoint{}
					s.Serving = []netip.Addr{ip("10.244.1.10"), ip("10.244.2.10"), ip("10.244.3.10")}
				}),
				with(svc("some-out", v1.IPv4Protocol, "10.96.0.12"), func(s *backends.Service) {
					s.HasAnyEndpoints, s.Cluster = true, []backends.Endpoint{bep("10.244.1.10", 2)}
					s.Serving = []netip.Addr{ip("10.244.1.10"), ip("10.244.2.10"), ip("10.244.3.10")}
				}),
			}},
		},
		{
			name:    "index out of range is skipped",
			family:  backends.IPv4,
			ports:   []model.ServicePort{port("web", v1.IPv4Protocol, "10.96.0.10", eps4[:1]...)},
			results: []pipeline.Result{result(eps4[:1], abi.Indices{0, 7}, nil, w(0, 1), w(7, 1))},
			want: &backends.State{Family: backends.IPv4, Services: []backends.Service{
				with(svc("web", v1.IPv4Protocol, "10.96.0.10"), func(s *backends.Service) {
					s.HasAnyEndpoints, s.Cluster = true, []backends.Endpoint{bep("10.244.1.10", 1)}
					s.Serving = []netip.Addr{ip("10.244.1.10")}
				}),
			}},
		},
		{
			name:   "other family skipped, IPv4",
			family: backends.IPv4,
			opts: state.Options{
				NodePortAddresses: []netip.Addr{ip("198.51.100.1"), ip("2001:db8:100::1")},
				NodeIPs:           []netip.Addr{ip("2001:db8:100::1"), ip("198.51.100.1"), ip("198.51.100.2")},
				ServiceCIDRs:      []netip.Prefix{pfx("10.96.0.0/16"), pfx("fd00:10:96::/112")},
				ClusterCIDRs:      []netip.Prefix{pfx("fd00:10:244::/56"), pfx("10.244.0.0/16")},
				MasqueradeAll:     true,
			},
			ports: []model.ServicePort{
				port("dual", v1.IPv4Protocol, "10.96.0.70", eps4[:1]...),
				port("dual", v1.IPv6Protocol, "fd00:10:96::70", eps6[:1]...),
			},
			results: []pipeline.Result{
				result(eps4[:1], abi.Indices{0}, nil, w(0, 1)),
				result(eps6[:1], abi.Indices{0}, nil, w(0, 1)),
			},
			want: &backends.State{
				Family:            backends.IPv4,
				NodePortAddresses: []netip.Addr{ip("198.51.100.1")},
				NodeIPs:           []netip.Addr{ip("198.51.100.1"), ip("198.51.100.2")},
				ServiceCIDRs:      []netip.Prefix{pfx("10.96.0.0/16")},
				ClusterCIDRs:      []netip.Prefix{pfx("10.244.0.0/16")},
				MasqueradeAll:     true,
				Services: []backends.Service{
					with(svc("dual", v1.IPv4Protocol, "10.96.0.70"), func(s *backends.Service) {
						s.HasAnyEndpoints, s.Cluster = true, []backends.Endpoint{bep("10.244.1.10", 1)}
						s.Serving = []netip.Addr{ip("10.244.1.10")}
					}),
				},
			},
		},
		{
			name:   "other family skipped, IPv6",
			family: backends.IPv6,
			opts: state.Options{
				NodePortAddresses: []netip.Addr{ip("198.51.100.1"), ip("2001:db8:100::1")},
				NodeIPs:           []netip.Addr{ip("198.51.100.1"), ip("2001:db8:100::1")},
				ServiceCIDRs:      []netip.Prefix{pfx("10.96.0.0/16"), pfx("fd00:10:96::/112")},
			},
			ports: []model.ServicePort{
				port("dual", v1.IPv4Protocol, "10.96.0.70", eps4[:1]...),
				port("dual", v1.IPv6Protocol, "fd00:10:96::70", eps6...),
			},
			results: []pipeline.Result{
				result(eps4[:1], abi.Indices{0}, nil, w(0, 1)),
				result(eps6, abi.Indices{0, 1}, abi.Indices{1}, w(0, 1), w(1, 4)),
			},
			want: &backends.State{
				Family:            backends.IPv6,
				NodePortAddresses: []netip.Addr{ip("2001:db8:100::1")},
				NodeIPs:           []netip.Addr{ip("2001:db8:100::1")},
				ServiceCIDRs:      []netip.Prefix{pfx("fd00:10:96::/112")},
				Services: []backends.Service{
					with(svc("dual", v1.IPv6Protocol, "fd00:10:96::70"), func(s *backends.Service) {
						s.HasAnyEndpoints = true
						s.Cluster = []backends.Endpoint{bep("fd00:10:244:1::10", 1), bep("fd00:10:244:2::10", 4)}
						s.Local = []backends.Endpoint{bep("fd00:10:244:2::10", 4)}
						s.Serving = []netip.Addr{ip("fd00:10:244:1::10"), ip("fd00:10:244:2::10")}
					}),
				},
			},
		},
		{
			name:   "every field copied",
			family: backends.IPv4,
			ports: []model.ServicePort{{
				ServicePort: abi.ServicePort{
					Namespace: "demo", Name: "lb", Protocol: abi.ProtocolUDP, Port: 53, NodePort: 30053,
					InternalPolicyLocal: true, ExternalPolicyLocal: true, ExternallyAccessible: true,
				},
				Family:                   v1.IPv4Protocol,
				ClusterIP:                ip("10.96.0.53"),
				ExternalIPs:              []netip.Addr{ip("192.0.2.53")},
				LoadBalancerVIPs:         []netip.Addr{ip("203.0.113.53")},
				LoadBalancerSourceRanges: []netip.Prefix{pfx("198.51.100.0/24")},
				SessionAffinityTimeout:   10800,
				HealthCheckNodePort:      32053,
			}},
			results: []pipeline.Result{result(nil, abi.Indices{}, abi.Indices{})},
			want: &backends.State{Family: backends.IPv4, Services: []backends.Service{{
				Key: "demo/lb/UDP/IPv4", Namespace: "demo", Name: "lb", Protocol: "UDP",
				ClusterIP: ip("10.96.0.53"), Port: 53, NodePort: 30053,
				ExternalIPs:              []netip.Addr{ip("192.0.2.53")},
				LoadBalancerVIPs:         []netip.Addr{ip("203.0.113.53")},
				LoadBalancerSourceRanges: []netip.Prefix{pfx("198.51.100.0/24")},
				AffinityTimeout:          10800,
				HealthCheckNodePort:      32053,
				InternalPolicyLocal:      true,
				ExternalPolicyLocal:      true,
				Cluster:                  []backends.Endpoint{},
				Local:                    []backends.Endpoint{},
			}}},
		},
		{
			// model orders protocols TCP, UDP, SCTP; the State orders
			// by the key's string.
			name:   "sorted by key string",
			family: backends.IPv4,
			ports: []model.ServicePort{
				port("web", v1.IPv4Protocol, "10.96.0.10"),
				withPort(port("web", v1.IPv4Protocol, "10.96.0.10"), func(sp *model.ServicePort) { sp.Protocol = abi.ProtocolSCTP }),
				port("api", v1.IPv4Protocol, "10.96.0.40"),
			},
			results: []pipeline.Result{result(nil, nil, nil), result(nil, nil, nil), result(nil, nil, nil)},
			want: &backends.State{Family: backends.IPv4, Services: []backends.Service{
				svc("api", v1.IPv4Protocol, "10.96.0.40"),
				with(svc("web", v1.IPv4Protocol, "10.96.0.10"), func(s *backends.Service) {
					s.Key, s.Protocol = "demo/web:http/SCTP/IPv4", "SCTP"
				}),
				svc("web", v1.IPv4Protocol, "10.96.0.10"),
			}},
		},
		{
			name:   "duplicate key: the later port wins",
			family: backends.IPv4,
			ports: []model.ServicePort{
				port("web", v1.IPv4Protocol, "10.96.0.10"),
				port("web", v1.IPv4Protocol, "10.96.0.11"),
			},
			results: []pipeline.Result{result(nil, nil, nil), result(nil, nil, nil)},
			want: &backends.State{Family: backends.IPv4, Services: []backends.Service{
				svc("web", v1.IPv4Protocol, "10.96.0.11"),
			}},
		},
		{
			name:    "unknown family builds no service",
			family:  backends.Family(5),
			ports:   []model.ServicePort{port("web", v1.IPv4Protocol, "10.96.0.10")},
			results: []pipeline.Result{result(nil, nil, nil)},
			want:    &backends.State{Family: backends.Family(5)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := state.Build(tt.family, tt.opts, tt.ports, tt.results)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Build:\n got %+v\nwant %+v", got, tt.want)
			}
			// Same input, same state.
			if again := state.Build(tt.family, tt.opts, tt.ports, tt.results); !reflect.DeepEqual(again, got) {
				t.Errorf("second Build differs:\n got %+v\nwant %+v", again, got)
			}
		})
	}
}

func with(s backends.Service, f func(*backends.Service)) backends.Service {
	f(&s)
	return s
}

func withPort(sp model.ServicePort, f func(*model.ServicePort)) model.ServicePort {
	f(&sp)
	return sp
}

// TestBuildSharesNoMemory checks that changing the State leaves the input
// alone.
func TestBuildSharesNoMemory(t *testing.T) {
	opts := state.Options{NodePortAddresses: []netip.Addr{ip("198.51.100.1")}, NodeIPs: []netip.Addr{ip("198.51.100.1")}}
	sp := port("web", v1.IPv4Protocol, "10.96.0.10")
	sp.ExternalIPs = []netip.Addr{ip("192.0.2.1")}
	s := state.Build(backends.IPv4, opts, []model.ServicePort{sp}, []pipeline.Result{result(nil, nil, nil)})
	s.NodePortAddresses[0] = ip("198.51.100.9")
	s.NodeIPs[0] = ip("198.51.100.9")
	s.Services[0].ExternalIPs[0] = ip("192.0.2.9")
	if opts.NodePortAddresses[0] != ip("198.51.100.1") || opts.NodeIPs[0] != ip("198.51.100.1") || sp.ExternalIPs[0] != ip("192.0.2.1") {
		t.Errorf("Build's State aliases its input")
	}
}

func TestBuildPanicsOnLengthMismatch(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("Build with 1 port and 0 results did not panic")
		}
	}()
	state.Build(backends.IPv4, state.Options{}, []model.ServicePort{port("web", v1.IPv4Protocol, "10.96.0.10")}, nil)
}

// TestBuildSample runs the native default chain over the bundled sample
// cluster for node-a and checks the resulting states.
func TestBuildSample(t *testing.T) {
	o, err := objects.Decode(bytes.NewReader(cluster.Sample), "sample.yaml")
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	node, err := o.Node("node-a")
	if err != nil {
		t.Fatal(err)
	}
	m := model.Build(model.Input{NodeName: "node-a", Node: node, Services: o.Services, EndpointSlices: o.EndpointSlices})
	ports := make([]pipeline.Port, len(m.Ports))
	for i := range m.Ports {
		ports[i] = pipeline.Port{Key: m.Ports[i].String(), ServicePort: m.Ports[i].ServicePort}
	}
	results := pipeline.New(pipeline.Options{}).Run(context.Background(), m.Node, ports)
	for i, r := range results {
		if r.Source != pipeline.SourceModules || r.Err != nil {
			t.Fatalf("%s: source %v, err %v", ports[i].Key, r.Source, r.Err)
		}
	}

	v4 := state.Build(backends.IPv4, state.Options{}, m.Ports, results)
	v6 := state.Build(backends.IPv6, state.Options{}, m.Ports, results)
	byKey := map[string]backends.Service{}
	var keys4, keys6 []string
	for _, s := range v4.Services {
		keys4 = append(keys4, s.Key)
		byKey[s.Key] = s
	}
	for _, s := range v6.Services {
		keys6 = append(keys6, s.Key)
		byKey[s.Key] = s
	}
	wantKeys4 := []string{
		"demo/api:grpc/TCP/IPv4",
		"demo/draining:http/TCP/IPv4",
		"demo/dual:http/TCP/IPv4",
		"demo/frontend:http/TCP/IPv4",
		"demo/metrics:metrics/TCP/IPv4",
		"demo/web:http/TCP/IPv4",
	}
	if !reflect.DeepEqual(keys4, wantKeys4) {
		t.Errorf("IPv4 keys:\n got %q\nwant %q", keys4, wantKeys4)
	}
	if want := []string{"demo/dual:http/TCP/IPv6"}; !reflect.DeepEqual(keys6, want) {
		t.Errorf("IPv6 keys: got %q, want %q", keys6, want)
	}

	e := func(addr string, port uint16) backends.Endpoint {
		return backends.Endpoint{Addr: ip(addr), Port: port, Weight: 1}
	}
	tests := []struct {
		key             string
		hasAnyEndpoints bool
		cluster, local  []backends.Endpoint
	}{
		// iTP=Local with no endpoint on node-a: drop, not reject.
		{key: "demo/metrics:metrics/TCP/IPv4", hasAnyEndpoints: true},
		{key: "demo/web:http/TCP/IPv4", hasAnyEndpoints: true,
			cluster: []backends.Endpoint{e("10.244.1.10", 8080), e("10.244.2.10", 8080), e("10.244.3.10", 8080)}},
		// eTP=Local NodePort: both sets, the local one with node-a's pod.
		{key: "demo/frontend:http/TCP/IPv4", hasAnyEndpoints: true,
			cluster: []backends.Endpoint{e("10.244.1.20", 8080), e("10.244.2.20", 8080)},
			local:   []backends.Endpoint{e("10.244.1.20", 8080)}},
		// PreferSameZone: zone-a's endpoints only.
		{key: "demo/api:grpc/TCP/IPv4", hasAnyEndpoints: true,
			cluster: []backends.Endpoint{e("10.244.1.40", 9090), e("10.244.1.41", 9090)}},
		// Serving-terminating fallback; the non-serving one is left out.
		{key: "demo/draining:http/TCP/IPv4", hasAnyEndpoints: true,
			cluster: []backends.Endpoint{e("10.244.1.50", 8080), e("10.244.2.50", 8080)}},
		{key: "demo/dual:http/TCP/IPv6", hasAnyEndpoints: true,
			cluster: []backends.Endpoint{e("fd00:10:244:1::70", 8080), e("fd00:10:244:3::70", 8080)}},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			s, ok := byKey[tt.key]
			if !ok {
				t.Fatalf("no service %q", tt.key)
			}
			if s.HasAnyEndpoints != tt.hasAnyEndpoints {
				t.Errorf("HasAnyEndpoints = %v, want %v", s.HasAnyEndpoints, tt.hasAnyEndpoints)
			}
			if !reflect.DeepEqual(s.Cluster, tt.cluster) {
				t.Errorf("Cluster:\n got %#v\nwant %#v", s.Cluster, tt.cluster)
			}
			if !reflect.DeepEqual(s.Local, tt.local) {
				t.Errorf("Local:\n got %#v\nwant %#v", s.Local, tt.local)
			}
		})
	}

	// Same input, same state, also through the whole chain.
	results2 := pipeline.New(pipeline.Options{}).Run(context.Background(), m.Node, ports)
	if again := state.Build(backends.IPv4, state.Options{}, m.Ports, results2); !reflect.DeepEqual(again, v4) {
		t.Errorf("a second run built a different IPv4 state")
	}
}

func TestBuildServing(t *testing.T) {
	notServing := ep("10.244.3.10")
	notServing.Ready, notServing.Serving, notServing.Terminating = false, false, true
	terminating := ep("10.244.2.10")
	terminating.Ready, terminating.Terminating = false, true
	otherPort := ep("10.244.1.10")
	otherPort.Port = 9090
	eps := []abi.Endpoint{ep("10.244.1.10"), otherPort, terminating, notServing}

	// The decision uses none of them: Serving does not depend on it.
	s := state.Build(backends.IPv4, state.Options{},
		[]model.ServicePort{port("web", v1.IPv4Protocol, "10.96.0.10", eps...)},
		[]pipeline.Result{result(eps, nil, nil)})
	want := []netip.Addr{ip("10.244.1.10"), ip("10.244.2.10")}
	if got := s.Services[0].Serving; !reflect.DeepEqual(got, want) {
		t.Errorf("Serving = %v, want %v (distinct, sorted, serving only)", got, want)
	}
}
