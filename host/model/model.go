package model

import (
	"cmp"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/wasp-proxy/wasp/abi"
)

// Labels that decide which objects a proxy handles.
const (
	// LabelServiceProxyName, with any value, hands a Service to another
	// proxy implementation: kube-proxy (and wasp) ignore it.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless marks the EndpointSlices of a headless Service.
	LabelHeadless = v1.IsHeadlessService
	// LabelServiceName names the Service an EndpointSlice belongs to.
	LabelServiceName = discoveryv1.LabelServiceName

	// LabelSelector is the label selector for the Service and EndpointSlice
	// informers. Upstream kube-proxy applies this one selector to both
	// kinds, so Build skips an object of either kind carrying either label.
	LabelSelector = "!" + LabelServiceProxyName + ",!" + LabelHeadless
)

// Input is what Build needs.
type Input struct {
	NodeName       string                       // required: this proxy's node; "" makes no endpoint local
	Node           *v1.Node                     // optional: the Node object, for its labels; nil means no labels
	Services       []*v1.Service                // optional
	EndpointSlices []*discoveryv1.EndpointSlice // optional
	Families       []v1.IPFamily                // optional: the families to build; nil means IPv4 and IPv6
}

// Model is one node's view of every service port.
type Model struct {
	Node  abi.Node
	Ports []ServicePort // sorted by Key (see Key.Compare)
}

// ServicePort is one service port on this node for one IP family.
type ServicePort struct {
	abi.ServicePort // what modules see

	Family                   v1.IPFamily
	ClusterIP                netip.Addr
	ExternalIPs              []netip.Addr   // of Family, in spec order; nil when none
	LoadBalancerVIPs         []netip.Addr   // VIP-mode ingress IPs of Family; nil when none
	LoadBalancerSourceRanges []netip.Prefix // masked, of Family; nil when none
	SessionAffinityTimeout   int32          // seconds; 0 = no ClientIP affinity
	HealthCheckNodePort      int32          // 0 = none
}

// Key identifies the service port.
func (sp *ServicePort) Key() Key {
	return Key{
		Namespace: sp.Namespace,
		Name:      sp.Name,
		PortName:  sp.PortName,
		Protocol:  sp.Protocol,
		Family:    sp.Family,
	}
}

// String returns the key's string, e.g. "default/web:http/TCP/IPv4".
func (sp *ServicePort) String() string {
	k := sp.Key()
	return k.String()
}

// Key identifies a service port of one family: upstream's ServicePortName
// (namespace, name, port name, protocol) plus the IP family.
type Key struct {
	Namespace string
	Name      string
	PortName  string // "" for the unnamed port
	Protocol  abi.Protocol
	Family    v1.IPFamily
}

// String formats the key as "namespace/name:portname/PROTOCOL/FAMILY", e.g.
// "default/web:http/TCP/IPv4". Like upstream's ServicePortName, the
// ":portname" part is left out for the unnamed port: "default/web/UDP/IPv6".
// The family is always present, so the two halves of a dual-stack Service
// never print alike.
func (k Key) String() string {
	s := k.Namespace + "/" + k.Name
	if k.PortName != "" {
		s += ":" + k.PortName
	}
	return s + "/" + k.Protocol.String() + "/" + string(k.Family)
}

// Compare orders keys by namespace, name, port name, protocol (TCP, UDP,
// SCTP) and family (IPv4 first). It returns -1, 0 or +1.
func (k Key) Compare(o Key) int {
	return cmp.Or(
		cmp.Compare(k.Namespace, o.Namespace),
		cmp.Compare(k.Name, o.Name),
		cmp.Compare(k.PortName, o.PortName),
		cmp.Compare(k.Protocol, o.Protocol),
		cmp.Compare(familyRank(k.Family), familyRank(o.Family)),
	)
}

// Build computes the model. It never fails: objects kube-proxy would ignore
// are ignored.
func Build(in Input) *Model {
	m := &Model{Node: abi.Node{Name: in.NodeName}}
	if in.Node != nil {
		m.Node.Labels = sortedLabels(in.Node.Labels, nil)
	}

	families := normalizeFamilies(in.Families)
	endpoints := buildEndpoints(in.EndpointSlices, in.NodeName, families)

	// A map keyed by Key so that a Service listing the same (name,
	// protocol) twice yields one port, the last one, as upstream's
	// ServicePortMap does.
	ports := map[Key]ServicePort{}
	for _, svc := range in.Services {
		for _, f := range families {
			for _, sp := range servicePorts(svc, f) {
				sp.Endpoints = endpoints.list(sp.Key())
				ports[sp.Key()] = sp
			}
		}
	}
	if len(ports) > 0 {
		m.Ports = make([]ServicePort, 0, len(ports))
		for _, sp := range ports {
			m.Ports = append(m.Ports, sp)
		}
		slices.SortFunc(m.Ports, func(a, b ServicePort) int { return a.Key().Compare(b.Key()) })
	}
	return m
}

// normalizeFamilies returns the known families of fs, IPv4 first, without
// duplicates; both when fs is empty.
func normalizeFamilies(fs []v1.IPFamily) []v1.IPFamily {
	if len(fs) == 0 {
		return []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	}
	var out []v1.IPFamily
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if slices.Contains(fs, f) {
			out = append(out, f)
		}
	}
	return out
}

func familyRank(f v1.IPFamily) int {
	switch f {
	case v1.IPv4Protocol:
		return 0
	case v1.IPv6Protocol:
		return 1
	}
	return 2
}

// sortedLabels converts a label or annotation map to a list sorted by key,
// leaving out the keys in skip. It returns nil for an empty result.
func sortedLabels(m map[string]string, skip []string) []abi.Label {
	var out []abi.Label
	for k, v := range m {
		if slices.Contains(skip, k) {
			continue
		}
		out = append(out, abi.Label{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b abi.Label) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// hasFilteredLabel reports whether an object's labels exclude it from this
// proxy (see LabelSelector).
func hasFilteredLabel(labels map[string]string) bool {
	_, proxyName := labels[LabelServiceProxyName]
	_, headless := labels[LabelHeadless]
	return proxyName || headless
}

// protocol maps a Kubernetes protocol to the ABI's. An empty protocol is
// TCP, the apiserver's default (files given to wasp explain are not
// defaulted). ok is false for a protocol the ABI does not know.
func protocol(p v1.Protocol) (proto abi.Protocol, ok bool) {
	switch p {
	case v1.ProtocolTCP, "":
		return abi.ProtocolTCP, true
	case v1.ProtocolUDP:
		return abi.ProtocolUDP, true
	case v1.ProtocolSCTP:
		return abi.ProtocolSCTP, true
	}
	return 0, false
}
