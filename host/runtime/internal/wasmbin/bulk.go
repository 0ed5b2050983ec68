package wasmbin

// Bulk instructions: one instruction, work of up to the whole memory.
//
// memory.fill and memory.copy run a native loop over as many bytes as
// their operand says, up to the memory's cap (256 MiB by default, 4 GiB
// at most), and Go cannot preempt it. Charged one unit like any other
// instruction, thousands of them fit between two budget checks: a call
// overran its deadline by over a minute, and the garbage collector's
// stop-the-world waited for the guest all that time.
//
// Instrument replaces each of them with a call to a function it adds,
// which does the same work in parts of at most BulkChunk bytes and
// charges each part its size (one unit per BulkBytesPerUnit bytes) with
// a budget check before it. The overrun past a deadline is then bounded
// by one part, whatever the memory's cap. The parts keep the instruction's
// semantics: an out-of-bounds fill or copy traps before writing anything
// (the function runs the original instruction, which traps, when the
// bounds check fails), and an overlapping copy copies as memmove does
// (forward when the destination is below the source, backward from the
// end otherwise).
//
// The other instructions whose work is not constant get a static charge
// of the most they can do (see walker.bulkCost): memory.init and
// table.init by the size of the module (a segment is part of it), and
// table.fill, table.copy and table.grow by the most entries a table may
// hold (MaxTableEntries divided among the tables). memory.grow is
// constant on Linux, where a memory is mapped at its cap and grows in
// place.

const (
	// BulkChunk is the most bytes one part of a memory.fill or
	// memory.copy moves between two budget checks: about 0.1 ms of work.
	BulkChunk = 1 << 20
	// BulkBytesPerUnit is how many bytes of memory.fill or memory.copy
	// cost one unit, about one instruction's time.
	BulkBytesPerUnit = 1 << bulkShift
	bulkShift        = 3
	// BulkSmall is the most bytes a memory.fill or memory.copy moves
	// without a check of its own: its caller's running cost counts them
	// (bulkCallCost), as most copies a Go or Rust guest makes are small,
	// and a check in each would add a third to the checks of a default
	// module's call (TestCallChecksAreRare).
	BulkSmall = 4096
	// bulkCallCost is what a call to a bulk helper adds to its caller's
	// running cost: a small fill or copy, or the helper's instructions
	// before its first check and after its last, whose own checks charge
	// the bytes of a larger one.
	bulkCallCost = BulkSmall>>bulkShift + 32
)

// Sub-opcodes of 0xfc-prefixed instructions.
const (
	subMemoryInit = 8
	subMemoryCopy = 10
	subMemoryFill = 11
	subTableInit  = 12
	subTableCopy  = 14
	subTableGrow  = 15
	subTableFill  = 17
)

// bulkType is the type of both helpers: (i32 dst, i32 src or value,
// i32 n) -> ().
var bulkType = []byte{0x60, 0x03, valI32, valI32, valI32, 0x00}

const (
	valI32       = 0x7f
	opReturn     = 0x0f
	opLocalGet   = 0x20
	opLocalSet   = 0x21
	opLocalTee   = 0x22
	opMemorySize = 0x3f
	opI64Const   = 0x42
	opI32Or      = 0x72
	opI32GtU     = 0x4b
	opI32LeU     = 0x4d
	opI64GtU     = 0x56
	opI32Add     = 0x6a
	opI32ShrU    = 0x76
	opI64Add     = 0x7c
	opI64Shl     = 0x86
	opI64ExtendU = 0xad
)

// Locals of a helper: its parameters.
const (
	argDst = 0
	argSrc = 1 // the value, for fill
	argN   = 2
)

// helpers returns the bodies (each with its size) of the functions that
// replace memory.fill and memory.copy, in that order.
func (ins *instrumenter) helpers() [][]byte {
	var bodies [][]byte
	for _, isCopy := range []bool{false, true} {
		b := []byte{0x00} // no locals besides the parameters
		b = ins.appendBulk(b, isCopy)
		bodies = append(bodies, append(appendULEB(nil, uint64(len(b))), b...))
	}
	return bodies
}

// appendBulk appends the code of the memory.fill helper (isCopy false)
// or the memory.copy helper.
func (ins *instrumenter) appendBulk(b []byte, isCopy bool) []byte {
	instr := []byte{opPrefixMisc, subMemoryFill, 0x00} // of memory 0
	if isCopy {
		instr = []byte{opPrefixMisc, subMemoryCopy, 0x00, 0x00}
	}
	op := func(b []byte) []byte { // the instruction, on the locals as they are
		b = append(b, opLocalGet, argDst, opLocalGet, argSrc, opLocalGet, argN)
		return append(b, instr...)
	}
	// if n <= small: the instruction, which the caller's check counts
	b = append(b, opLocalGet, argN)
	b = appendSLEB(append(b, opI32Const), BulkSmall)
	b = append(b, opI32LeU, opIf, blockEmpty)
	b = op(b)
	b = append(b, opReturn, opEnd)
	chunk := appendSLEB([]byte{opI32Const}, BulkChunk)
	// if n > chunk: parts
	b = append(b, opLocalGet, argN)
	b = append(b, chunk...)
	b = append(b, opI32GtU, opIf, blockEmpty)
	{
		// Out of bounds: the instruction traps before writing anything.
		b = appendEnd64(b, argDst)
		b = appendMemoryBytes(b)
		b = append(b, opI64GtU)
		if isCopy {
			b = appendEnd64(b, argSrc)
			b = appendMemoryBytes(b)
			b = append(b, opI64GtU, opI32Or)
		}
		b = append(b, opIf, blockEmpty)
		b = op(b)
		b = append(b, opReturn, opEnd)

		forward := func(b []byte) []byte {
			b = append(b, opLoop, blockEmpty)
			b = ins.appendCheck(b, BulkChunk>>bulkShift)
			b = append(b, opLocalGet, argDst, opLocalGet, argSrc)
			b = append(b, chunk...)
			b = append(b, instr...)
			b = appendAdvance(b, argDst, chunk)
			if isCopy {
				b = appendAdvance(b, argSrc, chunk)
			}
			b = append(b, opLocalGet, argN)
			b = append(b, chunk...)
			b = append(b, opI32Sub, opLocalTee, argN)
			b = append(b, chunk...)
			return append(b, opI32GtU, opBrIf, 0x00, opEnd)
		}
		if !isCopy {
			b = forward(b)
		} else {
			// A destination above the source is copied from the end,
			// so that no part overwrites source bytes not yet copied.
			b = append(b, opLocalGet, argDst, opLocalGet, argSrc, opI32LeU, opIf, blockEmpty)
			b = forward(b)
			b = append(b, 0x05) // else
			b = append(b, opLoop, blockEmpty)
			b = append(b, opLocalGet, argN)
			b = append(b, chunk...)
			b = append(b, opI32Sub, opLocalSet, argN)
			b = ins.appendCheck(b, BulkChunk>>bulkShift)
			b = append(b, opLocalGet, argDst, opLocalGet, argN, opI32Add)
			b = append(b, opLocalGet, argSrc, opLocalGet, argN, opI32Add)
			b = append(b, chunk...)
			b = append(b, instr...)
			b = append(b, opLocalGet, argN)
			b = append(b, chunk...)
			b = append(b, opI32GtU, opBrIf, 0x00, opEnd)
			b = append(b, opEnd) // if
		}
	}
	b = append(b, opEnd)
	// The rest, at most one part: charged by its size.
	b = ins.appendCheckOf(b, func(b []byte) []byte {
		return append(b, opLocalGet, argN, opI32Const, bulkShift, opI32ShrU)
	})
	b = op(b)
	return append(b, opEnd)
}

// appendEnd64 appends (i64) local + n: where an access from local ends.
func appendEnd64(b []byte, local byte) []byte {
	return append(b, opLocalGet, local, opI64ExtendU, opLocalGet, argN, opI64ExtendU, opI64Add)
}

// appendMemoryBytes appends (i64) the size of memory 0 in bytes.
func appendMemoryBytes(b []byte) []byte {
	return append(b, opMemorySize, 0x00, opI64ExtendU, opI64Const, 16, opI64Shl)
}

// appendAdvance appends local += chunk (an encoded i32.const).
func appendAdvance(b []byte, local byte, chunk []byte) []byte {
	b = append(b, opLocalGet, local)
	b = append(b, chunk...)
	return append(b, opI32Add, opLocalSet, local)
}

// appendCheckOf appends a budget check that charges 1 plus the i32
// weight the code weight pushes.
func (ins *instrumenter) appendCheckOf(b []byte, weight func([]byte) []byte) []byte {
	b = append(b, opGlobalGet)
	b = appendULEB(b, uint64(ins.budget))
	b = weight(b)
	b = append(b, opI32Sub, opI32Const, 0x01)
	return ins.appendCharge(b)
}

// bulkCost is the static charge of a 0xfc-prefixed instruction whose
// work depends on its operands, other than memory.fill and memory.copy
// (which call the helpers), and whether it is one.
func (ins *instrumenter) bulkCost(sub uint32) (int64, bool) {
	switch sub {
	case subMemoryInit:
		// A data segment is part of the module: at most its size.
		return int64(len(ins.wasm)>>bulkShift) + 1, true
	case subTableInit:
		// An element segment holds at most one entry per byte.
		return int64(len(ins.wasm)) + 1, true
	case subTableCopy, subTableGrow, subTableFill:
		return int64(ins.tableCap()) + 1, true
	}
	return 0, false
}
