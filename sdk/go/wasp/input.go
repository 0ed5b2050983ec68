package wasp

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"unsafe"

	"github.com/wasp-proxy/wasp/abi"
)

var le = binary.LittleEndian

// Header field offsets, mirrored from docs/abi.md.
const (
	hdrVersion        = 4
	hdrStage          = 6
	hdrTotalLen       = 8
	hdrPortCount      = 12
	hdrPortsOff       = 16
	hdrEndpointCount  = 20
	hdrEndpointsOff   = 24
	hdrPairCount      = 28
	hdrPairsOff       = 32
	hdrHintCount      = 36
	hdrHintsOff       = 40
	hdrDecisionsOff   = 44
	hdrIndexCount     = 48
	hdrIndicesOff     = 52
	hdrStringsOff     = 56
	hdrStringsLen     = 60
	hdrNodeName       = 64
	hdrNodeLabelFirst = 72
	hdrNodeLabelCount = 76

	portNamespace       = 0
	portName            = 8
	portPortName        = 16
	portProtocol        = 24
	portFlags           = 25
	portPort            = 26
	portNodePort        = 28
	portEndpointFirst   = 32
	portEndpointCount   = 36
	portAnnotationFirst = 40
	portAnnotationCount = 44

	epAddr          = 0
	epPort          = 16
	epFlags         = 18
	epNodeName      = 20
	epZone          = 28
	epHintFirst     = 36
	epZoneHintCount = 40
	epNodeHintCount = 42

	decMode     = 0
	decFlags    = 1
	decEligible = 4
	decCluster  = 12
	decLocal    = 20
	decAll      = 28
)

// batch is a parsed input header. Every table was checked to lie inside
// the buffer; element access relies on Go's bounds checks beyond that.
type batch struct {
	b                                                          []byte
	stage                                                      abi.Stage
	ports, endpoints, pairs, hints, decisions, indices         int
	portCount, endpointCount, pairCount, hintCount, indexCount uint32
	strings                                                    []byte
}

var errBadInput = errors.New("wasp: malformed input batch")

func (x *batch) parse(b []byte) error {
	if len(b) < abi.HeaderSize || le.Uint32(b) != abi.InputMagic ||
		le.Uint16(b[hdrVersion:]) != abi.Version || le.Uint32(b[hdrTotalLen:]) != uint32(len(b)) {
		return errBadInput
	}
	u := func(o int) uint32 { return le.Uint32(b[o:]) }
	in := func(off, count uint32, size uint64) bool {
		return uint64(off)+uint64(count)*size <= uint64(len(b))
	}
	*x = batch{
		b:             b,
		stage:         abi.Stage(b[hdrStage]),
		portCount:     u(hdrPortCount),
		endpointCount: u(hdrEndpointCount),
		pairCount:     u(hdrPairCount),
		hintCount:     u(hdrHintCount),
		indexCount:    u(hdrIndexCount),
	}
	if !in(u(hdrPortsOff), x.portCount, abi.PortSize) ||
		!in(u(hdrEndpointsOff), x.endpointCount, abi.EndpointSize) ||
		!in(u(hdrPairsOff), x.pairCount, abi.PairSize) ||
		!in(u(hdrHintsOff), x.hintCount, abi.StrRefSize) ||
		!in(u(hdrDecisionsOff), x.portCount, abi.DecisionSize) ||
		!in(u(hdrIndicesOff), x.indexCount, 4) ||
		!in(u(hdrStringsOff), u(hdrStringsLen), 1) {
		return errBadInput
	}
	x.ports, x.endpoints, x.pairs = int(u(hdrPortsOff)), int(u(hdrEndpointsOff)), int(u(hdrPairsOff))
	x.hints, x.decisions, x.indices = int(u(hdrHintsOff)), int(u(hdrDecisionsOff)), int(u(hdrIndicesOff))
	so := u(hdrStringsOff)
	x.strings = b[so : so+u(hdrStringsLen)]
	return nil
}

// str returns the string referenced at offset o, aliasing the batch.
func (x *batch) str(o int) string {
	off, n := le.Uint32(x.b[o:]), le.Uint32(x.b[o+4:])
	if n == 0 {
		return ""
	}
	s := x.strings[off : off+n]
	return unsafe.String(unsafe.SliceData(s), len(s))
}

// label looks key up in count pairs starting at pair index first; pairs are
// sorted by key.
func (x *batch) label(first, count uint32, key string) (string, bool) {
	lo, hi := 0, int(count)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		k := x.str(x.pairs + (int(first)+m)*abi.PairSize)
		switch {
		case k == key:
			return x.str(x.pairs + (int(first)+m)*abi.PairSize + 8), true
		case k < key:
			lo = m + 1
		default:
			hi = m
		}
	}
	return "", false
}

// Node is the node the batch is evaluated for.
type Node struct{ x *batch }

// Name returns the node's name.
func (n Node) Name() string { return n.x.str(hdrNodeName) }

// Label returns the value of the node label key and whether it is set.
func (n Node) Label(key string) (string, bool) {
	return n.x.label(le.Uint32(n.x.b[hdrNodeLabelFirst:]), le.Uint32(n.x.b[hdrNodeLabelCount:]), key)
}

// Zone returns the node's topology.kubernetes.io/zone label ("" if unset).
func (n Node) Zone() string {
	z, _ := n.Label(abi.LabelTopologyZone)
	return z
}

// ServicePort is one service port of the batch.
type ServicePort struct {
	x        *batch
	o        int // offset of the port record
	i        int // index of the port in the batch
	first, n int // the port's endpoints in the endpoint table
}

func (sp ServicePort) flag(f byte) bool { return sp.x.b[sp.o+portFlags]&f != 0 }

// Namespace returns the Service's namespace.
func (sp ServicePort) Namespace() string { return sp.x.str(sp.o + portNamespace) }

// Name returns the Service's name.
func (sp ServicePort) Name() string { return sp.x.str(sp.o + portName) }

// PortName returns the port's name ("" for an unnamed port).
func (sp ServicePort) PortName() string { return sp.x.str(sp.o + portPortName) }

// Protocol returns the port's protocol.
func (sp ServicePort) Protocol() abi.Protocol { return abi.Protocol(sp.x.b[sp.o+portProtocol]) }

// Port returns the service port number.
func (sp ServicePort) Port() uint16 { return le.Uint16(sp.x.b[sp.o+portPort:]) }

// NodePort returns the node port, 0 if none.
func (sp ServicePort) NodePort() uint16 { return le.Uint16(sp.x.b[sp.o+portNodePort:]) }

// IPv6 reports whether the port is evaluated for the IPv6 family.
func (sp ServicePort) IPv6() bool { return sp.flag(abi.PortFlagIPv6) }

// InternalPolicyLocal reports internalTrafficPolicy: Local.
func (sp ServicePort) InternalPolicyLocal() bool { return sp.flag(abi.PortFlagInternalPolicyLocal) }

// ExternalPolicyLocal reports externalTrafficPolicy: Local on a NodePort or
// LoadBalancer Service.
func (sp ServicePort) ExternalPolicyLocal() bool { return sp.flag(abi.PortFlagExternalPolicyLocal) }

// ExternallyAccessible reports a node port, load-balancer VIPs or external IPs.
func (sp ServicePort) ExternallyAccessible() bool { return sp.flag(abi.PortFlagExternallyAccessible) }

// UsesClusterEndpoints reports whether the port needs cluster-policy endpoints.
func (sp ServicePort) UsesClusterEndpoints() bool { return sp.flag(abi.PortFlagUsesCluster) }

// UsesLocalEndpoints reports whether the port needs local-policy endpoints.
func (sp ServicePort) UsesLocalEndpoints() bool { return sp.flag(abi.PortFlagUsesLocal) }

// Annotation returns the value of the Service annotation key.
func (sp ServicePort) Annotation(key string) (string, bool) {
	return sp.x.label(le.Uint32(sp.x.b[sp.o+portAnnotationFirst:]), le.Uint32(sp.x.b[sp.o+portAnnotationCount:]), key)
}

// Len returns the number of endpoints.
func (sp ServicePort) Len() int { return sp.n }

// Endpoint returns endpoint i, 0 <= i < Len().
func (sp ServicePort) Endpoint(i int) Endpoint {
	if uint(i) >= uint(sp.n) {
		panic(errEndpointRange)
	}
	return Endpoint{x: sp.x, o: sp.x.endpoints + (sp.first+i)*abi.EndpointSize, v6: sp.flag(abi.PortFlagIPv6)}
}

var errEndpointRange = errors.New("wasp: endpoint index out of range")

// Decision returns what the earlier stages decided for this port.
func (sp ServicePort) Decision() Decision {
	return Decision{x: sp.x, o: sp.x.decisions + sp.i*abi.DecisionSize, n: uint32(sp.n)}
}

// Endpoint is one endpoint of a service port.
type Endpoint struct {
	x  *batch
	o  int
	v6 bool
}

func (ep Endpoint) flag(f byte) bool { return ep.x.b[ep.o+epFlags]&f != 0 }

// Addr returns the endpoint's IP address.
func (ep Endpoint) Addr() netip.Addr {
	a := netip.AddrFrom16([16]byte(ep.x.b[ep.o+epAddr : ep.o+epAddr+16]))
	if !ep.v6 {
		a = a.Unmap()
	}
	return a
}

// Port returns the endpoint's port.
func (ep Endpoint) Port() uint16 { return le.Uint16(ep.x.b[ep.o+epPort:]) }

// Ready reports conditions.ready (nil counts as true).
func (ep Endpoint) Ready() bool { return ep.flag(abi.EndpointFlagReady) }

// Serving reports conditions.serving (nil counts as true).
func (ep Endpoint) Serving() bool { return ep.flag(abi.EndpointFlagServing) }

// Terminating reports conditions.terminating (nil counts as false).
func (ep Endpoint) Terminating() bool { return ep.flag(abi.EndpointFlagTerminating) }

// Local reports whether the endpoint runs on this node.
func (ep Endpoint) Local() bool { return ep.flag(abi.EndpointFlagLocal) }

// NodeName returns the endpoint's nodeName ("" if unset).
func (ep Endpoint) NodeName() string { return ep.x.str(ep.o + epNodeName) }

// Zone returns the endpoint's zone ("" if unset).
func (ep Endpoint) Zone() string { return ep.x.str(ep.o + epZone) }

// ZoneHints returns hints.forZones names.
func (ep Endpoint) ZoneHints() Strings {
	return Strings{x: ep.x, first: le.Uint32(ep.x.b[ep.o+epHintFirst:]), n: uint32(le.Uint16(ep.x.b[ep.o+epZoneHintCount:]))}
}

// NodeHints returns hints.forNodes names.
func (ep Endpoint) NodeHints() Strings {
	first := le.Uint32(ep.x.b[ep.o+epHintFirst:]) + uint32(le.Uint16(ep.x.b[ep.o+epZoneHintCount:]))
	return Strings{x: ep.x, first: first, n: uint32(le.Uint16(ep.x.b[ep.o+epNodeHintCount:]))}
}

// Strings is a list of strings in the batch.
type Strings struct {
	x        *batch
	first, n uint32
}

// Len returns the number of strings.
func (s Strings) Len() int { return int(s.n) }

// At returns string i.
func (s Strings) At(i int) string {
	if i < 0 || i >= int(s.n) {
		panic("wasp: string index out of range")
	}
	return s.x.str(s.x.hints + (int(s.first)+i)*abi.StrRefSize)
}

// Contains reports whether v is one of the strings.
func (s Strings) Contains(v string) bool {
	refs := s.x.b[s.x.hints+int(s.first)*abi.StrRefSize : s.x.hints+int(s.first+s.n)*abi.StrRefSize]
	for len(refs) >= abi.StrRefSize {
		off, n := le.Uint32(refs), le.Uint32(refs[4:])
		if int(n) == len(v) && string(s.x.strings[off:off+n]) == v {
			return true
		}
		refs = refs[abi.StrRefSize:]
	}
	return false
}

// Decision is what the earlier stages decided for a service port.
type Decision struct {
	x *batch
	o int
	n uint32 // the port's endpoint count
}

// Mode returns the topology stage's mode.
func (d Decision) Mode() abi.TopologyMode { return abi.TopologyMode(d.x.b[d.o+decMode]) }

// HasAnyEndpoints returns the traffic-policy stage's hasAnyEndpoints.
func (d Decision) HasAnyEndpoints() bool {
	return d.x.b[d.o+decFlags]&abi.DecisionFlagHasAnyEndpoints != 0
}

func (d Decision) set(o int) Indices {
	first, n := le.Uint32(d.x.b[d.o+o:]), le.Uint32(d.x.b[d.o+o+4:])
	if n == abi.NilCount {
		return Indices{x: d.x, isNil: true}
	}
	if uint64(first)+uint64(n) > uint64(d.x.indexCount) {
		panic("wasp: index set outside the batch")
	}
	return Indices{x: d.x, first: first, n: n}
}

// Eligible returns the topology stage's eligible endpoints.
func (d Decision) Eligible() Indices { return d.set(decEligible) }

// Cluster returns the traffic-policy stage's cluster endpoints.
func (d Decision) Cluster() Indices { return d.set(decCluster) }

// Local returns the traffic-policy stage's local endpoints.
func (d Decision) Local() Indices { return d.set(decLocal) }

// All returns the traffic-policy stage's all-reachable endpoints.
func (d Decision) All() Indices { return d.set(decAll) }

// Indices is an ascending set of endpoint indices, possibly nil (not used).
type Indices struct {
	x        *batch
	first, n uint32
	isNil    bool
}

// IsNil reports whether the set is nil: not used by the traffic policy, as
// opposed to used and empty.
func (s Indices) IsNil() bool { return s.isNil }

// Len returns the number of indices.
func (s Indices) Len() int { return int(s.n) }

// At returns index i of the set.
func (s Indices) At(i int) int {
	if i < 0 || i >= int(s.n) {
		panic("wasp: set index out of range")
	}
	return int(le.Uint32(s.x.b[s.x.indices+(int(s.first)+i)*4:]))
}

// Contains reports whether endpoint index v is in the set.
func (s Indices) Contains(v int) bool {
	lo, hi := 0, int(s.n)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch x := s.At(m); {
		case x == v:
			return true
		case x < v:
			lo = m + 1
		default:
			hi = m
		}
	}
	return false
}
