package wasmbin

import (
	"fmt"
)

// FuncShape is what a function body costs a compiler, as far as its size
// and structure say: the quantities the compile limits (Limits) bound.
type FuncShape struct {
	// Index is the function's index in the module's function index space
	// (imported functions first).
	Index uint32
	// BodyBytes is the size of the body, local declarations included.
	BodyBytes int
	// Locals counts the parameters and declared locals.
	Locals uint64
	// Depth is the deepest nesting of blocks (block, loop, if, try,
	// try_table), the function body not counted.
	Depth int
	// Blocks counts the blocks: each is a point where control flow joins.
	Blocks int
	// BrTable is the most targets (default included) of one br_table.
	BrTable int
	// Edges is the most branches to one label: how many predecessors a
	// compiler's basic block may get. A br_table counts once per entry
	// naming the label.
	Edges int
	// EdgesSquared is the sum over the labels of the square of the
	// branches to each.
	EdgesSquared uint64
}

// ModuleShape is what a module binary costs a compiler, as far as its
// size and structure say, and the counts of what every instance of it
// keeps in the host's memory besides its linear memory and tables.
type ModuleShape struct {
	// Types counts the function types.
	Types int
	// Funcs are the shapes of the function bodies, in order.
	Funcs []FuncShape
	// Globals counts the globals, imported and defined: wazero keeps
	// each as an object of its own in every instance.
	Globals uint64
	// DataSegments counts the data segments, which every instance keeps
	// a reference to.
	DataSegments uint64
	// ElemEntries counts the entries of all element segments, which
	// every instance keeps as a slice of references.
	ElemEntries uint64
}

// Shapes returns the shape of a module binary and of its every function
// body.
func Shapes(wasm []byte) (*ModuleShape, error) {
	m, err := Parse(wasm)
	if err != nil {
		return nil, err
	}
	sh := &ModuleShape{Globals: uint64(m.importCount(KindGlobal))}
	var params []uint64 // by type index
	var funcTypes []uint32
	var shapes []FuncShape
	imported := uint32(m.importCount(KindFunc))
	for _, s := range m.Sections {
		var err error
		switch s.ID {
		case SectionType:
			params, err = paramCounts(s.payloadReader(wasm))
		case SectionFunction:
			funcTypes, err = typeIndices(s.payloadReader(wasm))
		case SectionCode:
			shapes, err = codeShapes(s.payloadReader(wasm), imported, funcTypes, params)
		case SectionGlobal:
			r := s.payloadReader(wasm)
			var n uint32
			n, err = r.u32()
			sh.Globals += uint64(n)
		case SectionData:
			r := s.payloadReader(wasm)
			var n uint32
			n, err = r.u32()
			sh.DataSegments = uint64(n)
		case SectionElement:
			sh.ElemEntries, err = elemEntries(s.payloadReader(wasm))
		}
		if err != nil {
			return nil, s.errorf("%w", err)
		}
	}
	sh.Types, sh.Funcs = len(params), shapes
	return sh, nil
}

// elemEntries reads an element section and returns the number of entries
// of all its segments.
func elemEntries(r reader) (uint64, error) {
	n, err := r.count(2)
	if err != nil {
		return 0, err
	}
	var total uint64
	for i := range n {
		at := r.off
		entries, err := r.elemSegment()
		if err != nil {
			return 0, fmt.Errorf("entry %d at offset %d: %w", i, at, err)
		}
		total += entries
	}
	return total, r.done()
}

// elemSegment reads an element segment in any of its eight forms and
// returns its number of entries.
func (r *reader) elemSegment() (uint64, error) {
	at := r.off
	flags, err := r.u32()
	if err != nil {
		return 0, err
	}
	if flags > 7 {
		return 0, fmt.Errorf("element segment flags %#x at offset %d: unknown", flags, at)
	}
	active, explicitTable, exprs := flags&1 == 0, flags&2 != 0, flags&4 != 0
	if active && explicitTable {
		if _, err := r.u32(); err != nil {
			return 0, err
		}
	}
	if active {
		if err := r.constExpr(); err != nil {
			return 0, err
		}
	}
	if flags != 0 && flags != 4 {
		if exprs {
			err = r.refType()
		} else {
			err = r.expect(0x00)
		}
		if err != nil {
			return 0, err
		}
	}
	n, err := r.count(1)
	if err != nil {
		return 0, err
	}
	for range n {
		if exprs {
			err = r.constExpr()
		} else {
			_, err = r.u32()
		}
		if err != nil {
			return 0, err
		}
	}
	return uint64(n), nil
}

// constExpr skips a constant expression up to its end.
func (r *reader) constExpr() error {
	for {
		at := r.off
		op, err := r.byte()
		if err != nil {
			return err
		}
		if op == opEnd {
			return nil
		}
		if err := r.instr(at, op); err != nil {
			return err
		}
	}
}

// paramCounts reads a type section and returns the number of parameters of
// each function type, by type index.
func paramCounts(r reader) ([]uint64, error) {
	var out []uint64
	_, err := r.funcTypes(func(uint64, bool) error {
		n, _, err := readULEB(r.b[:r.end], r.off, 32)
		if err != nil {
			return atErr(r.off, err)
		}
		out = append(out, n)
		return r.funcType()
	})
	return out, err
}

// typeIndices reads a function section: the type index of each defined
// function.
func typeIndices(r reader) ([]uint32, error) {
	n, err := r.count(1)
	if err != nil {
		return nil, err
	}
	out := make([]uint32, 0, n)
	for range n {
		t, err := r.u32()
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, r.done()
}

// codeShapes reads a code section.
func codeShapes(r reader, imported uint32, funcTypes []uint32, params []uint64) ([]FuncShape, error) {
	n, err := r.count(2) // the smallest body is two bytes
	if err != nil {
		return nil, err
	}
	shapes := make([]FuncShape, 0, n)
	var edges []int // scratch for bodyShape
	for i := range n {
		at := r.off
		idx := imported + uint32(i)
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("function %d body at offset %d: size: %w", idx, at, err)
		}
		if uint64(size) > uint64(r.end-r.off) {
			return nil, fmt.Errorf("function %d body at offset %d: truncated: size %d, %d bytes left", idx, at, size, r.end-r.off)
		}
		sh := FuncShape{Index: idx, BodyBytes: int(size)}
		if i < len(funcTypes) && int(funcTypes[i]) < len(params) {
			sh.Locals = params[funcTypes[i]]
		}
		body := reader{b: r.b, off: r.off, end: r.off + int(size)}
		if edges, err = bodyShape(&body, &sh, edges[:0]); err != nil {
			return nil, fmt.Errorf("function %d body at offset %d: %w", idx, at, err)
		}
		shapes = append(shapes, sh)
		r.off = body.end
	}
	return shapes, r.done()
}

// bodyShape reads a function body into sh. edges is scratch space: the
// branches to each open block so far, from the outermost.
func bodyShape(r *reader, sh *FuncShape, edges []int) ([]int, error) {
	n, err := r.count(2)
	if err != nil {
		return edges, fmt.Errorf("locals: %w", err)
	}
	for range n {
		c, err := r.u32()
		if err != nil {
			return edges, fmt.Errorf("locals: %w", err)
		}
		sh.Locals += uint64(c)
		if err := r.valType(); err != nil {
			return edges, fmt.Errorf("locals: %w", err)
		}
	}
	// The function body's own label is edges[0]: a branch to it returns.
	edges = append(edges, 0)
	branch := func(label uint32) {
		if uint64(label) < uint64(len(edges)) {
			edges[len(edges)-1-int(label)]++
		}
	}
	for r.off < r.end {
		at := r.off
		op := r.b[at]
		r.off++
		switch op {
		case opBr, opBrIf, opBrOnNull, opBrOnNonNull:
			var label uint32
			if label, err = r.u32(); err == nil {
				branch(label)
			}
		case opBrTable:
			var targets int
			if targets, err = r.count(1); err != nil {
				break
			}
			sh.BrTable = max(sh.BrTable, targets+1)
			for range targets + 1 {
				var label uint32
				if label, err = r.u32(); err != nil {
					break
				}
				branch(label)
			}
		case opTryTable:
			var labels []uint32
			labels, err = r.tryTableLabels()
			for _, l := range labels {
				branch(l)
			}
		default:
			err = r.instr(at, op)
		}
		if err != nil {
			return edges, err
		}
		switch op {
		case opBlock, opLoop, opIf, opTry, opTryTable:
			edges = append(edges, 0)
			sh.Blocks++
			sh.Depth = max(sh.Depth, len(edges)-1)
		case opEnd, opDelegate:
			last := len(edges) - 1
			sh.Edges = max(sh.Edges, edges[last])
			sh.EdgesSquared += uint64(edges[last]) * uint64(edges[last])
			edges = edges[:last]
			if last == 0 {
				if op == opDelegate || r.off != r.end {
					return edges, fmt.Errorf("unbalanced %#02x at offset %d", op, at)
				}
				return edges, nil
			}
		}
	}
	return edges, fmt.Errorf("missing end at offset %d", r.end)
}
