package backends

import "math"

// MaxTotalWeight bounds the sum of the weights NormalizeWeights returns,
// so that a dataplane's random number modulo the total fits in 31 bits.
const MaxTotalWeight = math.MaxInt32

// NormalizeWeights returns the weights of eps, in order, in their smallest
// proportion: divided by their greatest common divisor (a weight of 0
// counts as 1), so that equal weights become 1 each. Should they still add
// up past MaxTotalWeight, each is scaled down proportionally, to at least
// 1. total is their sum. A dataplane sends a new connection to eps[i]
// with probability ws[i]/total; nil and 0 for no endpoint.
func NormalizeWeights(eps []Endpoint) (ws []uint32, total uint32) {
	if len(eps) == 0 {
		return nil, 0
	}
	g := uint64(0)
	for _, ep := range eps {
		g = gcd(g, uint64(max(ep.Weight, 1)))
	}
	w64 := make([]uint64, len(eps))
	var sum uint64
	for i, ep := range eps {
		w64[i] = uint64(max(ep.Weight, 1)) / g
		sum += w64[i]
	}
	if sum > MaxTotalWeight {
		// w64[i] < 2^32 and the limit < 2^31: the product fits; the sum
		// ends below the limit plus len(eps).
		scaled := uint64(0)
		for i := range w64 {
			w64[i] = max(1, w64[i]*MaxTotalWeight/sum)
			scaled += w64[i]
		}
		sum = scaled
	}
	ws = make([]uint32, len(eps))
	for i, w := range w64 {
		ws[i] = uint32(w)
	}
	return ws, uint32(sum)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
