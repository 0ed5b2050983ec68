package hostile

import "slices"

// Guest is a wasp ABI v1 module for the topology stage whose code the
// caller gives: what its stage function, its initialisation and its
// wasp_configure run. Each body is code (without locals, ending with end)
// for the function's type; nil leaves the function out (a nil Stage
// returns no output).
type Guest struct {
	// Pages is the memory's minimum, in 64 KiB pages (at least 1).
	Pages int
	// Stage is wasp_topology: (i32 ptr, i32 len) -> i64.
	Stage []byte
	// Initialize is _initialize: () -> ().
	Initialize []byte
	// Configure is wasp_configure: (i32 ptr, i32 len) -> i64.
	Configure []byte
	// Globals and DataSegments are how many immutable i32 globals and
	// one-byte active data segments the module defines besides: what
	// every instance keeps in the host's memory, outside its linear
	// memory.
	Globals, DataSegments int
}

// Function indices of a Guest's functions, for calls in its bodies.
const (
	// GuestTree is (i32 n) -> i32: a call tree of 2^n calls with no loop,
	// f(0) = 1, f(n) = f(n-1) + f(n-1).
	GuestTree = 5
	// GuestDeep is (i32 n) -> i32: f(n) = f(n+1) + 1, a recursion
	// without end that only a stack overflow stops.
	GuestDeep = 6
)

// DeepCall is code that calls the GuestDeep function and drops its
// result.
func DeepCall() []byte { return []byte{0x41, 0x00, 0x10, GuestDeep, 0x1a} }

// TreeCall is code that calls the GuestTree function with n and drops
// its result: 2^n calls.
func TreeCall(n byte) []byte { return []byte{0x41, n, 0x10, GuestTree, 0x1a} }

// Module encodes the guest.
func (g Guest) Module() []byte {
	types := [][]byte{
		{0x60, 1, i32, 1, i32},      // 0: (i32) -> i32
		{0x60, 2, i32, i32, 1, i64}, // 1: (i32, i32) -> i64
		{0x60, 0, 0},                // 2: () -> ()
	}
	stage := g.Stage
	if stage == nil {
		stage = []byte{0x42, 0x00, 0x0b}
	}
	initialize, configure := g.Initialize, g.Configure
	if initialize == nil {
		initialize = []byte{0x0b}
	}
	if configure == nil {
		configure = []byte{0x42, 0x00, 0x0b}
	}
	tree := []byte{
		0x20, 0x00, 0x45, // local.get 0, i32.eqz
		0x04, i32, 0x41, 0x01, // if (result i32) i32.const 1
		0x05,                                          // else
		0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, GuestTree, // f(n-1)
		0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, GuestTree, // f(n-1)
		0x6a,       // i32.add
		0x0b, 0x0b, // end end
	}
	deep := []byte{0x20, 0x00, 0x41, 0x01, 0x6a, 0x10, GuestDeep, 0x41, 0x01, 0x6a, 0x0b}
	funcs := [][]byte{u(2), u(0), u(1), u(2), u(1), u(0), u(0)}
	code := [][]byte{
		Body(nil, 0x0b),                   // 0 marker
		Body(nil, 0x41, 0x80, 0x08, 0x0b), // 1 wasp_buffer: i32.const 1024
		Body(nil, stage...),               // 2 wasp_topology
		Body(nil, initialize...),          // 3 _initialize
		Body(nil, configure...),           // 4 wasp_configure
		Body(nil, tree...),                // 5 the tree
		Body(nil, deep...),                // 6 the endless recursion
	}
	exports := [][]byte{
		cat(str("wasp_abi_v1"), []byte{0x00}, u(0)),
		cat(str("wasp_buffer"), []byte{0x00}, u(1)),
		cat(str("wasp_topology"), []byte{0x00}, u(2)),
		cat(str("memory"), []byte{0x02}, u(0)),
	}
	if g.Initialize != nil {
		exports = append(exports, cat(str("_initialize"), []byte{0x00}, u(3)))
	}
	if g.Configure != nil {
		exports = append(exports, cat(str("wasp_configure"), []byte{0x00}, u(4)))
	}
	meta := `{"name":"hostile","version":"1.0.0","abi":1,"stages":["topology"]}`
	var globals, data []byte
	if g.Globals > 0 {
		globals = section(6, u(g.Globals), slices.Repeat([]byte{i32, 0x00, 0x41, 0x00, 0x0b}, g.Globals))
	}
	if g.DataSegments > 0 {
		data = section(11, u(g.DataSegments), slices.Repeat([]byte{0x00, 0x41, 0x00, 0x0b, 0x01, 0x55}, g.DataSegments))
	}
	return cat(
		[]byte("\x00asm\x01\x00\x00\x00"),
		section(1, vec(types...)),
		section(3, vec(funcs...)),
		section(5, vec(cat([]byte{0x00}, u(max(g.Pages, 1))))),
		globals,
		section(7, vec(exports...)),
		section(10, vec(code...)),
		data,
		section(0, str("wasp.metadata"), []byte(meta)),
	)
}
