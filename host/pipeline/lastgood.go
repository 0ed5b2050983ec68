package pipeline

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/wasp-proxy/wasp/abi"
)

// keepLastGood carries a last good decision, made over the endpoints of
// its time (last.Endpoints), over to the port's current endpoints eps: it
// keeps only the endpoints that are still there (the same address; the
// same port preferred) and still serving, and, in the Local set, still on
// this node, with their indices in eps; weights stay with the endpoints
// kept. Nil sets stay nil and empty ones empty. It reports false when a
// set (Cluster or Local) that programmed endpoints would program none:
// the decision no longer says where that traffic goes, and the caller
// takes the builtin semantics instead.
//
// An endpoint that left the Service may already belong to another
// workload: a last good decision must never send traffic to it.
func keepLastGood(last *Result, eps []abi.Endpoint) (abi.Decision, bool) {
	old := last.Endpoints
	// to maps an index of old to its index in eps, or -1.
	to := make([]int, len(old))
	byAddrPort := make(map[netip.AddrPort]int, len(eps))
	byAddr := make(map[netip.Addr]int, len(eps))
	for i := range eps {
		byAddrPort[netip.AddrPortFrom(eps[i].Addr, eps[i].Port)] = i
		if _, ok := byAddr[eps[i].Addr]; !ok {
			byAddr[eps[i].Addr] = i
		}
	}
	for i := range old {
		j, ok := byAddrPort[netip.AddrPortFrom(old[i].Addr, old[i].Port)]
		if !ok {
			j, ok = byAddr[old[i].Addr]
		}
		to[i] = -1
		if ok {
			to[i] = j
		}
	}
	d := last.Decision
	d.Eligible = remap(d.Eligible, to, eps, func(*abi.Endpoint) bool { return true })
	d.Cluster = remap(d.Cluster, to, eps, serving)
	d.Local = remap(d.Local, to, eps, func(ep *abi.Endpoint) bool { return serving(ep) && ep.Local })
	d.All = remap(d.All, to, eps, serving)
	if d.Weights != nil {
		ws := make([]abi.Weight, 0, len(d.Weights))
		for _, w := range d.Weights {
			if int(w.Index) < len(to) && to[w.Index] >= 0 && serving(&eps[to[w.Index]]) {
				ws = append(ws, abi.Weight{Index: uint32(to[w.Index]), Weight: w.Weight})
			}
		}
		slices.SortFunc(ws, func(a, b abi.Weight) int { return cmp.Compare(a.Index, b.Index) })
		d.Weights = slices.CompactFunc(ws, func(a, b abi.Weight) bool { return a.Index == b.Index })
	}
	if programmed(last.Cluster, last.Weights) > 0 && programmed(d.Cluster, d.Weights) == 0 ||
		programmed(last.Local, last.Weights) > 0 && programmed(d.Local, d.Weights) == 0 {
		return abi.Decision{}, false
	}
	return d, true
}

// serving reports whether an endpoint may receive traffic: it is serving,
// or ready (which the EndpointSlice API says implies serving).
func serving(ep *abi.Endpoint) bool { return ep.Serving || ep.Ready }

// remap returns set with each index i replaced by to[i], without those
// that map to no endpoint of eps or whose endpoint fails keep, in
// ascending order; nil stays nil.
func remap(set abi.Indices, to []int, eps []abi.Endpoint, keep func(*abi.Endpoint) bool) abi.Indices {
	if set == nil {
		return nil
	}
	out := make(abi.Indices, 0, len(set))
	for _, i := range set {
		if int(i) < len(to) && to[i] >= 0 && keep(&eps[to[i]]) {
			out = append(out, uint32(to[i]))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// programmed counts the members of set that have a weight: the endpoints
// the dataplane gets for it (host/state). Weights are ascending by Index.
func programmed(set abi.Indices, ws []abi.Weight) int {
	n := 0
	for _, i := range set {
		k, ok := slices.BinarySearchFunc(ws, i, func(w abi.Weight, i uint32) int { return cmp.Compare(w.Index, i) })
		if ok && ws[k].Weight > 0 {
			n++
		}
	}
	return n
}
