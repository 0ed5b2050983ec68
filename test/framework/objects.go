//go:build linux

package framework

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// EchoPort is the port every pod's echo servers listen on.
const EchoPort = 8080

// ManagedBy marks the EndpointSlices the tests write, standing in for the
// endpointslice controller.
const ManagedBy = "e2e.wasp.dev"

// Namespace creates a Kubernetes namespace for one scenario.
func (e *Env) Namespace(ctx context.Context, t testing.TB, name string) string {
	t.Helper()
	_, err := e.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// ServiceSpec is a compact Service description.
type ServiceSpec struct {
	Name, Namespace string
	Type            v1.ServiceType // default ClusterIP
	Protocol        v1.Protocol    // default TCP
	Port            int32          // default 80
	DualStack       bool           // RequireDualStack, IPv4 first
	IPv6Only        bool
	ExternalIPs     []string
	SourceRanges    []string
	Affinity        int32 // ClientIP timeout seconds; 0 = none
	InternalLocal   bool
	ExternalLocal   bool
	Distribution    string // spec.trafficDistribution
	Annotations     map[string]string
}

// CreateService creates the Service and returns it as stored, with its
// ClusterIPs and allocated node ports.
func (e *Env) CreateService(ctx context.Context, t testing.TB, s ServiceSpec) *v1.Service {
	t.Helper()
	created, err := e.Client.CoreV1().Services(s.Namespace).Create(ctx, s.Object(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s/%s: %v", s.Namespace, s.Name, err)
	}
	return created
}

// Object returns the Service s describes, defaults filled in, for tests
// that create Services in bulk with a client of their own.
func (s ServiceSpec) Object() *v1.Service {
	if s.Type == "" {
		s.Type = v1.ServiceTypeClusterIP
	}
	if s.Protocol == "" {
		s.Protocol = v1.ProtocolTCP
	}
	if s.Port == 0 {
		s.Port = 80
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Annotations: s.Annotations},
		Spec: v1.ServiceSpec{
			Type: s.Type,
			Ports: []v1.ServicePort{{
				Name: "echo", Protocol: s.Protocol, Port: s.Port, TargetPort: intstr.FromInt32(EchoPort),
			}},
			ExternalIPs:              s.ExternalIPs,
			LoadBalancerSourceRanges: s.SourceRanges,
		},
	}
	switch {
	case s.DualStack:
		svc.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
		svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	case s.IPv6Only:
		svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
	}
	if s.Affinity > 0 {
		svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(s.Affinity)}}
	}
	if s.InternalLocal {
		svc.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
	}
	if s.ExternalLocal {
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}
	if s.Distribution != "" {
		svc.Spec.TrafficDistribution = ptr.To(s.Distribution)
	}
	return svc
}

// SetLoadBalancerIP publishes a VIP-mode load-balancer ingress IP.
func (e *Env) SetLoadBalancerIP(ctx context.Context, t testing.TB, svc *v1.Service, ips ...string) *v1.Service {
	t.Helper()
	cur, err := e.Client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.LoadBalancer.Ingress = nil
	for _, ip := range ips {
		cur.Status.LoadBalancer.Ingress = append(cur.Status.LoadBalancer.Ingress,
			v1.LoadBalancerIngress{IP: ip, IPMode: ptr.To(v1.LoadBalancerIPModeVIP)})
	}
	out, err := e.Client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("service %s/%s status: %v", svc.Namespace, svc.Name, err)
	}
	return out
}

// Endpoint describes one endpoint, a pod of the lab.
type Endpoint struct {
	Pod         string
	NotReady    bool // ready=false
	Terminating bool // terminating=true
	NotServing  bool // serving=false (default: serving = ready || terminating)
	ZoneHints   []string
	NodeHints   []string
}

// Ready is a ready endpoint for each pod.
func Ready(pods ...string) []Endpoint {
	out := make([]Endpoint, len(pods))
	for i, p := range pods {
		out[i] = Endpoint{Pod: p}
	}
	return out
}

// SetEndpoints creates or replaces the Service's EndpointSlice of family
// with eps.
func (e *Env) SetEndpoints(ctx context.Context, t testing.TB, svc *v1.Service, family v1.IPFamily, eps ...Endpoint) {
	t.Helper()
	slice, err := e.Slice(svc, family, eps...)
	if err != nil {
		t.Fatal(err)
	}
	api := e.Client.DiscoveryV1().EndpointSlices(svc.Namespace)
	cur, err := api.Get(ctx, slice.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, slice, metav1.CreateOptions{})
	case err == nil:
		slice.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, slice, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("endpointslice %s/%s: %v", svc.Namespace, slice.Name, err)
	}
}

// CreateEndpoints creates the EndpointSlice of family of a Service that has
// none yet, with eps: SetEndpoints in one API call instead of two, for
// measurements that time a new Service from its first API call.
func (e *Env) CreateEndpoints(ctx context.Context, t testing.TB, svc *v1.Service, family v1.IPFamily, eps ...Endpoint) {
	t.Helper()
	slice, err := e.Slice(svc, family, eps...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("endpointslice %s/%s: %v", svc.Namespace, slice.Name, err)
	}
}

// Slice returns the EndpointSlice SetEndpoints writes for the Service's
// family: named <service>-v4 or -v6, one port per Service port, to
// EchoPort, and eps at their pods' addresses, nodes and zones.
func (e *Env) Slice(svc *v1.Service, family v1.IPFamily, eps ...Endpoint) (*discoveryv1.EndpointSlice, error) {
	at := discoveryv1.AddressTypeIPv4
	if family == v1.IPv6Protocol {
		at = discoveryv1.AddressTypeIPv6
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%s", svc.Name, map[v1.IPFamily]string{v1.IPv4Protocol: "v4", v1.IPv6Protocol: "v6"}[family]),
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
		},
		AddressType: at,
	}
	for _, p := range svc.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{
			Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(int32(EchoPort)),
		})
	}
	for _, ep := range eps {
		pod := e.Cluster.Pod(ep.Pod)
		if pod == nil {
			return nil, fmt.Errorf("endpointslice of %s/%s: no pod %q in the lab", svc.Namespace, svc.Name, ep.Pod)
		}
		addr := pod.IPv4
		if family == v1.IPv6Protocol {
			addr = pod.IPv6
		}
		zone := ZoneA
		if pod.Node.Name == OtherNode {
			zone = ZoneB
		}
		d := discoveryv1.Endpoint{
			Addresses: []string{addr.String()},
			Conditions: discoveryv1.EndpointConditions{
				Ready:       ptr.To(!ep.NotReady),
				Serving:     ptr.To(!ep.NotServing && (!ep.NotReady || ep.Terminating)),
				Terminating: ptr.To(ep.Terminating),
			},
			NodeName:  ptr.To(pod.Node.Name),
			Zone:      ptr.To(zone),
			TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: ep.Pod},
		}
		if len(ep.ZoneHints) > 0 || len(ep.NodeHints) > 0 {
			d.Hints = &discoveryv1.EndpointHints{}
			for _, z := range ep.ZoneHints {
				d.Hints.ForZones = append(d.Hints.ForZones, discoveryv1.ForZone{Name: z})
			}
			for _, n := range ep.NodeHints {
				d.Hints.ForNodes = append(d.Hints.ForNodes, discoveryv1.ForNode{Name: n})
			}
		}
		slice.Endpoints = append(slice.Endpoints, d)
	}
	return slice, nil
}

// ClusterIP returns the Service's ClusterIP of family.
func ClusterIP(t testing.TB, svc *v1.Service, family v1.IPFamily) netip.Addr {
	t.Helper()
	for _, s := range svc.Spec.ClusterIPs {
		a, err := netip.ParseAddr(s)
		if err == nil && (a.Is4() == (family == v1.IPv4Protocol)) {
			return a
		}
	}
	t.Fatalf("service %s/%s has no %s ClusterIP (%v)", svc.Namespace, svc.Name, family, svc.Spec.ClusterIPs)
	return netip.Addr{}
}

// NodePort returns the Service's first node port.
func NodePort(t testing.TB, svc *v1.Service) uint16 {
	t.Helper()
	if len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("service %s/%s has no node port", svc.Namespace, svc.Name)
	}
	return uint16(svc.Spec.Ports[0].NodePort)
}
