package model

import (
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/wasp-proxy/wasp/abi"
)

// skippedAnnotations are Service annotations never shown to modules: the
// last-applied configuration is a copy of the whole object, large and of no
// use to a stage.
var skippedAnnotations = []string{v1.LastAppliedConfigAnnotation}

// servicePorts returns the service ports of svc for family f, or nil when
// kube-proxy would not proxy svc for f. Endpoints are left nil.
func servicePorts(svc *v1.Service, f v1.IPFamily) []ServicePort {
	if svc == nil || hasFilteredLabel(svc.Labels) || shouldSkipService(svc) {
		return nil
	}
	clusterIP, ok := clusterIPForFamily(svc, f)
	if !ok {
		return nil
	}

	// Fields shared by every port of the Service.
	base := ServicePort{
		ServicePort: abi.ServicePort{
			Namespace:           svc.Namespace,
			Name:                svc.Name,
			IPv6:                f == v1.IPv6Protocol,
			InternalPolicyLocal: internalPolicyLocal(svc),
			ExternalPolicyLocal: externalPolicyLocal(svc),
			Annotations:         sortedLabels(svc.Annotations, skippedAnnotations),
		},
		Family:                   f,
		ClusterIP:                clusterIP,
		ExternalIPs:              externalIPs(svc, f),
		LoadBalancerVIPs:         loadBalancerVIPs(svc, f),
		LoadBalancerSourceRanges: sourceRanges(svc, f),
		SessionAffinityTimeout:   sessionAffinityTimeout(svc),
	}
	if needsHealthCheck(svc) {
		base.HealthCheckNodePort = svc.Spec.HealthCheckNodePort
	}

	var out []ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		proto, ok := protocol(p.Protocol)
		if !ok || p.Port <= 0 || p.Port > 65535 {
			// The apiserver rejects these; kube-proxy has no rules for them.
			continue
		}
		sp := base
		sp.ExternalIPs = slices.Clone(base.ExternalIPs) // each port owns its slices
		sp.LoadBalancerVIPs = slices.Clone(base.LoadBalancerVIPs)
		sp.LoadBalancerSourceRanges = slices.Clone(base.LoadBalancerSourceRanges)
		sp.Annotations = slices.Clone(base.Annotations)
		sp.PortName = p.Name
		sp.Protocol = proto
		sp.Port = uint16(p.Port)
		if p.NodePort > 0 && p.NodePort <= 65535 {
			sp.NodePort = uint16(p.NodePort)
		}
		sp.ExternallyAccessible = sp.NodePort != 0 || len(sp.LoadBalancerVIPs) > 0 || len(sp.ExternalIPs) > 0
		out = append(out, sp)
	}
	return out
}

// shouldSkipService is upstream's ShouldSkipService: headless ("" or
// "None" ClusterIP) and ExternalName Services are not proxied.
func shouldSkipService(svc *v1.Service) bool {
	ip := primaryClusterIP(svc)
	return ip == "" || ip == v1.ClusterIPNone || svc.Spec.Type == v1.ServiceTypeExternalName
}

// primaryClusterIP is spec.clusterIP, or spec.clusterIPs[0] when only the
// list is set. The apiserver always sets both alike; a hand-written file
// given to wasp explain may set only one.
func primaryClusterIP(svc *v1.Service) string {
	if svc.Spec.ClusterIP != "" {
		return svc.Spec.ClusterIP
	}
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs[0]
	}
	return ""
}

// clusterIPForFamily is upstream's GetClusterIPByFamily. With
// spec.ipFamilies set, the ClusterIP is the spec.clusterIPs entry at the
// family's index. Without it (objects from before dual-stack, or files),
// upstream looks only at spec.clusterIP; we look at spec.clusterIPs, or
// spec.clusterIP when that is empty, and take the first of the family,
// which is the same for objects the apiserver stored.
func clusterIPForFamily(svc *v1.Service, f v1.IPFamily) (netip.Addr, bool) {
	var candidates []string
	if len(svc.Spec.IPFamilies) > 0 {
		for i, fam := range svc.Spec.IPFamilies {
			if fam == f && i < len(svc.Spec.ClusterIPs) {
				candidates = []string{svc.Spec.ClusterIPs[i]}
				break
			}
		}
	} else if len(svc.Spec.ClusterIPs) > 0 {
		candidates = svc.Spec.ClusterIPs
	} else {
		candidates = []string{svc.Spec.ClusterIP}
	}
	for _, c := range candidates {
		if a, ok := parseIP(c); ok && familyOf(a) == f {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// externalIPs returns spec.externalIPs of family f; invalid ones are
// dropped, as upstream's MapIPsByIPFamily does.
func externalIPs(svc *v1.Service, f v1.IPFamily) []netip.Addr {
	var out []netip.Addr
	for _, s := range svc.Spec.ExternalIPs {
		if a, ok := parseIP(s); ok && familyOf(a) == f {
			out = append(out, a)
		}
	}
	return out
}

// loadBalancerVIPs returns the status.loadBalancer.ingress IPs of family f
// in VIP mode (ipMode nil or VIP). Proxy-mode ingresses are left to the
// load balancer, and hostname-only ingresses have nothing to program.
func loadBalancerVIPs(svc *v1.Service, f v1.IPFamily) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" || (ing.IPMode != nil && *ing.IPMode != v1.LoadBalancerIPModeVIP) {
			continue
		}
		if a, ok := parseIP(ing.IP); ok && familyOf(a) == f {
			out = append(out, a)
		}
	}
	return out
}

// sourceRanges returns spec.loadBalancerSourceRanges of family f.
// Whitespace is trimmed first: apiserver validation lets padding through.
// Invalid ranges are dropped; a range's family is its prefix's.
func sourceRanges(svc *v1.Service, f v1.IPFamily) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range svc.Spec.LoadBalancerSourceRanges {
		if p, ok := parsePrefix(strings.TrimSpace(s)); ok && familyOf(p.Addr()) == f {
			out = append(out, p)
		}
	}
	return out
}

// sessionAffinityTimeout returns the ClientIP affinity timeout in seconds,
// 0 without ClientIP affinity. The apiserver defaults an unset timeout to
// 10800 s; files given to wasp explain are not defaulted, so we do it here.
func sessionAffinityTimeout(svc *v1.Service) int32 {
	if svc.Spec.SessionAffinity != v1.ServiceAffinityClientIP {
		return 0
	}
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		return *c.ClientIP.TimeoutSeconds
	}
	return v1.DefaultClientIPServiceAffinitySeconds
}

// externalPolicyLocal: eTP=Local only counts for NodePort and LoadBalancer
// Services, so a ClusterIP Service with externalIPs uses Cluster policy.
func externalPolicyLocal(svc *v1.Service) bool {
	t := svc.Spec.Type
	if t != v1.ServiceTypeNodePort && t != v1.ServiceTypeLoadBalancer {
		return false
	}
	return svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
}

// internalPolicyLocal: iTP is set and Local.
func internalPolicyLocal(svc *v1.Service) bool {
	p := svc.Spec.InternalTrafficPolicy
	return p != nil && *p == v1.ServiceInternalTrafficPolicyLocal
}

// needsHealthCheck: a LoadBalancer Service with eTP=Local has a health-check
// node port.
func needsHealthCheck(svc *v1.Service) bool {
	return svc.Spec.Type == v1.ServiceTypeLoadBalancer && externalPolicyLocal(svc)
}
