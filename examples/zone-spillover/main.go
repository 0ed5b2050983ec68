// Command zone-spillover is an example endpoint-selection module: it keeps
// a service port's traffic in the node's zone while spilling a configurable
// share of new connections to endpoints in other zones.
//
// Endpoints of the cluster and local sets whose zone equals the node's zone
// get one weight, the others (including endpoints without a zone) another,
// chosen so that the expected share of new connections sent to other zones
// is the Service annotation wasp.dev/zone-spillover-percent (0–100, default
// 10), as closely as integer weights in [1, abi.MaxWeight] allow. See
// README.md for the arithmetic.
//
// An annotation that is not an integer in [0, 100] fails the port: the
// handler returns an error and the host keeps the port's last good result.
package main

import (
	"errors"
	"strconv"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

const (
	// Annotation is the Service annotation holding the percentage of new
	// connections to send to endpoints outside the node's zone.
	Annotation = "wasp.dev/zone-spillover-percent"
	// DefaultPercent applies when the Service has no Annotation.
	DefaultPercent = 10
)

func init() { wasp.HandleEndpointSelection(selection) }

// selection runs once per service port. It allocates nothing unless the
// annotation is invalid: no maps, no fmt, and strconv only parses.
func selection(node wasp.Node, sp wasp.ServicePort, out *wasp.SelectionResult) error {
	p, err := percent(sp)
	if err != nil {
		return err
	}
	d := sp.Decision()
	cluster, local := d.Cluster(), d.Local()
	// The split is computed over the cluster set, the one whose endpoints
	// span zones; the local set (endpoints on this node) is normally all in
	// the node's zone. A port that uses only the local set (iTP=Local)
	// computes it over that set instead.
	basis, other := cluster, local
	if cluster.Len() == 0 {
		basis, other = local, cluster
	}
	zone := node.Zone()
	wl, wr := uint32(1), uint32(1)
	if zone != "" {
		nl, nr := count(sp, basis, zone)
		wl, wr = weights(p, nl, nr)
		if (wl == 0 || wr == 0) && other.Len() > 0 {
			// 0 % or 100 %: one class is left out, which the basis
			// survives (it has both). The other set must still choose an
			// endpoint (the host rejects a result that chooses none of a
			// non-empty set), so if it has only members of the left-out
			// class they get weight 1 against abi.MaxWeight: as close to
			// the request as one weight per endpoint allows. This is the
			// eTP=Local case with 100 %: external traffic must stay on
			// this node's endpoints.
			if ol, or := count(sp, other, zone); (wl == 0 && or == 0) || (wr == 0 && ol == 0) {
				wl, wr = keep(wl), keep(wr)
			}
		}
	}
	assign(sp, cluster, zone, wl, wr, out)
	assign(sp, local, zone, wl, wr, out)
	return nil
}

// keep turns a left-out weight (0) into 1 and a kept one into the maximum.
func keep(w uint32) uint32 {
	if w == 0 {
		return 1
	}
	return abi.MaxWeight
}

// percent returns the port's spill-over percentage.
func percent(sp wasp.ServicePort) (int, error) {
	v, ok := sp.Annotation(Annotation)
	if !ok {
		return DefaultPercent, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 0 || p > 100 {
		// Error path only: the string concatenation allocates, once.
		return 0, errors.New("annotation " + Annotation + ": " + strconv.Quote(v) + " is not an integer in [0,100]")
	}
	return p, nil
}

// count returns how many endpoints of set are in zone (nl) and how many are
// not (nr).
func count(sp wasp.ServicePort, set wasp.Indices, zone string) (nl, nr int) {
	for k := range set.Len() {
		if sp.Endpoint(set.At(k)).Zone() == zone {
			nl++
		} else {
			nr++
		}
	}
	return nl, nr
}

// assign gives every endpoint of set the weight of its class, leaving out
// the class whose weight is 0.
func assign(sp wasp.ServicePort, set wasp.Indices, zone string, wl, wr uint32, out *wasp.SelectionResult) {
	for k := range set.Len() {
		i := set.At(k)
		w := wr
		if sp.Endpoint(i).Zone() == zone {
			w = wl
		}
		if w > 0 {
			out.Set(i, w)
		}
	}
}

// weights returns the weight of a same-zone endpoint (wl) and of an
// other-zone endpoint (wr) for a spill-over of p percent over nl same-zone
// and nr other-zone endpoints. A weight of 0 means "leave the class out".
//
// The share of new connections sent to other zones is
//
//	nr·wr / (nl·wl + nr·wr) = p/100  ⇔  wl : wr = (100-p)·nr : p·nl
//
// so the exact ratio is reduced by its greatest common divisor and used as
// is when both terms fit in [1, abi.MaxWeight]. Otherwise the larger term is
// scaled to abi.MaxWeight and the smaller rounded to the nearest integer, at
// least 1: within one step of the closest share integer weights can express.
func weights(p, nl, nr int) (wl, wr uint32) {
	switch {
	case nl == 0 || nr == 0:
		return 1, 1 // one zone only: nothing to split
	case p == 0:
		return 1, 0
	case p == 100:
		return 0, 1
	}
	a := uint64(p) * uint64(nl)     // ∝ wr
	b := uint64(100-p) * uint64(nr) // ∝ wl
	g := gcd(a, b)
	a, b = a/g, b/g
	const m = abi.MaxWeight
	switch {
	case a <= m && b <= m:
		return uint32(b), uint32(a)
	case b >= a:
		return m, uint32(max(1, (a*m+b/2)/b))
	default:
		return uint32(max(1, (b*m+a/2)/a)), m
	}
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func main() {}
