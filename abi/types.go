package abi

import (
	"net/netip"
)

// Version is the ABI version this package implements.
const Version = 1

// MarkerExport is the function a module exports to declare that it speaks
// ABI v1. It is never called; the host looks for it before instantiation.
const MarkerExport = "wasp_abi_v1"

// BufferExport returns a guest-owned input buffer of at least the requested
// size: wasp_buffer(size i32) -> ptr i32 (0 when the guest cannot allocate).
const BufferExport = "wasp_buffer"

// ConfigureExport is the optional function that hands a module its own
// configuration: wasp_configure(ptr i32, len i32) -> i64. The host calls it
// on every new instance, after initialisation and before the first stage
// call, with the configuration's JSON bytes in a buffer from wasp_buffer
// (len 0: no configuration). 0 accepts the configuration; otherwise the
// result is outPtr<<32 | outLen of a UTF-8 message saying why the module
// rejects it.
const ConfigureExport = "wasp_configure"

// MaxConfigLen bounds the configuration the host hands a module.
const MaxConfigLen = 1 << 20

// MaxConfigErrorLen bounds the rejection message the host reads back from
// wasp_configure; a longer one is truncated.
const MaxConfigErrorLen = 4096

// MaxModuleSize bounds a module's binary, wherever it comes from: a
// file, a registry, an archive. A larger one is refused as it is read,
// before it is compiled; it is also the largest module the host's
// compile limits accept by default.
const MaxModuleSize = 32 << 20

// MetadataSection is the name of the custom section that carries a module's
// Metadata as JSON.
const MetadataSection = "wasp.metadata"

// Stage is one step of the per-service-port pipeline. Stages run in the
// order topology, traffic-policy, endpoint-selection.
type Stage uint8

const (
	// StageTopology decides which endpoints are eligible for cluster
	// traffic on this node (topology hints, PreferSameZone, PreferSameNode).
	StageTopology Stage = 1
	// StageTrafficPolicy computes the cluster, local and all-reachable
	// endpoint sets from internal and external traffic policy, with the
	// per-policy terminating fallback.
	StageTrafficPolicy Stage = 2
	// StageEndpointSelection gives a weight to each chosen endpoint.
	StageEndpointSelection Stage = 3
)

// Stages lists every stage in pipeline order.
var Stages = [...]Stage{StageTopology, StageTrafficPolicy, StageEndpointSelection}

// String returns the stage name used in metadata, config and logs.
func (s Stage) String() string {
	switch s {
	case StageTopology:
		return "topology"
	case StageTrafficPolicy:
		return "traffic-policy"
	case StageEndpointSelection:
		return "endpoint-selection"
	}
	return "unknown"
}

// Export returns the name of the function a module exports for the stage:
// fn(ptr i32, len i32) -> i64, the result packing (outPtr<<32 | outLen).
func (s Stage) Export() string {
	switch s {
	case StageTopology:
		return "wasp_topology"
	case StageTrafficPolicy:
		return "wasp_traffic_policy"
	case StageEndpointSelection:
		return "wasp_endpoint_selection"
	}
	return ""
}

// ParseStage returns the stage with the given name.
func ParseStage(name string) (Stage, bool) {
	for _, s := range Stages {
		if s.String() == name {
			return s, true
		}
	}
	return 0, false
}

// Protocol is a service port's L4 protocol.
type Protocol uint8

const (
	ProtocolTCP  Protocol = 1
	ProtocolUDP  Protocol = 2
	ProtocolSCTP Protocol = 3
)

// String returns the Kubernetes spelling of the protocol.
func (p Protocol) String() string {
	switch p {
	case ProtocolTCP:
		return "TCP"
	case ProtocolUDP:
		return "UDP"
	case ProtocolSCTP:
		return "SCTP"
	}
	return "unknown"
}

// TopologyMode is the topology stage's verdict for a service port.
type TopologyMode uint8

const (
	// TopologyNone: hints are not used; every endpoint is eligible.
	TopologyNone TopologyMode = 0
	// TopologyPreferSameZone: endpoints hinted for the node's zone.
	TopologyPreferSameZone TopologyMode = 1
	// TopologyPreferSameNode: endpoints hinted for the node.
	TopologyPreferSameNode TopologyMode = 2
)

// String returns the upstream spelling of the mode ("" for none).
func (m TopologyMode) String() string {
	switch m {
	case TopologyPreferSameZone:
		return "PreferSameZone"
	case TopologyPreferSameNode:
		return "PreferSameNode"
	}
	return ""
}

// Well-known node label keys modules read through Node.
const (
	LabelTopologyZone   = "topology.kubernetes.io/zone"
	LabelTopologyRegion = "topology.kubernetes.io/region"
)

// MaxWeight is the largest weight the endpoint-selection stage may assign.
const MaxWeight = 65535

// Label is a key/value pair (node label, service annotation).
// Lists of labels are sorted by Key with unique keys.
type Label struct {
	Key, Value string
}

// Node is the node a batch is evaluated for.
type Node struct {
	Name   string
	Labels []Label // sorted by key
}

// Label returns the value of the label key and whether it is set.
func (n *Node) Label(key string) (string, bool) {
	for _, l := range n.Labels {
		if l.Key == key {
			return l.Value, true
		}
	}
	return "", false
}

// Endpoint is one backend of a service port, after the host applied
// upstream's EndpointSlice rules (first address, nil-condition defaults,
// duplicate handling).
type Endpoint struct {
	Addr        netip.Addr // unmapped IPv4 or IPv6
	Port        uint16
	Ready       bool
	Serving     bool
	Terminating bool
	Local       bool // endpoint's nodeName is this node
	NodeName    string
	Zone        string
	ZoneHints   []string // nil when absent
	NodeHints   []string // nil when absent
}

// ServicePort is what a module sees of one service port.
type ServicePort struct {
	Namespace string
	Name      string
	PortName  string
	Protocol  Protocol
	IPv6      bool // the IP family this service port is evaluated for
	Port      uint16
	NodePort  uint16

	InternalPolicyLocal  bool // spec.internalTrafficPolicy == Local
	ExternalPolicyLocal  bool // NodePort/LoadBalancer with externalTrafficPolicy == Local
	ExternallyAccessible bool // nodePort, LB VIPs or externalIPs present

	Annotations []Label    // sorted by key
	Endpoints   []Endpoint // sorted by "ip:port" string, as upstream
}

// UsesClusterEndpoints reports whether cluster-policy endpoints are needed:
// internal policy Cluster, or any external access (eTP=Local short-circuit).
func (sp *ServicePort) UsesClusterEndpoints() bool {
	return !sp.InternalPolicyLocal || sp.ExternallyAccessible
}

// UsesLocalEndpoints reports whether local-policy endpoints are needed.
func (sp *ServicePort) UsesLocalEndpoints() bool {
	return sp.InternalPolicyLocal || (sp.ExternalPolicyLocal && sp.ExternallyAccessible)
}

// Indices is a set of endpoint indices, in ascending order. A nil Indices
// means the set is not used (upstream's nil slice); an empty non-nil one
// means it is used and has no member.
type Indices []uint32

// Weight is one endpoint chosen by the endpoint-selection stage.
type Weight struct {
	Index  uint32
	Weight uint32 // 1..MaxWeight
}

// Decision is what the stages decided for one service port so far. Each
// stage fills its own fields and sees the fields of the stages before it.
type Decision struct {
	// Topology stage.
	Mode     TopologyMode
	Eligible Indices // endpoints available for cluster traffic; nil before topology ran

	// Traffic-policy stage.
	Cluster         Indices
	Local           Indices
	All             Indices
	HasAnyEndpoints bool

	// Endpoint-selection stage.
	Weights []Weight // ascending by Index
}

// Batch is the input of one stage call: every changed service port of a sync.
type Batch struct {
	Stage     Stage
	Node      Node
	Ports     []ServicePort
	Decisions []Decision // parallel to Ports: what earlier stages decided
}

// Result is a stage's output for one service port.
type Result struct {
	// Err is non-empty when the module declined or failed this service port;
	// the host then keeps the port's last good result.
	Err string
	// Invalid is set when Err describes output the host rejected (an index
	// out of range, a duplicate, a weight out of range), rather than an
	// error the module reported.
	Invalid bool
	Decision
}
