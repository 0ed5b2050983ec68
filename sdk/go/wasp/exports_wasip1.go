//go:build wasip1

package wasp

import (
	"unsafe"

	"github.com/wasp-proxy/wasp/abi"
)

// inbuf is the buffer the host writes input batches into. It only grows, so
// linear memory stays flat once it has seen the largest batch.
var inbuf []byte

//go:wasmexport wasp_abi_v1
func abiV1() {}

//go:wasmexport wasp_buffer
func buffer(size uint32) uint32 {
	if uint32(cap(inbuf)) < size || cap(inbuf) == 0 {
		// A quarter of headroom: batches of one sync differ a little in
		// size, and each reallocation leaves garbage behind that grows the
		// heap, and with it linear memory, for good.
		inbuf = nil
		inbuf = make([]byte, max(size+size/4, 64<<10))
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(inbuf))))
}

//go:wasmexport wasp_topology
func topology(ptr, size uint32) uint64 { return call(abi.StageTopology, ptr, size) }

//go:wasmexport wasp_traffic_policy
func trafficPolicy(ptr, size uint32) uint64 { return call(abi.StageTrafficPolicy, ptr, size) }

//go:wasmexport wasp_endpoint_selection
func endpointSelection(ptr, size uint32) uint64 {
	return call(abi.StageEndpointSelection, ptr, size)
}

func call(stage abi.Stage, ptr, size uint32) uint64 {
	if cap(inbuf) == 0 || ptr != uint32(uintptr(unsafe.Pointer(unsafe.SliceData(inbuf)))) || int(size) > cap(inbuf) {
		return 0
	}
	out := Run(stage, inbuf[:size])
	if len(out) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(out))))<<32 | uint64(len(out))
}

// rejection holds the message of the last rejected configuration, for the
// host to read after wasp_configure returns.
var rejection []byte

// configureExport is exported whether or not the module registers a
// handler (go:wasmexport cannot be conditional): without one, RunConfigure
// accepts only no configuration.
//
//go:wasmexport wasp_configure
func configureExport(ptr, size uint32) uint64 {
	msg := "wasp: configuration not in the buffer of wasp_buffer"
	if cap(inbuf) > 0 && ptr == uint32(uintptr(unsafe.Pointer(unsafe.SliceData(inbuf)))) && int(size) <= cap(inbuf) {
		msg = RunConfigure(inbuf[:size])
	}
	if msg == "" {
		return 0
	}
	rejection = append(rejection[:0], msg...)
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(rejection))))<<32 | uint64(len(rejection))
}
