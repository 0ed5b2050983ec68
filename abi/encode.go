package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

var le = binary.LittleEndian

// Encoder writes input batches. It keeps scratch space between calls so that
// encoding a batch of the same shape again does not allocate. An Encoder is
// not safe for concurrent use.
type Encoder struct{}

// strArea writes a batch's string area: a window of the destination
// buffer, sized for the worst case (no string shared). It lives on the
// encoding's stack: kept in the Encoder, on the heap, every string it
// remembered was a write barrier while the collector ran.
type strArea struct {
	buf []byte
	n   int
	// last remembers the most recent string of each endpoint field kind
	// (0: node names, 1: zones), so that the node and zone names repeated
	// by neighbouring endpoints are stored once without hashing every
	// string.
	last [2]struct {
		s   string
		ref uint64
	}
}

// sizes of the variable parts of a batch.
type batchSize struct {
	endpoints, pairs, hints, indices int
	strings                          int // upper bound of the string area
}

func labelBytes(labels []Label) (n int) {
	for _, l := range labels {
		n += len(l.Key) + len(l.Value)
	}
	return n
}

func measure(b *Batch) (n batchSize, err error) {
	n.pairs = len(b.Node.Labels)
	n.strings = len(b.Node.Name) + labelBytes(b.Node.Labels)
	for i := range b.Ports {
		p := &b.Ports[i]
		n.endpoints += len(p.Endpoints)
		n.pairs += len(p.Annotations)
		n.strings += len(p.Namespace) + len(p.Name) + len(p.PortName) + labelBytes(p.Annotations)
		for j := range p.Endpoints {
			ep := &p.Endpoints[j]
			if len(ep.ZoneHints) > MaxHints || len(ep.NodeHints) > MaxHints {
				return n, fmt.Errorf("port %d (%s/%s) endpoint %d: more than %d hints", i, p.Namespace, p.Name, j, MaxHints)
			}
			n.hints += len(ep.ZoneHints) + len(ep.NodeHints)
			n.strings += len(ep.NodeName) + len(ep.Zone)
			for _, h := range ep.ZoneHints {
				n.strings += len(h)
			}
			for _, h := range ep.NodeHints {
				n.strings += len(h)
			}
		}
	}
	n.indices = indexCount(b.Decisions)
	return n, nil
}

// indexCount is how many endpoint indices the sets of decisions hold.
func indexCount(decisions []Decision) (n int) {
	for i := range decisions {
		d := &decisions[i]
		n += len(d.Eligible) + len(d.Cluster) + len(d.Local) + len(d.All)
	}
	return n
}

// putDecisions writes the records of ports decisions at decisionsOff in
// buf, and their sets at indicesOff; decisions is empty (every decision
// zero, sets nil) or has one per port. Every byte of a record but the
// reserved ones is written.
func putDecisions(buf []byte, decisionsOff, indicesOff, ports int, decisions []Decision) {
	idx := 0
	putSet := func(o int, s Indices) {
		if s == nil {
			le.PutUint32(buf[o:], 0)
			le.PutUint32(buf[o+4:], NilCount)
			return
		}
		le.PutUint32(buf[o:], uint32(idx))
		le.PutUint32(buf[o+4:], uint32(len(s)))
		for _, v := range s {
			le.PutUint32(buf[indicesOff+idx*4:], v)
			idx++
		}
	}
	for i := range ports {
		o := decisionsOff + i*DecisionSize
		var d Decision
		if len(decisions) != 0 {
			d = decisions[i]
		}
		buf[o+decMode] = byte(d.Mode)
		buf[o+decFlags] = 0
		if d.HasAnyEndpoints {
			buf[o+decFlags] = DecisionFlagHasAnyEndpoints
		}
		putSet(o+decEligible, d.Eligible)
		putSet(o+decCluster, d.Cluster)
		putSet(o+decLocal, d.Local)
		putSet(o+decAll, d.All)
	}
}

// errNotEncoded is RewriteDecisions' error for a buffer that is not a
// batch as Encode writes it.
var errNotEncoded = errors.New("not an encoded batch")

// RewriteDecisions changes the stage and the decisions of buf, a batch as
// Encode wrote it, to stage and decisions, in place, and returns the
// resized buffer: the same bytes as Encode of the batch with that stage
// and those decisions, for a fraction of its work, since the decisions
// and their sets lie after the ports, endpoints, labels and hints, and
// only the string area after them moves. len(decisions) must be 0 (every
// decision zero, sets nil) or the batch's port count. It is how the
// stages of a chain share one encoding of their node and ports.
func RewriteDecisions(buf []byte, stage Stage, decisions []Decision) ([]byte, error) {
	if len(buf) < HeaderSize || le.Uint32(buf[hdrMagic:]) != InputMagic || le.Uint32(buf[hdrTotalLen:]) != uint32(len(buf)) {
		return buf, errNotEncoded
	}
	u := func(off int) int { return int(le.Uint32(buf[off:])) }
	ports, decisionsOff, indicesOff := u(hdrPortCount), u(hdrDecisionsOff), u(hdrIndicesOff)
	oldStrings, stringsLen := u(hdrStringsOff), u(hdrStringsLen)
	if len(decisions) != 0 && len(decisions) != ports {
		return buf, fmt.Errorf("%d decisions for a batch of %d ports", len(decisions), ports)
	}
	if indicesOff != decisionsOff+ports*DecisionSize || oldStrings < indicesOff || oldStrings+stringsLen > len(buf) {
		return buf, fmt.Errorf("%w: tables not in Encode's order", errNotEncoded)
	}
	stringsOff := indicesOff + indexCount(decisions)*4
	total := (stringsOff + stringsLen + 3) &^ 3
	if uint64(total) > 0xFFFFFFF0 {
		return buf, fmt.Errorf("batch too large: %d bytes", total)
	}
	if total > len(buf) {
		buf = grow(buf, total-len(buf))
	}
	copy(buf[stringsOff:], buf[oldStrings:oldStrings+stringsLen]) // memmove: the areas may overlap
	buf = buf[:total]
	clear(buf[stringsOff+stringsLen:]) // padding
	putDecisions(buf, decisionsOff, indicesOff, ports, decisions)
	buf[hdrStage] = byte(stage)
	le.PutUint32(buf[hdrIndexCount:], uint32(stringsOff-indicesOff)/4)
	le.PutUint32(buf[hdrStringsOff:], uint32(stringsOff))
	le.PutUint32(buf[hdrTotalLen:], uint32(total))
	return buf, nil
}

// Encode appends the encoding of b to dst and returns the extended buffer.
// len(b.Decisions) must be 0 (every decision zero, sets nil) or len(b.Ports).
func (e *Encoder) Encode(dst []byte, b *Batch) ([]byte, error) {
	dst, _, err := e.encode(dst, nil, b)
	return dst, err
}

// EncodeFlags is Encode that also appends to flags the flags byte
// (EndpointFlag*) of every endpoint of b, in the order of the endpoint
// table (port after port), and returns it: a compact copy for a host
// that checks outputs against them, made while the endpoints are read
// anyway.
func (e *Encoder) EncodeFlags(dst, flags []byte, b *Batch) ([]byte, []byte, error) {
	if flags == nil {
		flags = []byte{}
	}
	return e.encode(dst, flags, b)
}

// encode is Encode, and EncodeFlags if flags is not nil.
func (e *Encoder) encode(dst, flags []byte, b *Batch) ([]byte, []byte, error) {
	if len(b.Decisions) != 0 && len(b.Decisions) != len(b.Ports) {
		return dst, flags, fmt.Errorf("batch has %d decisions for %d ports", len(b.Decisions), len(b.Ports))
	}
	n, err := measure(b)
	if err != nil {
		return dst, flags, err
	}
	if flags != nil {
		flags = slices.Grow(flags, n.endpoints)
	}
	portsOff := HeaderSize
	endpointsOff := portsOff + len(b.Ports)*PortSize
	pairsOff := endpointsOff + n.endpoints*EndpointSize
	hintsOff := pairsOff + n.pairs*PairSize
	decisionsOff := hintsOff + n.hints*StrRefSize
	indicesOff := decisionsOff + len(b.Ports)*DecisionSize
	stringsOff := indicesOff + n.indices*4
	fixed := stringsOff
	if uint64(fixed)+uint64(n.strings) > 0xFFFFFFF0 {
		return dst, flags, fmt.Errorf("batch too large: %d bytes", uint64(fixed)+uint64(n.strings))
	}

	start := len(dst)
	dst = grow(dst, fixed+n.strings+3)
	buf := dst[start:]
	// Reserved fields and padding are zero; the endpoint table, most of
	// the batch, writes its own.
	clear(buf[:endpointsOff])
	clear(buf[pairsOff:fixed])
	sa := strArea{buf: buf[fixed:]}

	le.PutUint32(buf[hdrMagic:], InputMagic)
	le.PutUint16(buf[hdrVersion:], Version)
	buf[hdrStage] = byte(b.Stage)
	le.PutUint32(buf[hdrPortCount:], uint32(len(b.Ports)))
	le.PutUint32(buf[hdrPortsOff:], uint32(portsOff))
	le.PutUint32(buf[hdrEndpointCount:], uint32(n.endpoints))
	le.PutUint32(buf[hdrEndpointsOff:], uint32(endpointsOff))
	le.PutUint32(buf[hdrPairCount:], uint32(n.pairs))
	le.PutUint32(buf[hdrPairsOff:], uint32(pairsOff))
	le.PutUint32(buf[hdrHintCount:], uint32(n.hints))
	le.PutUint32(buf[hdrHintsOff:], uint32(hintsOff))
	le.PutUint32(buf[hdrDecisionsOff:], uint32(decisionsOff))
	le.PutUint32(buf[hdrIndexCount:], uint32(n.indices))
	le.PutUint32(buf[hdrIndicesOff:], uint32(indicesOff))
	le.PutUint32(buf[hdrStringsOff:], uint32(stringsOff))
	le.PutUint64(buf[hdrNodeName:], sa.str(b.Node.Name))

	pair := 0
	putPairs := func(labels []Label) {
		for _, l := range labels {
			o := pairsOff + pair*PairSize
			le.PutUint64(buf[o:], sa.str(l.Key))
			le.PutUint64(buf[o+8:], sa.str(l.Value))
			pair++
		}
	}
	le.PutUint32(buf[hdrNodeLabelFirst:], 0)
	le.PutUint32(buf[hdrNodeLabelCount:], uint32(len(b.Node.Labels)))
	putPairs(b.Node.Labels)

	ep, hint := 0, 0
	for i := range b.Ports {
		p := &b.Ports[i]
		o := portsOff + i*PortSize
		le.PutUint64(buf[o+portNamespace:], sa.str(p.Namespace))
		le.PutUint64(buf[o+portName:], sa.str(p.Name))
		le.PutUint64(buf[o+portPortName:], sa.str(p.PortName))
		buf[o+portProtocol] = byte(p.Protocol)
		buf[o+portFlags] = portFlagsOf(p)
		le.PutUint16(buf[o+portPort:], p.Port)
		le.PutUint16(buf[o+portNodePort:], p.NodePort)
		le.PutUint32(buf[o+portEndpointFirst:], uint32(ep))
		le.PutUint32(buf[o+portEndpointCount:], uint32(len(p.Endpoints)))
		le.PutUint32(buf[o+portAnnotationFirst:], uint32(pair))
		le.PutUint32(buf[o+portAnnotationCount:], uint32(len(p.Annotations)))
		putPairs(p.Annotations)

		for j := range p.Endpoints {
			x := &p.Endpoints[j]
			eo := endpointsOff + ep*EndpointSize
			// One bounds check per record: the table is most of a batch.
			rec := (*[EndpointSize]byte)(buf[eo : eo+EndpointSize])
			*(*[16]byte)(rec[epAddr:]) = x.Addr.As16() // IPv4 becomes IPv4-mapped IPv6
			le.PutUint16(rec[epPort:], x.Port)
			f := endpointFlagsOf(x)
			rec[epFlags] = f
			if flags != nil {
				flags = append(flags, f)
			}
			rec[epFlags+1] = 0 // reserved
			le.PutUint64(rec[epNodeName:], sa.cached(0, x.NodeName))
			le.PutUint64(rec[epZone:], sa.cached(1, x.Zone))
			le.PutUint32(rec[epHintFirst:], uint32(hint))
			le.PutUint16(rec[epZoneHintCount:], uint16(len(x.ZoneHints)))
			le.PutUint16(rec[epNodeHintCount:], uint16(len(x.NodeHints)))
			le.PutUint32(rec[epNodeHintCount+2:], 0) // reserved
			for _, h := range x.ZoneHints {
				le.PutUint64(buf[hintsOff+hint*StrRefSize:], sa.cached(1, h))
				hint++
			}
			for _, h := range x.NodeHints {
				le.PutUint64(buf[hintsOff+hint*StrRefSize:], sa.cached(0, h))
				hint++
			}
			ep++
		}
	}

	putDecisions(buf, decisionsOff, indicesOff, len(b.Ports), b.Decisions)

	total := fixed + sa.n
	for total%4 != 0 {
		buf[total] = 0
		total++
	}
	dst, buf = dst[:start+total], buf[:total]
	le.PutUint32(buf[hdrStringsLen:], uint32(sa.n))
	le.PutUint32(buf[hdrTotalLen:], uint32(len(buf)))
	return dst, flags, nil
}

// str stores s in the string area and returns its reference (offset in the
// low 32 bits, length in the high 32 bits, as laid out little-endian).
func (a *strArea) str(s string) uint64 {
	if s == "" {
		return 0
	}
	off := a.n
	a.n += copy(a.buf[off:], s) // within capacity: measured
	return uint64(off) | uint64(len(s))<<32
}

// cached is str with a one-entry memory per field kind.
func (a *strArea) cached(kind int, s string) uint64 {
	c := &a.last[kind]
	if s == c.s && s != "" {
		return c.ref
	}
	c.s, c.ref = s, a.str(s)
	return c.ref
}

func portFlagsOf(p *ServicePort) byte {
	var f byte
	if p.InternalPolicyLocal {
		f |= PortFlagInternalPolicyLocal
	}
	if p.ExternalPolicyLocal {
		f |= PortFlagExternalPolicyLocal
	}
	if p.ExternallyAccessible {
		f |= PortFlagExternallyAccessible
	}
	if p.UsesClusterEndpoints() {
		f |= PortFlagUsesCluster
	}
	if p.UsesLocalEndpoints() {
		f |= PortFlagUsesLocal
	}
	if p.IPv6 {
		f |= PortFlagIPv6
	}
	return f
}

func endpointFlagsOf(x *Endpoint) byte {
	var f byte
	if x.Ready {
		f |= EndpointFlagReady
	}
	if x.Serving {
		f |= EndpointFlagServing
	}
	if x.Terminating {
		f |= EndpointFlagTerminating
	}
	if x.Local {
		f |= EndpointFlagLocal
	}
	return f
}

// grow extends b by n bytes, reusing its capacity when it can.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*cap(b)+n)
	copy(nb, b)
	return nb
}
