package wasmbin

import (
	"errors"
	"fmt"
	"strings"
)

// InterruptGlobal is the export name of the mutable i32 global Instrument
// adds. The guest traps at its next loop iteration once the host sets it to
// a non-zero value.
const InterruptGlobal = "wasp.interrupt"

// ErrInstrumented is returned by Instrument for a module that already
// exports InterruptGlobal.
var ErrInstrumented = errors.New("wasm: module already exports " + InterruptGlobal)

// Custom sections Instrument drops because the byte offsets they hold no
// longer match the rewritten code section.
const (
	nameSection      = "name"
	debugSectionPref = ".debug_"
)

// interruptGlobalEntry is the global Instrument defines: (mut i32) with
// initialiser i32.const 0.
var interruptGlobalEntry = []byte{0x7f, 0x01, 0x41, 0x00, opEnd}

// Instrument returns a copy of wasm in which every loop can be interrupted
// by the host. It adds a mutable i32 global, initialised to 0 and exported
// as InterruptGlobal, and inserts at the start of every loop body
//
//	global.get $interrupt
//	if
//	  unreachable
//	end
//
// It drops the "name" and ".debug_*" custom sections, whose code offsets
// become stale, and keeps every other section in place. The input is not
// modified.
func Instrument(wasm []byte) (out []byte, err error) {
	m, err := Parse(wasm)
	if err != nil {
		return nil, err
	}
	if _, ok := m.Export(InterruptGlobal); ok {
		return nil, ErrInstrumented
	}
	definedGlobals, globalRest := 0, []byte(nil)
	if s, ok := m.Section(SectionGlobal); ok {
		r := s.payloadReader(wasm)
		n, err := r.u32()
		if err != nil {
			return nil, s.errorf("%w", err)
		}
		definedGlobals, globalRest = int(n), wasm[r.off:s.End]
	}
	exports, exportRest := 0, []byte(nil)
	if s, ok := m.Section(SectionExport); ok {
		r := s.payloadReader(wasm)
		n, err := r.u32()
		if err != nil {
			return nil, s.errorf("%w", err)
		}
		exports, exportRest = int(n), wasm[r.off:s.End]
	}
	gidx := uint64(m.importCount(KindGlobal) + definedGlobals)
	if gidx >= 1<<32-1 {
		return nil, fmt.Errorf("wasm: too many globals (%d)", gidx)
	}
	check := []byte{opGlobalGet}
	check = appendULEB(check, gidx)
	check = append(check, opIf, blockEmpty, opUnreachable, opEnd)

	out = make([]byte, 0, len(wasm)+len(wasm)/8+64)
	out = append(out, wasm[:headerLen]...)
	var scratch []byte
	emitGlobals := func() {
		scratch = appendULEB(scratch[:0], uint64(definedGlobals)+1)
		scratch = append(scratch, globalRest...)
		scratch = append(scratch, interruptGlobalEntry...)
		out = appendSection(out, SectionGlobal, scratch)
	}
	emitExports := func() {
		scratch = appendULEB(scratch[:0], uint64(exports)+1)
		scratch = append(scratch, exportRest...)
		scratch = appendULEB(scratch, uint64(len(InterruptGlobal)))
		scratch = append(scratch, InterruptGlobal...)
		scratch = append(scratch, byte(KindGlobal))
		scratch = appendULEB(scratch, gidx)
		out = appendSection(out, SectionExport, scratch)
	}
	globalsDone, exportsDone := false, false
	for _, s := range m.Sections {
		if s.ID == SectionCustom {
			if s.Name != nameSection && !strings.HasPrefix(s.Name, debugSectionPref) {
				out = append(out, wasm[s.Offset:s.End]...)
			}
			continue
		}
		rank := sectionRank[s.ID]
		if !globalsDone && rank >= sectionRank[SectionGlobal] {
			emitGlobals()
			globalsDone = true
		}
		if !exportsDone && rank >= sectionRank[SectionExport] {
			emitExports()
			exportsDone = true
		}
		switch s.ID {
		case SectionGlobal, SectionExport:
			// Emitted above.
		case SectionCode:
			code, err := instrumentCode(wasm, s, m.importCount(KindFunc), check)
			if err != nil {
				return nil, err
			}
			out = appendSection(out, SectionCode, code)
		default:
			out = append(out, wasm[s.Offset:s.End]...)
		}
	}
	if !globalsDone {
		emitGlobals()
	}
	if !exportsDone {
		emitExports()
	}
	return out, nil
}

// instrumentCode returns the payload of the code section s with check
// inserted at the start of every loop body. importedFuncs numbers functions
// in errors.
func instrumentCode(wasm []byte, s Section, importedFuncs int, check []byte) ([]byte, error) {
	r := s.payloadReader(wasm)
	n, err := r.count(2) // the smallest body is two bytes
	if err != nil {
		return nil, s.errorf("%w", err)
	}
	code := make([]byte, 0, len(s.Payload)+len(s.Payload)/8)
	code = appendULEB(code, uint64(n))
	var body []byte
	for i := range n {
		at := r.off
		size, err := r.u32()
		if err != nil {
			return nil, s.errorf("function %d body at offset %d: size: %w", importedFuncs+i, at, err)
		}
		if uint64(size) > uint64(r.end-r.off) {
			return nil, s.errorf("function %d body at offset %d: truncated: size %d, %d bytes left", importedFuncs+i, at, size, r.end-r.off)
		}
		br := reader{b: wasm, off: r.off, end: r.off + int(size)}
		body, err = instrumentBody(body[:0], br, check)
		if err != nil {
			return nil, s.errorf("function %d body at offset %d: %w", importedFuncs+i, at, err)
		}
		code = appendULEB(code, uint64(len(body)))
		code = append(code, body...)
		r.off = br.end
	}
	if err := r.done(); err != nil {
		return nil, s.errorf("%w", err)
	}
	return code, nil
}

// instrumentBody appends the function body r to dst with check inserted
// after every loop instruction. It decodes every instruction, so that
// immediates are never mistaken for opcodes, and checks that blocks nest
// and the body ends with its final end.
func instrumentBody(dst []byte, r reader, check []byte) ([]byte, error) {
	start := r.off
	n, err := r.count(2)
	if err != nil {
		return nil, fmt.Errorf("locals: %w", err)
	}
	for range n {
		if _, err := r.u32(); err != nil {
			return nil, fmt.Errorf("locals: %w", err)
		}
		if err := r.valType(); err != nil {
			return nil, fmt.Errorf("locals: %w", err)
		}
	}
	last := start // first byte not yet copied to dst
	depth := 0    // open blocks, not counting the function body
	for r.off < r.end {
		at := r.off
		op := r.b[at]
		r.off++
		if err := r.instr(at, op); err != nil {
			return nil, err
		}
		switch op {
		case opBlock, opIf, opTry, opTryTable:
			depth++
		case opLoop:
			depth++
			dst = append(dst, r.b[last:r.off]...)
			dst = append(dst, check...)
			last = r.off
		case opEnd, opDelegate:
			if depth == 0 {
				if op == opDelegate || r.off != r.end {
					return nil, fmt.Errorf("unbalanced %#02x at offset %d", op, at)
				}
				return append(dst, r.b[last:r.end]...), nil
			}
			depth--
		}
	}
	return nil, fmt.Errorf("missing end at offset %d", r.end)
}
