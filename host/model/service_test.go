package model

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/wasp-proxy/wasp/abi"
)

func TestBuildWhichServicePorts(t *testing.T) {
	tests := []struct {
		name     string
		svc      *v1.Service
		families []v1.IPFamily
		want     []string // key strings, in order
	}{
		{
			name: "ClusterIP service",
			svc:  service("default", "web"),
			want: []string{"default/web:http/TCP/IPv4"},
		},
		{
			name: "headless: ClusterIP None",
			svc:  service("default", "web", func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
		},
		{
			name: "headless: no ClusterIP",
			svc:  service("default", "web", func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }),
		},
		{
			name: "ExternalName with a ClusterIP is still skipped",
			svc:  service("default", "web", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName }),
		},
		{
			name: "service-proxy-name label, any value",
			svc:  service("default", "web", func(s *v1.Service) { s.Labels = map[string]string{LabelServiceProxyName: ""} }),
		},
		{
			name: "headless label on the Service (upstream's informer selector covers both kinds)",
			svc:  service("default", "web", func(s *v1.Service) { s.Labels = map[string]string{LabelHeadless: ""} }),
		},
		{
			name: "other labels do not skip",
			svc:  service("default", "web", func(s *v1.Service) { s.Labels = map[string]string{"app": "web"} }),
			want: []string{"default/web:http/TCP/IPv4"},
		},
		{
			name:     "no ClusterIP for the requested family",
			svc:      service("default", "web"),
			families: []v1.IPFamily{v1.IPv6Protocol},
		},
		{
			name: "dual-stack service gives one port per family, IPv4 first",
			svc:  service("default", "web", dualStack),
			want: []string{"default/web:http/TCP/IPv4", "default/web:http/TCP/IPv6"},
		},
		{
			name: "IPv6-primary dual-stack",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.ClusterIP = "fd00:96::10"
				s.Spec.ClusterIPs = []string{"fd00:96::10", "10.96.0.10"}
				s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
			}),
			want: []string{"default/web:http/TCP/IPv4", "default/web:http/TCP/IPv6"},
		},
		{
			name:     "families restricts the output",
			svc:      service("default", "web", dualStack),
			families: []v1.IPFamily{v1.IPv6Protocol},
			want:     []string{"default/web:http/TCP/IPv6"},
		},
		{
			name: "ipFamilies lists a family without a clusterIPs entry",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
			}),
			want: []string{"default/web:http/TCP/IPv4"},
		},
		{
			name: "no ipFamilies: clusterIPs classified by address",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.IPFamilies = nil
				s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
			}),
			want: []string{"default/web:http/TCP/IPv4", "default/web:http/TCP/IPv6"},
		},
		{
			name: "no ipFamilies nor clusterIPs: spec.clusterIP",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.IPFamilies, s.Spec.ClusterIPs, s.Spec.ClusterIP = nil, nil, "fd00:96::10"
			}),
			want: []string{"default/web:http/TCP/IPv6"},
		},
		{
			name: "only clusterIPs set (hand-written file)",
			svc:  service("default", "web", func(s *v1.Service) { s.Spec.ClusterIP = "" }),
			want: []string{"default/web:http/TCP/IPv4"},
		},
		{
			name: "unparsable ClusterIP",
			svc:  service("default", "web", func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0", []string{"10.96.0"} }),
		},
		{
			name: "ports ordered by name then protocol; unnamed port first; empty protocol is TCP",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.Ports = []v1.ServicePort{
					{Name: "dns", Port: 53, Protocol: v1.ProtocolSCTP},
					{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
					{Name: "dns", Port: 53, Protocol: v1.ProtocolTCP},
					{Name: "", Port: 80},
				}
			}),
			want: []string{"default/web/TCP/IPv4", "default/web:dns/TCP/IPv4", "default/web:dns/UDP/IPv4", "default/web:dns/SCTP/IPv4"},
		},
		{
			name: "ports with an unknown protocol or an invalid number are dropped",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.Ports = []v1.ServicePort{
					{Name: "a", Port: 80, Protocol: "ICMP"},
					{Name: "b", Port: 0},
					{Name: "c", Port: 65536},
					{Name: "d", Port: 65535},
				}
			}),
			want: []string{"default/web:d/TCP/IPv4"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Build(Input{NodeName: testNode, Services: []*v1.Service{tt.svc}, Families: tt.families})
			equal(t, "ports", keys(m), tt.want)
		})
	}
}

func TestBuildServicePortFields(t *testing.T) {
	lb := func(ips ...string) func(*v1.Service) {
		return func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			for _, ip := range ips {
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
			}
		}
	}
	etpLocal := func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }
	// want returns the expected port for service("default", "web") on the
	// given family, modified by m.
	want := func(f v1.IPFamily, m func(*ServicePort)) ServicePort {
		sp := ServicePort{
			ServicePort: abi.ServicePort{Namespace: "default", Name: "web", PortName: "http", Protocol: abi.ProtocolTCP, Port: 80},
			Family:      f,
			ClusterIP:   netip.MustParseAddr("10.96.0.10"),
		}
		if f == v1.IPv6Protocol {
			sp.IPv6 = true
			sp.ClusterIP = netip.MustParseAddr("fd00:96::10")
		}
		if m != nil {
			m(&sp)
		}
		return sp
	}
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}

	tests := []struct {
		name   string
		svc    *v1.Service
		family v1.IPFamily // IPv4 when empty
		want   ServicePort
	}{
		{
			name: "plain ClusterIP",
			svc:  service("default", "web"),
			want: want(v1.IPv4Protocol, nil),
		},
		{
			name:   "dual-stack, IPv6 half",
			svc:    service("default", "web", dualStack),
			family: v1.IPv6Protocol,
			want:   want(v1.IPv6Protocol, nil),
		},
		{
			name: "externalIPs filtered to the family, invalid dropped, mapped IPv4 unmapped",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{"203.0.113.1", "2001:db8::1", "bogus", "::ffff:203.0.113.2"}
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) {
				sp.ExternalIPs = addrs("203.0.113.1", "203.0.113.2")
				sp.ExternallyAccessible = true
			}),
		},
		{
			name: "externalIPs of the other family only: not externally accessible",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{"2001:db8::1"}
			}),
			want: want(v1.IPv4Protocol, nil),
		},
		{
			name: "ClusterIP Service with externalIPs and eTP=Local uses Cluster external policy",
			svc: service("default", "web", etpLocal, func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{"203.0.113.1"}
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) {
				sp.ExternalIPs = addrs("203.0.113.1")
				sp.ExternallyAccessible = true
			}),
		},
		{
			name: "NodePort with eTP=Local: local external policy, no health-check node port",
			svc: service("default", "web", etpLocal, func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.HealthCheckNodePort = 32000 // the apiserver would not set it; ignored
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) {
				sp.NodePort = 30080
				sp.ExternalPolicyLocal = true
				sp.ExternallyAccessible = true
			}),
		},
		{
			name: "NodePort with eTP=Cluster",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
				s.Spec.Ports[0].NodePort = 30080
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) {
				sp.NodePort = 30080
				sp.ExternallyAccessible = true
			}),
		},
		{
			name: "LoadBalancer eTP=Local: health-check node port",
			svc: service("default", "web", lb("198.51.100.200"), etpLocal, func(s *v1.Service) {
				s.Spec.HealthCheckNodePort = 32000
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) {
				sp.NodePort = 30080
				sp.LoadBalancerVIPs = addrs("198.51.100.200")
				sp.ExternalPolicyLocal = true
				sp.ExternallyAccessible = true
				sp.HealthCheckNodePort = 32000
			}),
		},
		{
			name: "LoadBalancer eTP=Cluster: no health-check node port",
			svc: service("default", "web", lb("198.51.100.200"), func(s *v1.Service) {
				s.Spec.HealthCheckNodePort = 32000
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) {
				sp.NodePort = 30080
				sp.LoadBalancerVIPs = addrs("198.51.100.200")
				sp.ExternallyAccessible = true
			}),
		},
		{
			name: "LoadBalancer without NodePort and without VIPs is not externally accessible",
			svc: service("default", "web", lb(), func(s *v1.Service) {
				s.Spec.Ports[0].NodePort = 0
			}),
			want: want(v1.IPv4Protocol, nil),
		},
		{
			name: "LB ingress: ipMode nil and VIP kept, Proxy dropped, hostname-only and other family dropped",
			svc: service("default", "web", lb(), func(s *v1.Service) {
				s.Spec.Ports[0].NodePort = 0
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{
					{IP: "198.51.100.201"},
					{IP: "198.51.100.202", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
					{IP: "198.51.100.203", IPMode: ptr(v1.LoadBalancerIPModeProxy)},
					{Hostname: "lb.example.com"},
					{IP: "2001:db8::200"},
				}
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) {
				sp.LoadBalancerVIPs = addrs("198.51.100.201", "198.51.100.202")
				sp.ExternallyAccessible = true
			}),
		},
		{
			name: "LB VIPs of IPv6",
			svc: service("default", "web", dualStack, lb(), func(s *v1.Service) {
				s.Spec.Ports[0].NodePort = 0
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.201"}, {IP: "2001:db8::200"}}
			}),
			family: v1.IPv6Protocol,
			want: want(v1.IPv6Protocol, func(sp *ServicePort) {
				sp.LoadBalancerVIPs = addrs("2001:db8::200")
				sp.ExternallyAccessible = true
			}),
		},
		{
			name: "source ranges: trimmed, masked, family filtered, invalid dropped",
			svc: service("default", "web", lb("198.51.100.200"), func(s *v1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{" 203.0.113.0/24", "198.51.100.7/24\t", "2001:db8::/32", "nonsense", "10.0.0.0/33", "  "}
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) {
				sp.NodePort = 30080
				sp.LoadBalancerVIPs = addrs("198.51.100.200")
				sp.ExternallyAccessible = true
				sp.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.0/24")}
			}),
		},
		{
			name: "source ranges of IPv6",
			svc: service("default", "web", dualStack, func(s *v1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24", " 2001:db8::/32 "}
			}),
			family: v1.IPv6Protocol,
			want: want(v1.IPv6Protocol, func(sp *ServicePort) {
				sp.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}
			}),
		},
		{
			name: "ClientIP affinity without config defaults to 10800 s",
			svc:  service("default", "web", func(s *v1.Service) { s.Spec.SessionAffinity = v1.ServiceAffinityClientIP }),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) { sp.SessionAffinityTimeout = 10800 }),
		},
		{
			name: "ClientIP affinity with config but no timeout defaults to 10800 s",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{}}
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) { sp.SessionAffinityTimeout = 10800 }),
		},
		{
			name: "ClientIP affinity with a timeout",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}}
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) { sp.SessionAffinityTimeout = 60 }),
		},
		{
			name: "affinity None ignores a config",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityNone
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}}
			}),
			want: want(v1.IPv4Protocol, nil),
		},
		{
			name: "iTP=Local",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) { sp.InternalPolicyLocal = true }),
		},
		{
			name: "iTP=Cluster",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyCluster)
			}),
			want: want(v1.IPv4Protocol, nil),
		},
		{
			name: "annotations sorted, last-applied-configuration left out",
			svc: service("default", "web", func(s *v1.Service) {
				s.Annotations = map[string]string{
					"zeta":                         "z",
					"alpha":                        "a",
					v1.LastAppliedConfigAnnotation: "{...}",
					"wasp.io/weight":               "3",
				}
			}),
			want: want(v1.IPv4Protocol, func(sp *ServicePort) {
				sp.Annotations = []abi.Label{{Key: "alpha", Value: "a"}, {Key: "wasp.io/weight", Value: "3"}, {Key: "zeta", Value: "z"}}
			}),
		},
		{
			name: "only last-applied-configuration: no annotations",
			svc: service("default", "web", func(s *v1.Service) {
				s.Annotations = map[string]string{v1.LastAppliedConfigAnnotation: "{...}"}
			}),
			want: want(v1.IPv4Protocol, nil),
		},
		{
			name: "sloppy ClusterIP with leading zeros",
			svc: service("default", "web", func(s *v1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "010.096.000.010", []string{"010.096.000.010"}
			}),
			want: want(v1.IPv4Protocol, nil),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.family
			if f == "" {
				f = v1.IPv4Protocol
			}
			m := Build(Input{NodeName: testNode, Services: []*v1.Service{tt.svc}, Families: []v1.IPFamily{f}})
			if len(m.Ports) != 1 {
				t.Fatalf("got %d ports %v, want 1", len(m.Ports), keys(m))
			}
			equal(t, "port", m.Ports[0], tt.want)
		})
	}
}

func TestBuildDuplicatePortNameLastWins(t *testing.T) {
	// The apiserver rejects this; upstream's ServicePortMap keeps the last.
	svc := service("default", "web", func(s *v1.Service) {
		s.Spec.Ports = []v1.ServicePort{{Name: "http", Port: 80}, {Name: "http", Port: 81}}
	})
	m := Build(Input{NodeName: testNode, Services: []*v1.Service{svc}})
	equal(t, "ports", keys(m), []string{"default/web:http/TCP/IPv4"})
	equal(t, "port number", m.Ports[0].Port, uint16(81))
}

func TestBuildPortsDoNotShareSlices(t *testing.T) {
	svc := service("default", "web", func(s *v1.Service) {
		s.Spec.ExternalIPs = []string{"203.0.113.1"}
		s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: "https", Port: 443})
	})
	m := Build(Input{NodeName: testNode, Services: []*v1.Service{svc}})
	m.Ports[0].ExternalIPs[0] = netip.MustParseAddr("203.0.113.99")
	equal(t, "second port's external IP", m.Ports[1].ExternalIPs[0], netip.MustParseAddr("203.0.113.1"))
}

func TestKeyString(t *testing.T) {
	tests := []struct {
		name string
		key  Key
		want string
	}{
		{"named port", Key{"default", "web", "http", abi.ProtocolTCP, v1.IPv4Protocol}, "default/web:http/TCP/IPv4"},
		{"unnamed port", Key{"kube-system", "dns", "", abi.ProtocolUDP, v1.IPv6Protocol}, "kube-system/dns/UDP/IPv6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			equal(t, "String", tt.key.String(), tt.want)
		})
	}
}
