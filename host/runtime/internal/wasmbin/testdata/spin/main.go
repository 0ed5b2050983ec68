// Command spin is a test guest with loops that run forever or for long.
package main

var counter int32

// spin never returns.
//
//go:wasmexport spin
func spin() {
	for {
		counter++
	}
}

// count runs a tight loop of n iterations.
//
//go:wasmexport count
func count(n int32) int32 {
	var s int32
	for i := int32(0); i < n; i++ {
		s += i ^ (s >> 3)
	}
	return s
}

func main() {}
