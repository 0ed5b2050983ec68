package wasmbin

import (
	"fmt"
)

// SegmentCost bounds, in cost units (about one Wasm instruction each), the
// work a guest can do between two budget checks, whatever the shape of its
// code: loops, recursion, call trees, or long straight-line runs. Instrument
// inserts a check wherever the work since the last one could exceed it.
//
// A smaller value makes the host notice a deadline sooner, at the price of
// more checks in large functions; the checks land on calls into big call
// trees and on long runs of code, rarely on the small hot functions where
// they would cost the most.
const SegmentCost = 1 << 14

// funcInfo is what Instrument learns about a defined function before
// rewriting it.
type funcInfo struct {
	// calls are the functions the body names in call and return_call
	// (original indices, in order, repeated as they appear).
	calls []uint32
	// off and end delimit the body (after its size) in the code section.
	off, end int
	// scc is the strongly connected component of the direct call graph
	// the function belongs to.
	scc int32
	// exposed bounds the work of a call to the function that no check
	// inside it accounts for: from its entry to its first check, from its
	// last check to its return, and through it when a path has no check.
	// A caller adds it to its own running cost. Set by the first pass.
	exposed uint32
	// tail bounds the work from the function's last check to its return.
	tail uint32
	// bulk: the body uses memory.fill or memory.copy.
	bulk bool
}

// costs are the per-module inputs of the body walker, set by the first
// pass and read by the second.
type costs struct {
	funcs []funcInfo // by defined function: index minus imported functions
	// sccTail bounds the tail of every function of a component: the work
	// a check after a recursive call accounts for.
	sccTail []uint32
	// indirect bounds the exposed work of any function: the work a check
	// after an indirect call accounts for.
	indirect uint32
}

// scanCalls records the direct callees of every function body of the code
// section r.
func (ins *instrumenter) scanCalls(r reader) ([]funcInfo, error) {
	n, err := r.count(2)
	if err != nil {
		return nil, err
	}
	funcs := make([]funcInfo, n)
	for i := range n {
		at := r.off
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("function %d body at offset %d: size: %w", int(ins.yield)+i, at, err)
		}
		if uint64(size) > uint64(r.end-r.off) {
			return nil, fmt.Errorf("function %d body at offset %d: truncated: size %d, %d bytes left", int(ins.yield)+i, at, size, r.end-r.off)
		}
		br := reader{b: r.b, off: r.off, end: r.off + int(size)}
		funcs[i].off, funcs[i].end = br.off, br.end
		if err := scanBody(&br, &funcs[i]); err != nil {
			return nil, fmt.Errorf("function %d body at offset %d: %w", int(ins.yield)+i, at, err)
		}
		r.off = br.end
	}
	return funcs, r.done()
}

// scanBody decodes one function body, recording its direct calls.
func scanBody(r *reader, f *funcInfo) error {
	n, err := r.count(2)
	if err != nil {
		return fmt.Errorf("locals: %w", err)
	}
	var locals uint64
	for range n {
		c, err := r.u32()
		if err != nil {
			return fmt.Errorf("locals: %w", err)
		}
		// Engines cap a function's locals (V8 and SpiderMonkey at 50,000);
		// wazero allocates them up front, so an absurd count would exhaust
		// the host's memory.
		if locals += uint64(c); locals > MaxLocals {
			return fmt.Errorf("locals: more than %d", MaxLocals)
		}
		if err := r.valType(); err != nil {
			return fmt.Errorf("locals: %w", err)
		}
	}
	for r.off < r.end {
		at := r.off
		op := r.b[at]
		r.off++
		if op == opCall || op == opReturnCall {
			idx, err := r.u32()
			if err != nil {
				return err
			}
			f.calls = append(f.calls, idx)
			continue
		}
		if op == opPrefixMisc {
			if sub, ok := r.peekU32(); ok && (sub == subMemoryFill || sub == subMemoryCopy) {
				f.bulk = true
			}
		}
		if err := r.instr(at, op); err != nil {
			return err
		}
	}
	return nil
}

// components finds the strongly connected components of the direct call
// graph among defined functions (Tarjan's algorithm, iterative so that a
// long call chain cannot exhaust the stack), sets each function's scc, and
// returns the components in reverse topological order:
// every component comes after the components it calls.
func components(funcs []funcInfo, imported uint32) [][]int {
	const unvisited = -1
	n := len(funcs)
	index := make([]int32, n)
	low := make([]int32, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = unvisited
	}
	var (
		stack []int
		comps [][]int
		next  int32
	)
	type frame struct{ v, edge int }
	callee := func(v, e int) int { // -1: not a defined function
		c := funcs[v].calls[e]
		if c < imported || uint64(c-imported) >= uint64(n) {
			return -1
		}
		return int(c - imported)
	}
	for root := range n {
		if index[root] != unvisited {
			continue
		}
		work := []frame{{root, 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(work) > 0 {
			top := &work[len(work)-1]
			v := top.v
			if top.edge < len(funcs[v].calls) {
				w := callee(v, top.edge)
				top.edge++
				switch {
				case w < 0:
				case index[w] == unvisited:
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					work = append(work, frame{w, 0})
				case onStack[w]:
					low[v] = min(low[v], index[w])
				}
				continue
			}
			work = work[:len(work)-1]
			if len(work) > 0 {
				u := work[len(work)-1].v
				low[u] = min(low[u], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			var comp []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp = append(comp, w)
				if w == v {
					break
				}
			}
			for _, w := range comp {
				funcs[w].scc = int32(len(comps))
			}
			comps = append(comps, comp)
		}
	}
	return comps
}

// span is the running cost at a point of a function body: the most work
// done since the last check, over the paths from the function's entry that
// have passed no check yet (clean) and over those that have (dirty). -1
// means no such path.
type span struct{ clean, dirty int64 }

// dead is the span of unreachable code.
var dead = span{-1, -1}

func (s span) reachable() bool { return s.clean >= 0 || s.dirty >= 0 }

// cost is the largest running cost over all paths.
func (s span) cost() int64 { return max(s.clean, s.dirty) }

func (s span) add(c int64) span {
	if s.clean >= 0 {
		s.clean += c
	}
	if s.dirty >= 0 {
		s.dirty += c
	}
	return s
}

func (s span) merge(o span) span {
	return span{max(s.clean, o.clean), max(s.dirty, o.dirty)}
}

// unknown is the span after a point reached from code the walker cannot
// follow (an exception caught), bounded by what any function exposes.
func (s span) unknown() span {
	u := span{-1, SegmentCost}
	if s.clean >= 0 {
		u.clean = SegmentCost
	}
	return u
}

// ctrl is an open block of a body being walked.
type ctrl struct {
	loop bool
	// entry is the span at the start of the block (for an if, after its
	// condition): where else and the implicit else of an if without one
	// start.
	entry span
	// out merges the spans of every way out of the block to its end:
	// branches to its label, the end of the then arm of an if.
	out     span
	hasElse bool
	isTry   bool // legacy try: a catch starts from an unknown span
}

// walker rewrites one function body, inserting budget checks.
type walker struct {
	ins  *instrumenter
	c    *costs
	self int // defined function index
	emit bool
	p    *patcher
	// blocks are the open blocks, outermost first; the function body
	// itself is not one (a branch to it returns).
	blocks []ctrl
	s      span
	// The function's summary: the largest clean span at a check (head),
	// at an exit (through), and the largest dirty span at an exit (tail).
	head, through, tail int64
}

// check inserts a budget check before the instruction at offset at,
// charging weight, and resets the span.
func (w *walker) check(at int, weight int64) {
	if w.s.clean >= 0 {
		w.head = max(w.head, w.s.clean)
	}
	w.s = span{-1, 0}
	if w.emit {
		w.p.copyTo(at)
		w.p.dst = w.ins.appendCheck(w.p.dst, weight)
	}
}

// checkHere charges the running cost.
func (w *walker) checkHere(at int) { w.check(at, w.s.cost()) }

// charge accounts for an instruction of cost c at offset at, inserting a
// check before it if the work since the last check could exceed
// SegmentCost with it.
func (w *walker) charge(at int, c int64) {
	if w.ins.opts.loopsOnly {
		return
	}
	if (w.s.clean >= 0 && w.s.clean+c > SegmentCost) || (w.s.dirty > 0 && w.s.dirty+c > SegmentCost) {
		w.checkHere(at)
	}
	w.s = w.s.add(c)
}

// exit records a way out of the function with the current span.
func (w *walker) exit() {
	w.through = max(w.through, w.s.clean)
	w.tail = max(w.tail, w.s.dirty)
}

// branch sends the current span to label.
func (w *walker) branch(label uint32) {
	if uint64(label) >= uint64(len(w.blocks)) {
		w.exit()
		return
	}
	b := &w.blocks[len(w.blocks)-1-int(label)]
	if !b.loop {
		b.out = b.out.merge(w.s)
	}
	// A branch to a loop goes back to its start, after the check
	// inserted before it: it adds nothing to the loop's entry span.
}

// backward reports whether a branch to label goes back to a loop.
func (w *walker) backward(label uint32) bool {
	return uint64(label) < uint64(len(w.blocks)) && w.blocks[len(w.blocks)-1-int(label)].loop
}

// callCost is the cost a direct call to function idx adds to the caller's
// running cost, and whether the callee is in the caller's component.
func (w *walker) callCost(idx uint32) (int64, bool) {
	imported := w.ins.yield
	if idx < imported || uint64(idx-imported) >= uint64(len(w.c.funcs)) {
		return 1, false // a host function: the host bounds it
	}
	g := &w.c.funcs[idx-imported]
	if g.scc == w.c.funcs[w.self].scc {
		return 0, true
	}
	return int64(g.exposed) + 1, false
}

// body rewrites (emit) or only analyses the function body of w.p: it
// inserts a check before every branch back to a loop, before and after
// every call that may recurse or whose callee is not known, and wherever
// the running cost would pass SegmentCost, and renumbers function indices.
func (w *walker) body() error {
	p := w.p
	r := &p.r
	n, err := r.count(2)
	if err != nil {
		return fmt.Errorf("locals: %w", err)
	}
	for range n {
		if _, err := r.u32(); err != nil {
			return fmt.Errorf("locals: %w", err)
		}
		if err := r.valType(); err != nil {
			return fmt.Errorf("locals: %w", err)
		}
	}
	w.blocks = w.blocks[:0]
	w.s = span{0, -1}
	w.head, w.through, w.tail = -1, -1, -1
	for r.off < r.end {
		at := r.off
		op := r.b[at]
		r.off++
		switch op {
		case opCall, opReturnCall:
			idx, err := r.u32()
			if err != nil {
				return err
			}
			c, recursive := w.callCost(idx)
			// Checks before the call go before its opcode, so they are
			// inserted before the index is renumbered.
			if w.ins.opts.loopsOnly {
				recursive = false
			}
			if recursive && w.s.reachable() {
				// A call that may recurse: a check before it, so that
				// every cycle of calls passes one, and after it, since
				// the tails of the component's functions are not known
				// while it is walked.
				w.check(at, w.s.cost())
			} else if !recursive && w.s.reachable() {
				w.charge(at, c)
			}
			if w.emit {
				r.off = at + 1
				if err := p.funcIdx(); err != nil {
					return err
				}
			}
			if recursive {
				w.s = w.s.add(1)
				if op == opReturnCall {
					w.s = w.s.unknown()
					w.exit()
					w.s = dead
					continue
				}
				if w.s.reachable() {
					w.check(r.off, int64(w.c.sccTail[w.c.funcs[w.self].scc])+1)
				}
				continue
			}
			if op == opReturnCall {
				w.exit()
				w.s = dead
			}
			continue
		case 0x11, 0x13, 0x14, 0x15: // call_indirect return_call_indirect call_ref return_call_ref
			if err := r.instr(at, op); err != nil {
				return err
			}
			// The callee is not known: checks around the call bound the
			// work on either side of it by what any function exposes.
			if w.ins.opts.loopsOnly {
				continue
			}
			if w.s.reachable() {
				w.check(at, w.s.cost())
				w.s = w.s.add(1)
			}
			if op == 0x13 || op == 0x15 {
				if w.s.reachable() {
					w.s = w.s.unknown()
					w.exit()
				}
				w.s = dead
				continue
			}
			if w.s.reachable() {
				w.check(r.off, int64(w.c.indirect)+1)
			}
			continue
		case opPrefixMisc:
			sub, ok := r.peekU32()
			if !ok || w.ins.opts.loopsOnly {
				break
			}
			if sub == subMemoryFill || sub == subMemoryCopy {
				if err := r.bulkMemory(at, sub); err != nil {
					return err
				}
				// A call to the helper that does it in parts, each
				// charged its size (bulk.go).
				if w.s.reachable() {
					w.charge(at, bulkCallCost)
				}
				if w.emit {
					p.copyTo(at)
					p.dst = append(p.dst, opCall)
					p.dst = appendULEB(p.dst, uint64(w.ins.helperIndex(sub == subMemoryCopy)))
					p.last = r.off
				}
				continue
			}
			if c, ok := w.ins.bulkCost(sub); ok {
				if err := r.instr(at, op); err != nil {
					return err
				}
				if w.s.reachable() {
					w.charge(at, c)
				}
				continue
			}
		case opRefFunc:
			w.step(at)
			var err error
			if w.emit {
				err = p.funcIdx()
			} else {
				_, err = r.u32()
			}
			if err != nil {
				return err
			}
			w.s = w.s.add(1)
			continue
		case opBr, opBrIf, opBrOnNull, opBrOnNonNull:
			label, err := r.u32()
			if err != nil {
				return err
			}
			if w.backward(label) {
				w.checkHere(at)
			} else {
				w.step(at)
			}
			w.s = w.s.add(1)
			w.branch(label)
			if op == opBr {
				w.s = dead
			}
			continue
		case opBrTable:
			targets, err := r.count(1)
			if err != nil {
				return err
			}
			labels := make([]uint32, 0, min(targets+1, 64))
			back := false
			for range targets + 1 {
				label, err := r.u32()
				if err != nil {
					return err
				}
				labels = append(labels, label)
				back = back || w.backward(label)
			}
			if back {
				w.checkHere(at)
			} else {
				w.step(at)
			}
			w.s = w.s.add(1)
			for _, l := range labels {
				w.branch(l)
			}
			w.s = dead
			continue
		case opTryTable:
			labels, err := r.tryTableLabels()
			if err != nil {
				return err
			}
			w.step(at)
			w.s = w.s.add(1)
			// A catch clause branches to its label when the body
			// throws, from wherever in the body or its callees: the
			// span there is not known. One naming a loop branches back:
			// the check goes at the start of the body, which every such
			// iteration enters anew.
			loopBack := false
			for _, l := range labels {
				if w.backward(l) {
					loopBack = true
					continue
				}
				saved := w.s
				w.s = w.s.unknown()
				w.branch(l)
				w.s = saved
			}
			w.blocks = append(w.blocks, ctrl{entry: w.s, out: dead})
			if loopBack {
				w.checkHere(r.off)
			}
			continue
		}
		if err := r.instr(at, op); err != nil {
			return err
		}
		switch op {
		case opBlock, opIf, opTry:
			w.step(at)
			w.s = w.s.add(1)
			w.blocks = append(w.blocks, ctrl{entry: w.s, out: dead, isTry: op == opTry})
		case opLoop:
			w.step(at)
			w.s = w.s.add(1)
			w.blocks = append(w.blocks, ctrl{loop: true, entry: w.s, out: dead})
		case 0x05: // else
			if len(w.blocks) == 0 {
				return fmt.Errorf("else outside a block at offset %d", at)
			}
			b := &w.blocks[len(w.blocks)-1]
			b.out = b.out.merge(w.s)
			b.hasElse = true
			w.s = b.entry
		case 0x07, 0x19: // catch, catch_all (legacy)
			if len(w.blocks) == 0 {
				return fmt.Errorf("catch outside a block at offset %d", at)
			}
			b := &w.blocks[len(w.blocks)-1]
			b.out = b.out.merge(w.s)
			b.hasElse = true
			w.s = b.entry.unknown()
		case opEnd, opDelegate:
			if len(w.blocks) == 0 {
				if op == opDelegate || r.off != r.end {
					return fmt.Errorf("unbalanced %#02x at offset %d", op, at)
				}
				w.exit()
				if w.emit {
					p.copyTo(r.end)
				}
				return nil
			}
			b := w.blocks[len(w.blocks)-1]
			w.blocks = w.blocks[:len(w.blocks)-1]
			if !b.loop {
				w.s = w.s.merge(b.out)
				if !b.hasElse && !b.isTry {
					w.s = w.s.merge(b.entry) // the implicit else of an if
				}
			}
			if w.s.reachable() {
				w.s = w.s.add(1)
			}
		case 0x0f: // return
			w.step(at)
			w.s = w.s.add(1)
			w.exit()
			w.s = dead
		case opUnreachable, 0x08, 0x09, 0x0a: // unreachable throw rethrow throw_ref
			w.s = dead
		default:
			w.step(at)
			w.s = w.s.add(1)
		}
	}
	return fmt.Errorf("missing end at offset %d", r.end)
}

// bulkMemory reads the sub-opcode and memory indices of a memory.fill or
// memory.copy (sub) whose prefix at at was read. Both helpers work on
// memory 0: wazero supports no other.
func (r *reader) bulkMemory(at int, sub uint32) error {
	if _, err := r.u32(); err != nil {
		return err
	}
	n := 1
	if sub == subMemoryCopy {
		n = 2
	}
	for range n {
		mem, err := r.u32()
		if err != nil {
			return err
		}
		if mem != 0 {
			return fmt.Errorf("bulk memory instruction at offset %d: memory %d: multiple memories are not supported", at, mem)
		}
	}
	return nil
}

// step inserts a check before the ordinary instruction at offset at if
// its cost of one would take the running cost past SegmentCost. The
// caller adds the cost.
func (w *walker) step(at int) {
	if !w.s.reachable() || w.ins.opts.loopsOnly {
		return
	}
	if (w.s.clean >= 0 && w.s.clean+1 > SegmentCost) || (w.s.dirty > 0 && w.s.dirty+1 > SegmentCost) {
		w.checkHere(at)
	}
}

// summary returns what the walk found: the exposed cost of a call to the
// function, and its tail.
func (w *walker) summary() (exposed, tail uint32) {
	e := max(w.head, w.through, w.tail, 1)
	return uint32(min(e, 1<<30)), uint32(min(max(w.tail, 1), 1<<30))
}
