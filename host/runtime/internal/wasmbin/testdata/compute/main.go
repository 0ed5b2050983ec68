// Command compute is a test guest that does deterministic work whose result
// must not change under instrumentation.
package main

import "sort"

// sortSum fills a slice of n pseudo-random values from seed, sorts it and
// returns a position-weighted checksum.
//
//go:wasmexport sortSum
func sortSum(n int32, seed int64) int64 {
	x := uint64(seed)
	s := make([]int64, n)
	for i := range s {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		s[i] = int64(x % 1000003)
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum int64
	for i, v := range s {
		sum += v * int64(i+1)
	}
	return sum
}

// primes counts the primes below n with a sieve.
//
//go:wasmexport primes
func primes(n int32) int32 {
	composite := make([]bool, n)
	var c int32
	for i := int32(2); i < n; i++ {
		if composite[i] {
			continue
		}
		c++
		for j := i * i; j < n && j > 0; j += i {
			composite[j] = true
		}
	}
	return c
}

func main() {}
