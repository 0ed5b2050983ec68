package wasmbin

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Names Instrument adds to a module. The host must provide the function
// YieldModule.YieldFunc, of type () -> (), to instantiate an instrumented
// module.
const (
	// BudgetGlobal is the export name of the mutable i32 global holding the
	// number of backward branches (loop iterations) left before the guest
	// calls the yield function. It starts at 0, so the first one yields.
	BudgetGlobal = "wasp.budget"
	// YieldModule and YieldFunc name the function import the guest calls
	// when its budget is exhausted.
	YieldModule = "wasp"
	YieldFunc   = "yield"
)

// MaxLocals is the most locals Instrument accepts in one function.
const MaxLocals = 50000

// MaxTableEntries is the most entries a module's tables may hold together
// (Instrument divides it equally among them). wazero keeps a table as a
// slice of 8-byte references in the host's memory, outside the linear
// memory cap, so 2^20 entries cost at most 8 MiB (16 while a grow copies
// them). Go and Rust toolchains put every function whose address is taken
// in one table: tens of thousands of entries for the largest modules.
const MaxTableEntries = 1 << 20

// maxWeight caps what one check charges, so that the budget arithmetic
// stays far from the i32 range.
const maxWeight = 1 << 24

// ErrTooLarge is wrapped by errors about a module that asks for more than
// wasp allows (tables larger than MaxTableEntries).
var ErrTooLarge = errors.New("over the module limits")

// ErrInstrumented is returned by Instrument for a module that already
// exports BudgetGlobal or imports YieldModule.YieldFunc.
var ErrInstrumented = errors.New("wasm: module already instrumented (exports " + BudgetGlobal + " or imports " + YieldModule + "." + YieldFunc + ")")

// Custom sections Instrument drops because the code offsets or function
// indices they hold no longer match the rewritten module.
var droppedCustomPrefixes = []string{
	".debug_",
	"metadata.code.", // branch hints and other code annotations
}

const nameSection = "name"

func dropCustom(name string) bool {
	if name == nameSection {
		return true
	}
	for _, p := range droppedCustomPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Opcodes of the inserted check and of the instructions that hold a
// function index.
const (
	opCall       = 0x10
	opReturnCall = 0x12
	opGlobalSet  = 0x24
	opI32Const   = 0x41
	opI32LtS     = 0x48
	opI32Sub     = 0x6b
	opRefFunc    = 0xd2
)

// budgetGlobalEntry is the global Instrument defines: (mut i32) with
// initialiser i32.const 0.
var budgetGlobalEntry = []byte{0x7f, 0x01, opI32Const, 0x00, opEnd}

// yieldType is the type of the yield import: () -> ().
var yieldType = []byte{0x60, 0x00, 0x00}

// Instrument returns a copy of wasm in which every loop returns control to
// the host periodically. It adds
//
//   - a function import YieldModule.YieldFunc of type () -> (), after the
//     existing imports (reusing a () -> () type of the type section or
//     appending one), and renumbers every reference to a later function:
//     calls, tail calls and ref.func in code and in constant expressions,
//     function exports, the start function and element segments;
//
//   - a mutable i32 global, initialised to 0 and exported as BudgetGlobal;
//
//   - before every branch to a loop label (br, br_if, br_table naming one,
//     br_on_null, br_on_non_null), and at the start of the body of a
//     try_table whose catch clauses name one:
//
//     global.get $budget
//     i32.const 1
//     i32.sub
//     global.set $budget
//     global.get $budget
//     i32.const 0
//     i32.lt_s
//     if
//     call $yield
//     end
//
// It drops the "name", ".debug_*" and "metadata.code.*" custom sections,
// whose function indices or code offsets become stale, and keeps every
// other section in place. The input is not modified, and the same input
// always gives the same output.
func Instrument(wasm []byte) (out []byte, err error) {
	return instrument(wasm, options{})
}

// InstrumentLoopsOnly is Instrument with checks before backward branches
// only, as wasp instrumented modules before it bounded loop-free code: a
// baseline for the benchmarks that measure what bounding all code costs.
// Code without loops runs unbounded under it.
func InstrumentLoopsOnly(wasm []byte) ([]byte, error) {
	return instrument(wasm, options{loopsOnly: true})
}

// options are variants of Instrument for measurements.
type options struct {
	// loopsOnly inserts checks before backward branches only, as wasp
	// did before it bounded loop-free code: the baseline of
	// BenchmarkCallChecks.
	loopsOnly bool
}

func instrument(wasm []byte, o options) (out []byte, err error) {
	m, err := Parse(wasm)
	if err != nil {
		return nil, err
	}
	if _, ok := m.Export(BudgetGlobal); ok {
		return nil, ErrInstrumented
	}
	for _, imp := range m.Imports {
		if imp.Module == YieldModule && imp.Name == YieldFunc {
			return nil, ErrInstrumented
		}
	}
	ins := &instrumenter{wasm: wasm, yield: uint32(m.importCount(KindFunc)), opts: o}
	emptyPayload := []byte{0} // a vector of no entries
	types := reader{b: emptyPayload, end: len(emptyPayload)}
	definedGlobals := 0
	for _, s := range m.Sections {
		var err error
		switch s.ID {
		case SectionType:
			types = s.payloadReader(wasm)
		case SectionGlobal:
			r := s.payloadReader(wasm)
			var n uint32
			n, err = r.u32()
			definedGlobals = int(n)
		}
		if err != nil {
			return nil, s.errorf("%w", err)
		}
	}
	if s, ok := m.Section(SectionCode); ok {
		// Callees first, and whether any body uses memory.fill or
		// memory.copy, which the functions added after the module's
		// own replace (bulk.go).
		if ins.funcs, err = ins.scanCalls(s.payloadReader(wasm)); err != nil {
			return nil, s.errorf("%w", err)
		}
		for _, f := range ins.funcs {
			ins.bulk = ins.bulk || (f.bulk && !o.loopsOnly)
		}
	}
	if err := ins.planTypes(types); err != nil {
		s, _ := m.Section(SectionType)
		return nil, s.errorf("%w", err)
	}
	budget := uint64(m.importCount(KindGlobal) + definedGlobals)
	if budget >= math.MaxUint32 {
		return nil, fmt.Errorf("wasm: too many globals (%d)", budget)
	}
	ins.budget = uint32(budget)
	ins.tables = uint32(m.importCount(KindTable))
	if s, ok := m.Section(SectionTable); ok {
		r := s.payloadReader(wasm)
		n, err := r.u32()
		if err != nil {
			return nil, s.errorf("%w", err)
		}
		ins.tables += n
	}

	out = make([]byte, 0, len(wasm)+len(wasm)/4+64)
	out = append(out, wasm[:headerLen]...)
	// Sections the output must have, in order; an absent one is
	// synthesised from an empty payload before the first section ranked
	// after it.
	added := []SectionID{SectionType, SectionImport, SectionGlobal, SectionExport}
	addMissing := func(rank int) error {
		for len(added) > 0 && sectionRank[added[0]] < rank {
			id := added[0]
			added = added[1:]
			payload, err := ins.section(id, reader{b: emptyPayload, end: len(emptyPayload)})
			if err != nil {
				return fmt.Errorf("wasm: adding section %d (%s): %w", byte(id), id, err)
			}
			out = appendSection(out, id, payload)
		}
		return nil
	}
	for _, s := range m.Sections {
		if s.ID == SectionCustom {
			if !dropCustom(s.Name) {
				out = append(out, wasm[s.Offset:s.End]...)
			}
			continue
		}
		rank := sectionRank[s.ID]
		if err := addMissing(rank); err != nil {
			return nil, err
		}
		if len(added) > 0 && added[0] == s.ID {
			added = added[1:]
		}
		payload, err := ins.section(s.ID, s.payloadReader(wasm))
		if err != nil {
			return nil, s.errorf("%w", err)
		}
		if payload == nil {
			out = append(out, wasm[s.Offset:s.End]...)
		} else {
			out = appendSection(out, s.ID, payload)
		}
	}
	if err := addMissing(math.MaxInt); err != nil {
		return nil, err
	}
	return out, nil
}

// instrumenter holds what Instrument decided about a module before
// rewriting its sections.
type instrumenter struct {
	wasm []byte
	// yield is the function index of the added import: the number of
	// imported functions. Every function index from it on moves up by one.
	yield uint32
	// yieldType is the type index of the import, and bulkType that of
	// the bulk helpers; newTypes are the types appended to the type
	// section for them.
	yieldType, bulkType uint32
	newTypes            [][]byte
	// funcs are the defined functions, from a first pass over the code.
	funcs []funcInfo
	// bulk says whether the module gets the memory.fill and memory.copy
	// helpers (bulk.go), after its own functions.
	bulk bool
	// budget is the global index of the added global.
	budget uint32
	opts   options
	// tables is the number of tables, imported and defined: each may
	// hold MaxTableEntries divided by it.
	tables uint32
}

// planTypes finds a () -> () type, and if the module gets the bulk
// helpers an (i32, i32, i32) -> () type, outside recursion groups in the
// type section r, or plans to append them.
func (ins *instrumenter) planTypes(r reader) error {
	foundYield, foundBulk := false, !ins.bulk
	is := func(t []byte) bool { // t without its form byte
		return r.off+len(t) <= r.end && string(r.b[r.off:r.off+len(t)]) == string(t)
	}
	n, err := r.funcTypes(func(idx uint64, grouped bool) error {
		if !foundYield && !grouped && is(yieldType[1:]) {
			ins.yieldType, foundYield = uint32(idx), true
		}
		if !foundBulk && !grouped && is(bulkType[1:]) {
			ins.bulkType, foundBulk = uint32(idx), true
		}
		return r.funcType()
	})
	if err != nil {
		return err
	}
	if n+2 >= math.MaxUint32 {
		return fmt.Errorf("too many types (%d)", n)
	}
	if !foundYield {
		ins.yieldType = uint32(n) + uint32(len(ins.newTypes))
		ins.newTypes = append(ins.newTypes, yieldType)
	}
	if !foundBulk {
		ins.bulkType = uint32(n) + uint32(len(ins.newTypes))
		ins.newTypes = append(ins.newTypes, bulkType)
	}
	return nil
}

// appendCheck appends a budget check that charges weight, the cost of
// the work since the previous check (at least 1). The budget is
// decremented before it is tested, and the test is for a negative value,
// so that a zero the host writes concurrently (between the two reads)
// still makes the guest yield at the next check instead of wrapping
// around.
func (ins *instrumenter) appendCheck(b []byte, weight int64) []byte {
	weight = min(max(weight, 1), maxWeight)
	b = append(b, opGlobalGet)
	b = appendULEB(b, uint64(ins.budget))
	b = append(b, opI32Const)
	b = appendSLEB(b, weight)
	return ins.appendCharge(b)
}

// appendCharge appends the rest of a check, once the code before it has
// pushed the budget and the weight to charge: subtract, store, and yield
// if the budget is below zero.
func (ins *instrumenter) appendCharge(b []byte) []byte {
	b = append(b, opI32Sub, opGlobalSet)
	b = appendULEB(b, uint64(ins.budget))
	b = append(b, opGlobalGet)
	b = appendULEB(b, uint64(ins.budget))
	b = append(b, opI32Const, 0x00, opI32LtS, opIf, blockEmpty, opCall)
	b = appendULEB(b, uint64(ins.yield))
	return append(b, opEnd)
}

// tableCap is the most entries each table may hold.
func (ins *instrumenter) tableCap() uint32 {
	return MaxTableEntries / max(ins.tables, 1)
}

// section returns the rewritten payload of a section whose payload is r,
// or nil if the section is kept as it is.
func (ins *instrumenter) section(id SectionID, r reader) ([]byte, error) {
	p := &patcher{r: r, last: r.off, shift: ins.yield}
	var err error
	switch id {
	case SectionType:
		if len(ins.newTypes) == 0 {
			return nil, nil
		}
		err = p.appendToVector(ins.newTypes...)
	case SectionFunction:
		if !ins.bulk {
			return nil, nil
		}
		t := appendULEB(nil, uint64(ins.bulkType))
		err = p.appendToVector(t, t)
	case SectionImport:
		entry := appendULEB(nil, uint64(len(YieldModule)))
		entry = append(entry, YieldModule...)
		entry = appendULEB(entry, uint64(len(YieldFunc)))
		entry = append(entry, YieldFunc...)
		entry = append(entry, byte(KindFunc))
		entry = appendULEB(entry, uint64(ins.yieldType))
		err = p.appendToVector(entry)
	case SectionTable:
		err = p.vector(1, func() error { return p.table(ins.tableCap()) })
	case SectionGlobal:
		if err = p.vector(3, p.global); err == nil {
			p.dst = append(p.dst, budgetGlobalEntry...)
			p.added = 1
		}
	case SectionExport:
		if err = p.vector(3, p.export); err == nil {
			p.dst = appendULEB(p.dst, uint64(len(BudgetGlobal)))
			p.dst = append(p.dst, BudgetGlobal...)
			p.dst = append(p.dst, byte(KindGlobal))
			p.dst = appendULEB(p.dst, uint64(ins.budget))
			p.added = 1
		}
	case SectionStart:
		err = p.funcIdx()
	case SectionElement:
		err = p.vector(2, p.element)
	case SectionCode:
		return ins.code(r)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := p.r.done(); err != nil {
		return nil, err
	}
	return p.finish(), nil
}

// patcher copies a section payload (or a function body) while replacing
// function indices and inserting code.
type patcher struct {
	r     reader
	dst   []byte
	last  int    // first byte of r.b not yet copied to dst
	shift uint32 // function indices from shift on move up by one

	// The payload is a vector (read by vector or appendToVector) of count
	// entries, to which added entries were appended. dst holds the
	// entries without the count.
	vec          bool
	count, added uint32
}

// copyTo copies r.b[last:off] to dst.
func (p *patcher) copyTo(off int) {
	p.dst = append(p.dst, p.r.b[p.last:off]...)
	p.last = off
}

// finish copies the rest of the payload and returns the result, with the
// vector count adjusted for appended entries.
func (p *patcher) finish() []byte {
	p.copyTo(p.r.end)
	if !p.vec {
		return p.dst
	}
	out := appendULEB(make([]byte, 0, len(p.dst)+5), uint64(p.count)+uint64(p.added))
	return append(out, p.dst...)
}

// vector reads a vector count and calls entry for each entry, each of at
// least minSize bytes.
func (p *patcher) vector(minSize int, entry func() error) error {
	n, err := p.r.count(minSize)
	if err != nil {
		return err
	}
	p.vec, p.count, p.last = true, uint32(n), p.r.off
	for i := range n {
		at := p.r.off
		if err := entry(); err != nil {
			return fmt.Errorf("entry %d at offset %d: %w", i, at, err)
		}
	}
	p.copyTo(p.r.off)
	return nil
}

// appendToVector appends the encoded entries to the vector that is the
// whole payload, whose entries are copied undecoded.
func (p *patcher) appendToVector(entries ...[]byte) error {
	n, err := p.r.u32()
	if err != nil {
		return err
	}
	p.vec, p.count, p.last = true, n, p.r.off
	p.copyTo(p.r.end)
	p.r.off = p.r.end
	for _, e := range entries {
		p.dst = append(p.dst, e...)
	}
	p.added = uint32(len(entries))
	return nil
}

// funcIdx reads a function index and renumbers it.
func (p *patcher) funcIdx() error {
	at := p.r.off
	idx, err := p.r.u32()
	if err != nil {
		return err
	}
	if idx < p.shift {
		return nil
	}
	if idx == math.MaxUint32 {
		return fmt.Errorf("function index %d at offset %d: out of range", idx, at)
	}
	p.copyTo(at)
	p.dst = appendULEB(p.dst, uint64(idx)+1)
	p.last = p.r.off
	return nil
}

// funcIdxs reads a vector of function indices and renumbers them.
func (p *patcher) funcIdxs() error {
	n, err := p.r.count(1)
	if err != nil {
		return err
	}
	for range n {
		if err := p.funcIdx(); err != nil {
			return err
		}
	}
	return nil
}

// constExpr reads a constant expression up to its end and renumbers the
// functions of its ref.func instructions. Which instructions are constant
// is left to the validator.
func (p *patcher) constExpr() error {
	for {
		at := p.r.off
		op, err := p.r.byte()
		if err != nil {
			return err
		}
		switch op {
		case opEnd:
			return nil
		case opRefFunc:
			err = p.funcIdx()
		default:
			err = p.r.instr(at, op)
		}
		if err != nil {
			return err
		}
	}
}

// constExprs reads a vector of constant expressions.
func (p *patcher) constExprs() error {
	n, err := p.r.count(1)
	if err != nil {
		return err
	}
	for range n {
		if err := p.constExpr(); err != nil {
			return err
		}
	}
	return nil
}

// table reads a table: a table type, or 0x40 0x00, a table type and an
// initialiser (typed function references), capping its size at limit
// entries (see tableType).
func (p *patcher) table(limit uint32) error {
	if p.r.off < p.r.end && p.r.b[p.r.off] == 0x40 {
		p.r.off++
		if err := p.r.expect(0x00); err != nil {
			return err
		}
		if err := p.tableType(limit); err != nil {
			return err
		}
		return p.constExpr()
	}
	return p.tableType(limit)
}

// tableType reads a table type and rewrites its limits so that the table
// never holds more than limit entries: a maximum above limit, or none, is
// replaced by limit, and a minimum above it is an error. Tables live in
// the host's memory, outside the linear memory cap; a table.grow past the
// new maximum fails as the specification says (it returns -1), like a
// memory.grow past the memory cap.
func (p *patcher) tableType(limit uint32) error {
	if err := p.r.refType(); err != nil {
		return err
	}
	at := p.r.off
	flags, err := p.r.byte()
	if err != nil {
		return err
	}
	if flags > 7 {
		return fmt.Errorf("limits flags %#x at offset %d: unknown", flags, at)
	}
	read := func() (uint64, error) { v, err := p.r.u32(); return uint64(v), err }
	if flags&4 != 0 { // 64-bit table
		read = p.r.u64
	}
	lo, err := read()
	if err != nil {
		return err
	}
	hi := uint64(limit)
	if flags&1 != 0 {
		if hi, err = read(); err != nil {
			return err
		}
	}
	if lo > uint64(limit) {
		return fmt.Errorf("table at offset %d: minimum of %d entries is more than the %d allowed (%w)", at, lo, limit, ErrTooLarge)
	}
	p.copyTo(at)
	p.dst = append(p.dst, flags|1)
	p.dst = appendULEB(p.dst, lo)
	p.dst = appendULEB(p.dst, min(hi, uint64(limit)))
	p.last = p.r.off
	return nil
}

// global reads a global: its type and initialiser.
func (p *patcher) global() error {
	if err := p.r.refType(); err != nil {
		return err
	}
	if _, err := p.r.byte(); err != nil { // mutability
		return err
	}
	return p.constExpr()
}

// export reads an export and renumbers function exports.
func (p *patcher) export() error {
	if _, err := p.r.name(); err != nil {
		return err
	}
	kind, err := p.r.byte()
	if err != nil {
		return err
	}
	if ExternKind(kind) == KindFunc {
		return p.funcIdx()
	}
	_, err = p.r.u32()
	return err
}

// element reads an element segment in any of its eight forms.
func (p *patcher) element() error {
	at := p.r.off
	flags, err := p.r.u32()
	if err != nil {
		return err
	}
	active, explicitTable, exprs := flags&1 == 0, flags&2 != 0, flags&4 != 0
	if flags > 7 {
		return fmt.Errorf("element segment flags %#x at offset %d: unknown", flags, at)
	}
	if active && explicitTable {
		if _, err := p.r.u32(); err != nil { // table index
			return err
		}
	}
	if active {
		if err := p.constExpr(); err != nil { // offset
			return err
		}
	}
	// Forms 0 and 4 imply funcref; the others name an element kind (0x00,
	// funcref) or a reference type.
	if flags != 0 && flags != 4 {
		if exprs {
			err = p.r.refType()
		} else {
			err = p.r.expect(0x00)
		}
		if err != nil {
			return err
		}
	}
	if exprs {
		return p.constExprs()
	}
	return p.funcIdxs()
}

// code returns the code section payload r with every function body
// instrumented. It walks the bodies twice: first, callees before callers,
// to learn what a call to each function costs its caller; then in order,
// to rewrite them with that knowledge.
func (ins *instrumenter) code(r reader) ([]byte, error) {
	funcs := ins.funcs
	comps := components(funcs, ins.yield)
	c := &costs{funcs: funcs, sccTail: make([]uint32, len(comps))}
	w := &walker{ins: ins, c: c}
	bodyErr := func(f int, err error) error {
		return fmt.Errorf("function %d body at offset %d: %w", int(ins.yield)+f, funcs[f].off, err)
	}
	for id, comp := range comps {
		for _, f := range comp {
			w.self, w.emit = f, false
			w.p = &patcher{r: reader{b: r.b, off: funcs[f].off, end: funcs[f].end}, shift: ins.yield}
			if err := w.body(); err != nil {
				return nil, bodyErr(f, err)
			}
			funcs[f].exposed, funcs[f].tail = w.summary()
			c.sccTail[id] = max(c.sccTail[id], funcs[f].tail)
			c.indirect = max(c.indirect, funcs[f].exposed)
		}
	}
	code := make([]byte, 0, len(r.b[r.off:r.end])+len(r.b[r.off:r.end])/4+8)
	var helpers [][]byte
	if ins.bulk {
		helpers = ins.helpers()
	}
	code = appendULEB(code, uint64(len(funcs)+len(helpers)))
	var body []byte
	for f := range funcs {
		w.self, w.emit = f, true
		w.p = &patcher{r: reader{b: r.b, off: funcs[f].off, end: funcs[f].end}, dst: body[:0], last: funcs[f].off, shift: ins.yield}
		if err := w.body(); err != nil {
			return nil, bodyErr(f, err)
		}
		body = w.p.dst
		code = appendULEB(code, uint64(len(body)))
		code = append(code, body...)
	}
	for _, h := range helpers {
		code = append(code, h...)
	}
	return code, nil
}

// helperIndex is the function index, in the instrumented module, of the
// memory.copy helper (isCopy) or the memory.fill one: after the module's
// own functions.
func (ins *instrumenter) helperIndex(isCopy bool) uint32 {
	idx := ins.yield + 1 + uint32(len(ins.funcs))
	if isCopy {
		idx++
	}
	return idx
}
