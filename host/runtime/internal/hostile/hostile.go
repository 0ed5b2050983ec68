// Package hostile builds module binaries of pathological shape: bodies
// that are valid WebAssembly but cost a compiler far more than their size
// suggests (one huge br_table inside thousands of nested blocks, tens of
// thousands of locals, very long bodies, many functions or types). Tests
// use them to check that the host refuses or contains every one of them,
// and the compile measurement of docs/performance.md uses them to find
// which shapes cost what.
//
// The modules are generated rather than checked in: a few of them are
// megabytes, and their size is a parameter.
package hostile

import (
	"encoding/binary"
	"slices"
)

// Types of the functions a Module defines.
const (
	// TypeBuffer is (i32) -> (i32): wasp_buffer's type, and that of every
	// body of this package.
	TypeBuffer = 0
	// TypeStage is (i32, i32) -> (i64): a stage function's type.
	TypeStage = 1
)

// Module returns a wasp ABI v1 module implementing the topology stage whose
// code is the marker, wasp_buffer, wasp_topology (all trivial) and then
// bodies, each a function of type TypeBuffer, in order. The first body is
// function 3. extraTypes more () -> () types follow the two the module
// needs in the type section.
func Module(extraTypes int, bodies ...[]byte) []byte {
	types := [][]byte{
		{0x60, 1, i32, 1, i32},
		{0x60, 2, i32, i32, 1, i64},
		{0x60, 0, 0},
	}
	for range extraTypes {
		types = append(types, []byte{0x60, 0, 0})
	}
	funcs := [][]byte{u(2), u(TypeBuffer), u(TypeStage)}
	code := [][]byte{
		Body(nil, 0x0b),             // marker: () -> ()
		Body(nil, 0x41, 0x00, 0x0b), // wasp_buffer: i32.const 0
		Body(nil, 0x42, 0x00, 0x0b), // wasp_topology: i64.const 0
	}
	for _, b := range bodies {
		funcs = append(funcs, u(TypeBuffer))
		code = append(code, b)
	}
	exports := [][]byte{
		cat(str("wasp_abi_v1"), []byte{0x00}, u(0)),
		cat(str("wasp_buffer"), []byte{0x00}, u(1)),
		cat(str("wasp_topology"), []byte{0x00}, u(2)),
		cat(str("memory"), []byte{0x02}, u(0)),
	}
	meta := `{"name":"hostile","version":"1.0.0","abi":1,"stages":["topology"]}`
	return cat(
		[]byte("\x00asm\x01\x00\x00\x00"),
		section(1, vec(types...)),
		section(3, vec(funcs...)),
		section(5, vec([]byte{0x00, 0x01})), // one memory, min 1 page
		section(7, vec(exports...)),
		section(10, vec(code...)),
		section(0, str("wasp.metadata"), []byte(meta)),
	)
}

// Body encodes a function body from its locals (count per i32 run) and
// its code, which must include the final end.
func Body(locals []int, code ...byte) []byte {
	var decl [][]byte
	for _, n := range locals {
		decl = append(decl, cat(u(n), []byte{i32}))
	}
	b := cat(vec(decl...), code)
	return cat(u(len(b)), b)
}

// Dispatch is the shape of a Go wasip1 function's resume dispatch: depth
// nested blocks, a br_table of targets entries (and a default) that
// branches to them in turn, and after each block's end a little code that
// writes one of locals locals, so that every block is a join point where
// each local may have a different value.
func Dispatch(targets, depth, locals int) []byte {
	var code []byte
	for range depth {
		code = append(code, 0x02, 0x40) // block
	}
	code = append(code, 0x20, 0x00, 0x0e) // local.get 0; br_table
	code = append(code, u(targets)...)
	for i := range targets {
		code = append(code, u(i%depth)...)
	}
	code = append(code, u(depth-1)...) // default
	code = append(code, 0x0b)          // end of the innermost block
	for i := 1; i < depth; i++ {
		if locals > 0 {
			code = append(code, 0x41, byte(i%64), 0x21) // i32.const i%64; local.set 1 + i%locals
			code = append(code, u(1+i%locals)...)
		}
		code = append(code, 0x0b)
	}
	code = append(code, sumLocals(locals)...)
	code = append(code, 0x0b)
	return Body(localRuns(locals), code...)
}

// Nest is depth nested blocks with nothing in them.
func Nest(depth int) []byte {
	code := slices.Repeat([]byte{0x02, 0x40}, depth)
	code = append(code, slices.Repeat([]byte{0x0b}, depth)...)
	code = append(code, 0x41, 0x00, 0x0b)
	return Body(nil, code...)
}

// BrTable is one br_table of targets entries, all naming the function
// body's own label, in no block.
func BrTable(targets int) []byte {
	code := []byte{0x02, 0x40, 0x20, 0x00, 0x0e}
	code = append(code, u(targets)...)
	code = append(code, slices.Repeat([]byte{0x00}, targets+1)...)
	code = append(code, 0x0b, 0x41, 0x00, 0x0b)
	return Body(nil, code...)
}

// Locals declares n locals and, in a loop of blocks, sets and reads each
// of them: every local is live across every block boundary.
func Locals(n, blocks int) []byte {
	var code []byte
	for b := range blocks {
		code = append(code, 0x02, 0x40) // block
		for l := range n {
			code = append(code, 0x20, 0x00, 0x41, byte(b%64), 0x6a, 0x21) // local.get 0; i32.const b%64; i32.add; local.set l
			code = append(code, u(1+l)...)
		}
		code = append(code, 0x20, 0x00, 0x0d, 0x00, 0x0b) // br_if 0; end
	}
	code = append(code, sumLocals(n)...)
	code = append(code, 0x0b)
	return Body(localRuns(n), code...)
}

// Straight is a body of n additions in a row, no blocks.
func Straight(n int) []byte {
	code := []byte{0x20, 0x00}
	for range n {
		code = append(code, 0x41, 0x01, 0x6a) // i32.const 1; i32.add
	}
	return Body(nil, append(code, 0x0b)...)
}

// Funcs returns n copies of a small body (a block, a branch, an add).
func Funcs(n int) [][]byte {
	b := Body(nil, 0x02, 0x40, 0x20, 0x00, 0x0d, 0x00, 0x0b, 0x20, 0x00, 0x41, 0x01, 0x6a, 0x0b)
	return slices.Repeat([][]byte{b}, n)
}

// sumLocals is code that adds locals 1..n to local 0 and leaves the sum.
func sumLocals(n int) []byte {
	code := []byte{0x20, 0x00}
	for l := range n {
		code = append(code, 0x20)
		code = append(code, u(1+l)...)
		code = append(code, 0x6a)
	}
	return code
}

// localRuns declares n i32 locals in one run.
func localRuns(n int) []int {
	if n == 0 {
		return nil
	}
	return []int{n}
}

const (
	i32 = 0x7f
	i64 = 0x7e
)

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// appendSigned appends v as signed LEB128.
func appendSigned(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// u encodes v as unsigned LEB128.
func u(v int) []byte { return binary.AppendUvarint(nil, uint64(v)) }

func vec(items ...[]byte) []byte { return cat(u(len(items)), cat(items...)) }

func str(v string) []byte { return cat(u(len(v)), []byte(v)) }

func section(id byte, parts ...[]byte) []byte {
	p := cat(parts...)
	return cat([]byte{id}, u(len(p)), p)
}
