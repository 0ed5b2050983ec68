// Command garbage is a test module that speaks the ABI's calling
// convention but returns junk instead of an output.
package main

import "unsafe"

var in = make([]byte, 1<<20)

var junk = []byte("this is not a wasp output, just bytes that happen to be here....")

//go:wasmexport wasp_abi_v1
func marker() {}

//go:wasmexport wasp_buffer
func buffer(size uint32) uint32 {
	if int(size) > len(in) {
		in = make([]byte, size)
	}
	return uint32(uintptr(unsafe.Pointer(&in[0])))
}

//go:wasmexport wasp_topology
func topology(ptr, size uint32) uint64 {
	return uint64(uintptr(unsafe.Pointer(&junk[0])))<<32 | uint64(len(junk))
}

func main() {}
