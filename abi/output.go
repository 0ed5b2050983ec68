package abi

import (
	"errors"
	"fmt"
	"slices"
)

// OutputWriter builds a stage's output, one record per input port, in port
// order. It reuses its buffer across Reset calls. The zero value is ready
// after Reset.
type OutputWriter struct {
	buf   []byte
	count uint32
}

// Reset starts a new output for stage, keeping the buffer's capacity.
func (w *OutputWriter) Reset(stage Stage) {
	w.buf = grow(w.buf[:0], OutputHeaderSize)
	clear(w.buf)
	le.PutUint32(w.buf[outMagic:], OutputMagic)
	le.PutUint16(w.buf[outVersion:], Version)
	w.buf[outStage] = byte(stage)
	w.count = 0
}

// Error appends an error record: the module declines this port and the host
// keeps the port's last good result. msg is truncated to MaxErrorLen bytes.
func (w *OutputWriter) Error(msg string) {
	if len(msg) > MaxErrorLen {
		msg = msg[:MaxErrorLen]
	}
	w.u32(StatusError)
	w.u32(uint32(len(msg)))
	w.buf = append(w.buf, msg...)
	for len(w.buf)%4 != 0 {
		w.buf = append(w.buf, 0)
	}
	w.count++
}

// Topology appends a topology record.
func (w *OutputWriter) Topology(mode TopologyMode, eligible Indices) {
	b := w.extend(12 + 4*len(eligible))
	le.PutUint32(b, StatusOK)
	le.PutUint32(b[4:], uint32(mode))
	putSet(b[8:], eligible)
	w.count++
}

// TrafficPolicy appends a traffic-policy record.
func (w *OutputWriter) TrafficPolicy(hasAny bool, cluster, local, all Indices) {
	b := w.extend(20 + 4*(len(cluster)+len(local)+len(all)))
	le.PutUint32(b, StatusOK)
	var flags uint32
	if hasAny {
		flags |= DecisionFlagHasAnyEndpoints
	}
	le.PutUint32(b[4:], flags)
	b = putSet(b[8:], cluster)
	b = putSet(b, local)
	putSet(b, all)
	w.count++
}

// Selection appends an endpoint-selection record.
func (w *OutputWriter) Selection(weights []Weight) {
	b := w.extend(8 + 8*len(weights))
	le.PutUint32(b, StatusOK)
	le.PutUint32(b[4:], uint32(len(weights)))
	b = b[8:]
	for _, x := range weights {
		le.PutUint32(b, x.Index)
		le.PutUint32(b[4:], x.Weight)
		b = b[8:]
	}
	w.count++
}

// extend grows the buffer by n bytes and returns them.
func (w *OutputWriter) extend(n int) []byte {
	l := len(w.buf)
	w.buf = grow(w.buf, n)
	return w.buf[l:]
}

// putSet writes a set at the start of b and returns the rest of b.
func putSet(b []byte, s Indices) []byte {
	if s == nil {
		le.PutUint32(b, NilCount)
		return b[4:]
	}
	le.PutUint32(b, uint32(len(s)))
	b = b[4:]
	for _, v := range s {
		le.PutUint32(b, v)
		b = b[4:]
	}
	return b
}

// Bytes finishes the output and returns it. The slice is valid until the
// next Reset.
func (w *OutputWriter) Bytes() []byte {
	le.PutUint32(w.buf[outCount:], w.count)
	le.PutUint32(w.buf[outTotalLen:], uint32(len(w.buf)))
	return w.buf
}

func (w *OutputWriter) u32(v uint32) {
	w.buf = le.AppendUint32(w.buf, v)
}

// ErrMalformedOutput is wrapped by DecodeOutput errors that make the whole
// output unusable (bad header, wrong record count, truncation). Problems
// inside one record only fail that record's port.
var ErrMalformedOutput = errors.New("malformed output")

// DecodeOutput validates and decodes a stage's output for the batch b.
// results is reused when it has the capacity. Each result starts from the
// port's previous decision (b.Decisions[i]) with the stage's fields replaced.
//
// The structure must be exact: the magic, version and stage of the header,
// one record per port, nothing after the last record. Inside a record, index
// sets must be strictly ascending and within the port's endpoints; the
// topology set must not be nil; selection weights must be in [1, MaxWeight],
// name endpoints of the port's cluster or local set, and keep at least one
// endpoint of each non-empty set. A record that breaks those rules gets
// Result.Invalid with the reason in Result.Err; the other ports are unaffected.
func DecodeOutput(out []byte, b *Batch, results []Result) ([]Result, error) {
	if len(out) < OutputHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the header", ErrMalformedOutput, len(out))
	}
	if m := le.Uint32(out[outMagic:]); m != OutputMagic {
		return nil, fmt.Errorf("%w: magic %#x, want %#x", ErrMalformedOutput, m, OutputMagic)
	}
	if v := le.Uint16(out[outVersion:]); v != Version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrMalformedOutput, v, Version)
	}
	if s := Stage(out[outStage]); s != b.Stage {
		return nil, fmt.Errorf("%w: stage %s, want %s", ErrMalformedOutput, s, b.Stage)
	}
	if n := le.Uint32(out[outCount:]); n != uint32(len(b.Ports)) {
		return nil, fmt.Errorf("%w: %d records for %d ports", ErrMalformedOutput, n, len(b.Ports))
	}
	if n := le.Uint32(out[outTotalLen:]); n != uint32(len(out)) {
		return nil, fmt.Errorf("%w: header says %d bytes, got %d", ErrMalformedOutput, n, len(out))
	}
	results = slices.Grow(results[:0], len(b.Ports))[:len(b.Ports)]
	r := reader{b: out, off: OutputHeaderSize}
	// One backing array for every index set keeps decoding to a few
	// allocations per batch. Its size is bounded by the output's length.
	pool := make([]uint32, 0, (len(out)-OutputHeaderSize)/4)
	var weights []Weight
	if b.Stage == StageEndpointSelection {
		weights = make([]Weight, 0, (len(out)-OutputHeaderSize)/8)
	}
	for i := range b.Ports {
		res := &results[i]
		*res = Result{}
		if len(b.Decisions) != 0 {
			res.Decision = b.Decisions[i]
		}
		status, ok := r.u32()
		if !ok {
			return nil, fmt.Errorf("%w: record %d: truncated", ErrMalformedOutput, i)
		}
		switch status {
		case StatusOK:
		case StatusError:
			n, ok := r.u32()
			if !ok || n > MaxErrorLen || int(n) > len(out)-r.off {
				return nil, fmt.Errorf("%w: record %d: bad error message length", ErrMalformedOutput, i)
			}
			msg := string(out[r.off : r.off+int(n)])
			r.off += (int(n) + 3) &^ 3
			if r.off > len(out) {
				return nil, fmt.Errorf("%w: record %d: truncated", ErrMalformedOutput, i)
			}
			if msg == "" {
				msg = "module reported an error"
			}
			res.Err = msg
			continue
		default:
			return nil, fmt.Errorf("%w: record %d: unknown status %d", ErrMalformedOutput, i, status)
		}
		nep := uint32(len(b.Ports[i].Endpoints))
		var err error
		setsOK := true // every set read so far ascends within nep
		switch b.Stage {
		case StageTopology:
			var mode uint32
			if mode, ok = r.u32(); !ok {
				return nil, fmt.Errorf("%w: record %d: truncated", ErrMalformedOutput, i)
			}
			res.Mode = TopologyMode(mode)
			if res.Eligible, pool, err = r.set(pool, nep, &setsOK); err != nil {
				return nil, fmt.Errorf("%w: record %d: %w", ErrMalformedOutput, i, err)
			}
			switch {
			case mode > uint32(TopologyPreferSameNode):
				invalid(res, "topology mode %d unknown", mode)
			case res.Eligible == nil:
				invalid(res, "eligible set is nil")
			}
		case StageTrafficPolicy:
			var flags uint32
			if flags, ok = r.u32(); !ok {
				return nil, fmt.Errorf("%w: record %d: truncated", ErrMalformedOutput, i)
			}
			res.HasAnyEndpoints = flags&DecisionFlagHasAnyEndpoints != 0
			for _, s := range []*Indices{&res.Cluster, &res.Local, &res.All} {
				if *s, pool, err = r.set(pool, nep, &setsOK); err != nil {
					return nil, fmt.Errorf("%w: record %d: %w", ErrMalformedOutput, i, err)
				}
			}
		case StageEndpointSelection:
			var n uint32
			if n, ok = r.u32(); !ok || uint64(n)*8 > uint64(len(out)-r.off) {
				return nil, fmt.Errorf("%w: record %d: truncated", ErrMalformedOutput, i)
			}
			start := len(weights)
			for range n {
				idx, _ := r.u32()
				w, _ := r.u32()
				weights = append(weights, Weight{Index: idx, Weight: w})
			}
			if n > 0 {
				res.Weights = weights[start:len(weights):len(weights)]
			}
		default:
			return nil, fmt.Errorf("%w: unknown stage %d", ErrMalformedOutput, b.Stage)
		}
		if res.Err == "" {
			checkRecord(res, nep, b.Stage, setsOK)
		}
	}
	if r.off != len(out) {
		return nil, fmt.Errorf("%w: %d bytes after the last record", ErrMalformedOutput, len(out)-r.off)
	}
	return results, nil
}

func invalid(res *Result, format string, args ...any) {
	if res.Err == "" {
		res.Err = fmt.Sprintf(format, args...)
		res.Invalid = true
	}
}

// checkRecord applies the per-record rules that need the whole record.
// setsOK: reading the sets found each ascending and within nep, so that
// only a record with a bad set has its sets checked again, for the
// message.
func checkRecord(res *Result, nep uint32, stage Stage, setsOK bool) {
	// One set after the other, in the order of the record.
	if !setsOK && (!setOK(res, "eligible", res.Eligible, nep) || !setOK(res, "cluster", res.Cluster, nep) ||
		!setOK(res, "local", res.Local, nep) || !setOK(res, "all", res.All, nep)) {
		return
	}
	if stage != StageEndpointSelection {
		return
	}
	var prev int64 = -1
	hasCluster, hasLocal := false, false
	// Both sets and the weights ascend: membership is a merge, with a
	// cursor in each set.
	ci, li := 0, 0
	for j, w := range res.Weights {
		switch {
		case int64(w.Index) <= prev:
			invalid(res, "weights[%d]: endpoint %d not strictly ascending", j, w.Index)
			return
		case w.Index >= nep:
			invalid(res, "weights[%d]: endpoint %d out of range (%d endpoints)", j, w.Index, nep)
			return
		case w.Weight < 1 || w.Weight > MaxWeight:
			invalid(res, "weights[%d]: weight %d out of range [1,%d]", j, w.Weight, MaxWeight)
			return
		}
		prev = int64(w.Index)
		for ci < len(res.Cluster) && res.Cluster[ci] < w.Index {
			ci++
		}
		for li < len(res.Local) && res.Local[li] < w.Index {
			li++
		}
		inCluster := ci < len(res.Cluster) && res.Cluster[ci] == w.Index
		inLocal := li < len(res.Local) && res.Local[li] == w.Index
		if !inCluster && !inLocal {
			invalid(res, "weights[%d]: endpoint %d is in neither the cluster nor the local set", j, w.Index)
			return
		}
		hasCluster = hasCluster || inCluster
		hasLocal = hasLocal || inLocal
	}
	if len(res.Cluster) > 0 && !hasCluster {
		invalid(res, "weights choose no endpoint of the cluster set (%d endpoints)", len(res.Cluster))
	} else if len(res.Local) > 0 && !hasLocal {
		invalid(res, "weights choose no endpoint of the local set (%d endpoints)", len(res.Local))
	}
}

// setOK checks the set called name of res, and marks res invalid if the
// set breaks a rule.
func setOK(res *Result, name string, s Indices, nep uint32) bool {
	if err := checkSet(s, nep); err != "" {
		invalid(res, "%s set: %s", name, err)
		return false
	}
	return true
}

func checkSet(s Indices, nep uint32) string {
	var prev int64 = -1
	for j, v := range s {
		if v >= nep {
			return fmt.Sprintf("[%d]: endpoint %d out of range (%d endpoints)", j, v, nep)
		}
		if int64(v) <= prev {
			return fmt.Sprintf("[%d]: endpoint %d not strictly ascending (duplicate or unsorted)", j, v)
		}
		prev = int64(v)
	}
	return ""
}

// reader reads little-endian values with bounds checks.
type reader struct {
	b   []byte
	off int
}

func (r *reader) u32() (uint32, bool) {
	if r.off+4 > len(r.b) || r.off < 0 {
		return 0, false
	}
	v := le.Uint32(r.b[r.off:])
	r.off += 4
	return v, true
}

// set reads a count and that many indices into pool, returning the set as a
// capacity-limited sub-slice of pool. It clears *inOrder if an index is
// not below nep or not above the one before; checkSet tells which.
func (r *reader) set(pool []uint32, nep uint32, inOrder *bool) (Indices, []uint32, error) {
	n, ok := r.u32()
	if !ok {
		return nil, pool, errors.New("truncated set")
	}
	if n == NilCount {
		return nil, pool, nil
	}
	if uint64(n)*4 > uint64(len(r.b)-r.off) {
		return nil, pool, fmt.Errorf("set of %d indices overruns the output", n)
	}
	start := len(pool)
	pool = slices.Grow(pool, int(n))[:start+int(n)] // DecodeOutput's pool has the room
	src := r.b[r.off : r.off+int(n)*4]
	good := true
	next := uint32(0) // the least the next index may be
	for k := range pool[start:] {
		v := le.Uint32(src[k*4:])
		pool[start+k] = v
		good = good && v >= next && v < nep
		next = v + 1
	}
	*inOrder = *inOrder && good
	r.off += len(src)
	return Indices(pool[start:len(pool):len(pool)]), pool, nil
}

// MaxOutputLen returns the length of the largest valid output of a stage
// for the encoded input batch, or 0 if input is not a batch. A host can
// refuse a longer output without reading it: per port, the largest record
// is an error record (8 bytes and a message of at most MaxErrorLen,
// padded) or a traffic-policy record (20 bytes and three sets of distinct
// indices among the port's endpoints).
func MaxOutputLen(input []byte) int {
	if len(input) < HeaderSize || le.Uint32(input[hdrMagic:]) != InputMagic {
		return 0
	}
	ports := uint64(le.Uint32(input[hdrPortCount:]))
	endpoints := uint64(le.Uint32(input[hdrEndpointCount:]))
	n := OutputHeaderSize + ports*(20+8+MaxErrorLen+3) + endpoints*12
	return int(min(n, 1<<40))
}
