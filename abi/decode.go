package abi

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrMalformedBatch is wrapped by every DecodeBatch error.
var ErrMalformedBatch = errors.New("malformed batch")

// DecodeBatch decodes and fully validates an input batch into Go values.
// Guests do not need it (the SDKs read the bytes in place); the host uses it
// in tests, and it defines what a well-formed batch is.
func DecodeBatch(buf []byte) (*Batch, error) {
	d := batchDecoder{buf: buf}
	b, err := d.decode()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedBatch, err)
	}
	return b, nil
}

type batchDecoder struct {
	buf     []byte
	strings []byte
}

// table checks that count records of size bytes at off lie inside the batch.
func (d *batchDecoder) table(name string, off, count uint32, size int) error {
	end := uint64(off) + uint64(count)*uint64(size)
	if off < HeaderSize || off%4 != 0 || end > uint64(len(d.buf)) {
		return fmt.Errorf("%s table (offset %d, %d records) outside the batch of %d bytes", name, off, count, len(d.buf))
	}
	return nil
}

func (d *batchDecoder) str(ref []byte) (string, error) {
	off, n := le.Uint32(ref), le.Uint32(ref[4:])
	if uint64(off)+uint64(n) > uint64(len(d.strings)) {
		return "", fmt.Errorf("string (offset %d, length %d) outside the string area of %d bytes", off, n, len(d.strings))
	}
	return string(d.strings[off : off+n]), nil
}

func (d *batchDecoder) decode() (*Batch, error) {
	buf := d.buf
	if len(buf) < HeaderSize {
		return nil, fmt.Errorf("%d bytes, shorter than the header", len(buf))
	}
	if m := le.Uint32(buf[hdrMagic:]); m != InputMagic {
		return nil, fmt.Errorf("magic %#x, want %#x", m, InputMagic)
	}
	if v := le.Uint16(buf[hdrVersion:]); v != Version {
		return nil, fmt.Errorf("version %d, want %d", v, Version)
	}
	b := &Batch{Stage: Stage(buf[hdrStage])}
	if _, ok := ParseStage(b.Stage.String()); !ok {
		return nil, fmt.Errorf("unknown stage %d", buf[hdrStage])
	}
	if n := le.Uint32(buf[hdrTotalLen:]); n != uint32(len(buf)) {
		return nil, fmt.Errorf("header says %d bytes, got %d", n, len(buf))
	}
	u := func(off int) uint32 { return le.Uint32(buf[off:]) }
	portCount, endpointCount, pairCount, hintCount, indexCount :=
		u(hdrPortCount), u(hdrEndpointCount), u(hdrPairCount), u(hdrHintCount), u(hdrIndexCount)
	portsOff, endpointsOff, pairsOff, hintsOff, decisionsOff, indicesOff, stringsOff, stringsLen :=
		u(hdrPortsOff), u(hdrEndpointsOff), u(hdrPairsOff), u(hdrHintsOff), u(hdrDecisionsOff), u(hdrIndicesOff), u(hdrStringsOff), u(hdrStringsLen)
	for _, t := range []struct {
		name       string
		off, count uint32
		size       int
	}{
		{"port", portsOff, portCount, PortSize},
		{"endpoint", endpointsOff, endpointCount, EndpointSize},
		{"pair", pairsOff, pairCount, PairSize},
		{"hint", hintsOff, hintCount, StrRefSize},
		{"decision", decisionsOff, portCount, DecisionSize},
		{"index", indicesOff, indexCount, 4},
		{"string", stringsOff, stringsLen, 1},
	} {
		if err := d.table(t.name, t.off, t.count, t.size); err != nil {
			return nil, err
		}
	}
	d.strings = buf[stringsOff : stringsOff+stringsLen]

	labels := func(first, count uint32) ([]Label, error) {
		if uint64(first)+uint64(count) > uint64(pairCount) {
			return nil, fmt.Errorf("labels [%d,+%d) outside the %d pairs", first, count, pairCount)
		}
		if count == 0 {
			return nil, nil
		}
		out := make([]Label, count)
		for i := range out {
			o := pairsOff + (first+uint32(i))*PairSize
			k, err := d.str(buf[o:])
			if err != nil {
				return nil, err
			}
			v, err := d.str(buf[o+8:])
			if err != nil {
				return nil, err
			}
			if i > 0 && k <= out[i-1].Key {
				return nil, fmt.Errorf("label %q not in ascending key order", k)
			}
			out[i] = Label{Key: k, Value: v}
		}
		return out, nil
	}
	var err error
	if b.Node.Name, err = d.str(buf[hdrNodeName:]); err != nil {
		return nil, fmt.Errorf("node name: %w", err)
	}
	if b.Node.Labels, err = labels(u(hdrNodeLabelFirst), u(hdrNodeLabelCount)); err != nil {
		return nil, fmt.Errorf("node labels: %w", err)
	}

	hints := func(first, count uint32) ([]string, error) {
		if uint64(first)+uint64(count) > uint64(hintCount) {
			return nil, fmt.Errorf("hints [%d,+%d) outside the %d hints", first, count, hintCount)
		}
		if count == 0 {
			return nil, nil
		}
		out := make([]string, count)
		for i := range out {
			if out[i], err = d.str(buf[hintsOff+(first+uint32(i))*StrRefSize:]); err != nil {
				return nil, err
			}
		}
		return out, nil
	}

	b.Ports = make([]ServicePort, portCount)
	b.Decisions = make([]Decision, portCount)
	for i := range b.Ports {
		p := &b.Ports[i]
		o := portsOff + uint32(i)*PortSize
		where := func(err error) error { return fmt.Errorf("port %d: %w", i, err) }
		if p.Namespace, err = d.str(buf[o+portNamespace:]); err != nil {
			return nil, where(err)
		}
		if p.Name, err = d.str(buf[o+portName:]); err != nil {
			return nil, where(err)
		}
		if p.PortName, err = d.str(buf[o+portPortName:]); err != nil {
			return nil, where(err)
		}
		p.Protocol = Protocol(buf[o+portProtocol])
		if p.Protocol < ProtocolTCP || p.Protocol > ProtocolSCTP {
			return nil, where(fmt.Errorf("unknown protocol %d", p.Protocol))
		}
		flags := buf[o+portFlags]
		p.InternalPolicyLocal = flags&PortFlagInternalPolicyLocal != 0
		p.ExternalPolicyLocal = flags&PortFlagExternalPolicyLocal != 0
		p.ExternallyAccessible = flags&PortFlagExternallyAccessible != 0
		p.IPv6 = flags&PortFlagIPv6 != 0
		if want := portFlagsOf(p); flags != want {
			return nil, where(fmt.Errorf("flags %#x inconsistent, want %#x", flags, want))
		}
		p.Port = le.Uint16(buf[o+portPort:])
		p.NodePort = le.Uint16(buf[o+portNodePort:])
		if p.Annotations, err = labels(u(int(o+portAnnotationFirst)), u(int(o+portAnnotationCount))); err != nil {
			return nil, where(fmt.Errorf("annotations: %w", err))
		}
		first, count := u(int(o+portEndpointFirst)), u(int(o+portEndpointCount))
		if uint64(first)+uint64(count) > uint64(endpointCount) {
			return nil, where(fmt.Errorf("endpoints [%d,+%d) outside the %d endpoints", first, count, endpointCount))
		}
		if count > 0 {
			p.Endpoints = make([]Endpoint, count)
		}
		for j := range p.Endpoints {
			x := &p.Endpoints[j]
			eo := endpointsOff + (first+uint32(j))*EndpointSize
			where := func(err error) error { return fmt.Errorf("port %d endpoint %d: %w", i, j, err) }
			a := netip.AddrFrom16([16]byte(buf[eo+epAddr : eo+epAddr+16]))
			if !p.IPv6 {
				if !a.Is4In6() {
					return nil, where(fmt.Errorf("address %s is not IPv4 in an IPv4 port", a))
				}
				a = a.Unmap()
			}
			x.Addr = a
			x.Port = le.Uint16(buf[eo+epPort:])
			f := buf[eo+epFlags]
			x.Ready = f&EndpointFlagReady != 0
			x.Serving = f&EndpointFlagServing != 0
			x.Terminating = f&EndpointFlagTerminating != 0
			x.Local = f&EndpointFlagLocal != 0
			if x.NodeName, err = d.str(buf[eo+epNodeName:]); err != nil {
				return nil, where(err)
			}
			if x.Zone, err = d.str(buf[eo+epZone:]); err != nil {
				return nil, where(err)
			}
			hf := u(int(eo + epHintFirst))
			zn, nn := uint32(le.Uint16(buf[eo+epZoneHintCount:])), uint32(le.Uint16(buf[eo+epNodeHintCount:]))
			if x.ZoneHints, err = hints(hf, zn); err != nil {
				return nil, where(fmt.Errorf("zone hints: %w", err))
			}
			if x.NodeHints, err = hints(hf+zn, nn); err != nil {
				return nil, where(fmt.Errorf("node hints: %w", err))
			}
		}

		do := decisionsOff + uint32(i)*DecisionSize
		dec := &b.Decisions[i]
		dec.Mode = TopologyMode(buf[do+decMode])
		if dec.Mode > TopologyPreferSameNode {
			return nil, where(fmt.Errorf("unknown topology mode %d", dec.Mode))
		}
		dec.HasAnyEndpoints = buf[do+decFlags]&DecisionFlagHasAnyEndpoints != 0
		for _, s := range []struct {
			name string
			off  uint32
			dst  *Indices
		}{{"eligible", decEligible, &dec.Eligible}, {"cluster", decCluster, &dec.Cluster}, {"local", decLocal, &dec.Local}, {"all", decAll, &dec.All}} {
			sf, sn := u(int(do+s.off)), u(int(do+s.off+4))
			if sn == NilCount {
				continue
			}
			if uint64(sf)+uint64(sn) > uint64(indexCount) {
				return nil, where(fmt.Errorf("%s set [%d,+%d) outside the %d indices", s.name, sf, sn, indexCount))
			}
			set := make(Indices, sn)
			for k := range set {
				set[k] = u(int(indicesOff + (sf+uint32(k))*4))
			}
			if msg := checkSet(set, count); msg != "" {
				return nil, where(fmt.Errorf("%s set%s", s.name, msg))
			}
			*s.dst = set
		}
	}
	return b, nil
}
