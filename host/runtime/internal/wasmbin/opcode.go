package wasmbin

import (
	"errors"
	"fmt"
)

// ErrUnknownOpcode is wrapped by errors about instructions the decoder does
// not know, so their immediates cannot be skipped.
var ErrUnknownOpcode = errors.New("unknown opcode")

// Opcodes the instrumenter treats specially. The full set is decoded by
// instr.
const (
	opBlock       = 0x02
	opLoop        = 0x03
	opIf          = 0x04
	opTry         = 0x06 // legacy exception handling
	opEnd         = 0x0b
	opDelegate    = 0x18 // legacy exception handling; ends a try
	opTryTable    = 0x1f
	opBr          = 0x0c
	opBrIf        = 0x0d
	opBrTable     = 0x0e
	opBrOnNull    = 0xd4
	opBrOnNonNull = 0xd6
	opGlobalGet   = 0x23
	opUnreachable = 0x00
	opPrefixGC    = 0xfb
	opPrefixMisc  = 0xfc
	opPrefixSIMD  = 0xfd
	opPrefixAtoms = 0xfe
	blockEmpty    = 0x40
)

// unknownOp reports an unknown opcode (with its sub-opcode for prefixed
// instructions) found at offset at.
func unknownOp(at int, op byte, sub ...uint32) error {
	if len(sub) > 0 {
		return fmt.Errorf("%w %#02x %d at offset %d", ErrUnknownOpcode, op, sub[0], at)
	}
	return fmt.Errorf("%w %#02x at offset %d", ErrUnknownOpcode, op, at)
}

// instr skips the immediates of the instruction whose opcode op was just
// read at offset at. It covers the core specification 2.0 and the
// extensions Go and Rust toolchains emit: sign extension, non-trapping
// float-to-int conversion, bulk memory, reference types, multi-value, fixed
// and relaxed SIMD, threads, multi-memory, memory64 offsets, tail calls,
// typed function references and exception handling (legacy try/catch and
// try_table). GC instructions (0xfb) are reported as unknown.
func (r *reader) instr(at int, op byte) error {
	switch {
	case op <= 0x01, // unreachable nop
		op == 0x05,             // else
		op == 0x0a,             // throw_ref
		op == opEnd,            // end
		op == 0x0f,             // return
		op == 0x19,             // catch_all
		op == 0x1a, op == 0x1b, // drop select
		op >= 0x45 && op <= 0xc4,           // numeric, including sign extension
		op == 0xd1, op == 0xd3, op == 0xd5: // ref.is_null ref.as_non_null ref.eq
		return nil
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
		_, err := r.u32()
		return err
	case op >= 0x28 && op <= 0x3e: // loads and stores
		return r.memarg()
	}
	switch op {
	case opBlock, opLoop, opIf, opTry:
		return r.blockType()
	case 0x07, 0x08, 0x09, // catch tag, throw tag, rethrow label
		0x0c, 0x0d, // br br_if
		0x10, 0x12, 0x14, 0x15, // call return_call call_ref return_call_ref
		opDelegate,
		0x3f, 0x40, // memory.size memory.grow (memory index)
		0xd2,       // ref.func
		0xd4, 0xd6: // br_on_null br_on_non_null
		_, err := r.u32()
		return err
	case 0x0e: // br_table
		n, err := r.count(1)
		if err != nil {
			return err
		}
		return r.u32s(n + 1)
	case 0x11, 0x13: // call_indirect return_call_indirect: type, table
		return r.u32s(2)
	case 0x1c: // select t*
		n, err := r.count(1)
		if err != nil {
			return err
		}
		for range n {
			if err := r.valType(); err != nil {
				return err
			}
		}
		return nil
	case opTryTable:
		return r.tryTable()
	case 0x41:
		_, err := r.sleb(32)
		return err
	case 0x42:
		_, err := r.sleb(64)
		return err
	case 0x43:
		return r.skip(4)
	case 0x44:
		return r.skip(8)
	case 0xd0: // ref.null heaptype
		_, err := r.sleb(33)
		return err
	case opPrefixMisc:
		return r.miscInstr(at)
	case opPrefixSIMD:
		return r.simdInstr(at)
	case opPrefixAtoms:
		return r.atomicInstr(at)
	}
	return unknownOp(at, op)
}

// u32s skips n unsigned LEB128 values.
func (r *reader) u32s(n int) error {
	for range n {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// memarg skips a memory argument: alignment flags, a memory index when flag
// bit 6 is set (multi-memory), and an offset (64-bit for memory64).
func (r *reader) memarg() error {
	flags, err := r.u32()
	if err != nil {
		return err
	}
	if flags&0x40 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	_, err = r.u64()
	return err
}

// blockType skips a block type: empty (0x40), a value type, or a
// non-negative s33 type index.
func (r *reader) blockType() error {
	if r.off >= r.end {
		return atErr(r.off, errTruncated)
	}
	c := r.b[r.off]
	if c&0xc0 == 0x40 { // one-byte negative s33: empty or a value type
		if c == blockEmpty {
			r.off++
			return nil
		}
		return r.valType()
	}
	at := r.off
	idx, err := r.sleb(33)
	if err != nil {
		return err
	}
	if idx < 0 {
		return fmt.Errorf("block type %d at offset %d: invalid", idx, at)
	}
	return nil
}

// tryTable skips the immediates of try_table: a block type and a vector of
// catch clauses.
func (r *reader) tryTable() error {
	_, err := r.tryTableLabels()
	return err
}

// tryTableLabels reads the immediates of try_table and returns the labels
// its catch clauses branch to.
func (r *reader) tryTableLabels() ([]uint32, error) {
	if err := r.blockType(); err != nil {
		return nil, err
	}
	n, err := r.count(2)
	if err != nil {
		return nil, err
	}
	var labels []uint32
	for range n {
		at := r.off
		kind, err := r.byte()
		if err != nil {
			return nil, err
		}
		switch kind {
		case 0x00, 0x01: // catch, catch_ref: tag, label
			_, err = r.u32()
		case 0x02, 0x03: // catch_all, catch_all_ref: label
		default:
			return nil, fmt.Errorf("try_table catch kind %#x at offset %d: unknown", kind, at)
		}
		if err != nil {
			return nil, err
		}
		label, err := r.u32()
		if err != nil {
			return nil, err
		}
		labels = append(labels, label)
	}
	return labels, nil
}

// miscInstr skips a 0xfc-prefixed instruction: saturating truncation and
// bulk memory/table operations.
func (r *reader) miscInstr(at int) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 7: // i32/i64.trunc_sat_f32/f64_s/u
		return nil
	case sub == 8, sub == 10, sub == 12, sub == 14:
		// memory.init data mem, memory.copy mem mem, table.init elem table,
		// table.copy table table
		return r.u32s(2)
	case sub == 9, sub == 11, sub == 13, sub >= 15 && sub <= 17:
		// data.drop, memory.fill, elem.drop, table.grow/size/fill
		_, err := r.u32()
		return err
	}
	return unknownOp(at, opPrefixMisc, sub)
}

// simdInstr skips a 0xfd-prefixed instruction (fixed-width and relaxed
// SIMD).
func (r *reader) simdInstr(at int) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11, sub == 92, sub == 93: // v128 loads and stores, load32/64_zero
		return r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		return r.skip(16)
	case sub >= 21 && sub <= 34: // extract_lane, replace_lane
		return r.skip(1)
	case sub >= 84 && sub <= 91: // load/store lane
		if err := r.memarg(); err != nil {
			return err
		}
		return r.skip(1)
	case sub <= 0xff:
		if simdUnassigned(sub) {
			break
		}
		return nil
	case sub >= 0x100 && sub <= 0x113: // relaxed SIMD
		return nil
	}
	return unknownOp(at, opPrefixSIMD, sub)
}

// simdUnassigned reports the holes in the SIMD opcode space 0..0xff.
func simdUnassigned(sub uint32) bool {
	switch sub {
	case 0x9a, 0xa2, 0xa5, 0xa6, 0xaf, 0xb0, 0xb2, 0xb3, 0xb4, 0xbb,
		0xc2, 0xc5, 0xc6, 0xcf, 0xd0, 0xd2, 0xd3, 0xd4, 0xe2, 0xee:
		return true
	}
	return false
}

// atomicInstr skips a 0xfe-prefixed instruction (threads).
func (r *reader) atomicInstr(at int) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 2, sub >= 0x10 && sub <= 0x4e: // notify, wait, loads, stores, rmw
		return r.memarg()
	case sub == 3: // atomic.fence: one reserved byte
		return r.skip(1)
	}
	return unknownOp(at, opPrefixAtoms, sub)
}
