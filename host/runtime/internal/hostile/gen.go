package hostile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/wasp-proxy/wasp/abi"
)

// Generate turns arbitrary bytes (a fuzzer's input) into a valid wasp ABI
// v1 module for the topology stage, whose code is made of pieces the
// bytes choose: counted and endless loops, direct, mutual and indirect
// recursion (bounded by a depth counter or not), call_indirect through a
// table the code changes as it runs (table.set, table.grow, table.fill,
// table.copy, table.init, elem.drop), memory.grow, bulk memory
// instructions (memory.fill, memory.copy, memory.init, data.drop) with
// sizes from a few bytes to the whole memory, WASI calls (random_get,
// fd_write, poll_oneoff, proc_exit) with small and huge sizes and counts,
// and an output that is written and valid, malformed, huge, outside
// memory or missing.
//
// Every piece leaves the operand stack as it found it, so any sequence of
// pieces is valid whatever the bytes; running out of bytes reads zeros,
// which choose the plainest option everywhere. The same bytes always give
// the same module.
//
// # Shape
//
// The module imports random_get, fd_write, poll_oneoff and proc_exit from
// wasi_snapshot_preview1 (functions 0 to 3), then defines the ABI marker,
// wasp_buffer, wasp_topology, _initialize (exported only when it runs
// code) and 1 to 4 piece functions p0, p1, ... of type () -> (), each
// with a body of pieces. wasp_topology calls p0, then writes and returns
// its output. One funcref table starts with the first piece functions (an
// active element segment); a passive element segment holds every piece
// function, the marker and wasp_buffer (whose type makes call_indirect
// trap), for table.init. One passive data segment feeds memory.init. A
// mutable i32 global counts the depth of guarded calls.
func Generate(data []byte) *Program {
	g := &gen{in: data, left: maxPieces}
	return g.program()
}

// Program is a module Generate built, with what a harness needs to judge
// how the host ran it.
type Program struct {
	// Wasm is the module binary.
	Wasm []byte
	// Kind is what wasp_topology returns.
	Kind OutputKind
	// Output is the output wasp_topology writes and returns (Kind
	// OutputWritten) when it returns at all; nil for the other kinds.
	// It is shaped for a topology batch of one port with three endpoints
	// (GenPorts, GenEndpoints): its records may be valid or break any
	// rule of the ABI.
	Output []byte
	// Init reports whether _initialize runs generated code, so that
	// creating an instance may take until the instance start deadline.
	Init bool
	// Text lists the program, a line for the module and one per
	// function, for failure messages.
	Text string
}

// The batch the written outputs are shaped for.
const (
	GenPorts     = 1
	GenEndpoints = 3
)

// OutputKind is what a generated stage function returns.
type OutputKind int

const (
	// OutputWritten: Program.Output, written into linear memory just
	// before returning (the writes trap if the address is past the
	// memory).
	OutputWritten OutputKind = iota
	// OutputNone: (0, 0), no output.
	OutputNone
	// OutputHuge: a length of 2^32 - 1 bytes, longer than any memory
	// and any valid output.
	OutputHuge
	// OutputOutside: 16 bytes at 0xFFFF0000, past any memory below 4 GiB.
	OutputOutside
	// OutputInput: the input batch it was given, which is not an output.
	OutputInput
)

var outputKindNames = [...]string{"written", "none", "huge", "outside", "input"}

func (k OutputKind) String() string {
	if int(k) < len(outputKindNames) {
		return outputKindNames[k]
	}
	return fmt.Sprintf("OutputKind(%d)", int(k))
}

// Bounds of a generated program.
const (
	// maxPieceFuncs is the most piece functions a module defines.
	maxPieceFuncs = 4
	// maxDepth is the deepest nesting of loops, blocks and ifs; each
	// level has a local of its own for a loop counter.
	maxDepth = 4
	// maxSeq is the most pieces of one sequence (a body, a loop's body).
	maxSeq = 6
	// maxPieces is the most pieces of a module.
	maxPieces = 48
)

// Function indices: the imports, then the defined functions.
const (
	fnRandomGet = iota
	fnFdWrite
	fnPollOneoff
	fnProcExit
	fnMarker
	fnBuffer
	fnStage
	fnInit
	fnPieces // p0; p1 follows, and so on
)

// Type indices.
const (
	tyVoid   = iota // () -> ()
	tyBuffer        // (i32) -> i32
	tyStage         // (i32, i32) -> i64
	tyTwo           // (i32, i32) -> i32: random_get
	tyFour          // (i32, i32, i32, i32) -> i32: fd_write, poll_oneoff
	tyExit          // (i32) -> (): proc_exit
)

// Indices of the module's global, segments and input buffer.
const (
	depthGlobal = 0 // the depth counter of guarded calls
	passiveElem = 1 // element segment 1: every piece function, the marker and wasp_buffer
	passiveData = 0 // data segment 0, memory.init's source
	// bufferAt is where wasp_buffer puts the input.
	bufferAt = 1024
)

// pieceKind is a kind of piece: statement-like code that leaves the
// operand stack as it found it.
type pieceKind int

const (
	pieceConst        pieceKind = iota // i32.const; drop
	pieceLoop                          // a loop run a number of times
	pieceForever                       // a loop without end
	pieceBlock                         // a block left early by a br_if
	pieceIf                            // if ... else ... end
	pieceCall                          // a direct call, guarded or not
	pieceCallIndirect                  // call_indirect, guarded or not
	pieceTableSet
	pieceTableGrow
	pieceTableFill
	pieceTableCopy
	pieceTableInit
	pieceElemDrop
	pieceMemoryGrow
	pieceMemoryFill
	pieceMemoryCopy
	pieceMemoryInit
	pieceDataDrop
	pieceStore
	pieceRandomGet
	pieceFdWrite
	piecePollOneoff
	pieceProcExit    // only if the next byte is 0
	pieceUnreachable // only if the next byte is 0
	numPieceKinds
)

// PieceNames names every kind of piece as Program.Text writes it.
var PieceNames = [numPieceKinds]string{
	"drop", "loop", "forever", "block", "if", "call", "call_indirect",
	"table.set", "table.grow", "table.fill", "table.copy", "table.init", "elem.drop",
	"memory.grow", "memory.fill", "memory.copy", "memory.init", "data.drop", "store",
	"random_get", "fd_write", "poll_oneoff", "proc_exit", "unreachable",
}

// Choices the bytes pick from. Index 0 is the plainest option of each.
var (
	memoryMins  = []int{1, 2, 16, 256, 1024, 3072, 4096, 4097}
	tableMins   = []int{4, 0, 1, 64, 1 << 16, 1 << 20}
	dataLens    = []int{64, 0, 4096, 1 << 16, 1 << 20}
	wideLocals  = []int{1000, 20000, 49000}
	loopCounts  = []int64{2, 16, 256, 4096, 1 << 16, 1 << 20, 1 << 24, 0}   // 0: 2^32 times
	depthLimits = []int64{1, 2, 4, 8, 12, 16, 24, 64, 1 << 16, 1 << 21, -1} // -1: unguarded
	slots       = []int64{0, 1, 2, 3, 15, 1 << 16, 1<<20 - 1, -1}
	tableGrows  = []int64{1, 16, 1 << 10, 1 << 16, 1 << 20, 1 << 30, -1}
	memoryGrows = []int64{1, 16, 256, 1024, 4096, 1 << 16, -1}
	storeAt     = []int64{0, bufferAt, 65532, 1 << 30}
	outputAt    = []int64{0, 4096, 61440, 1 << 20}
	errorLens   = []int{0, 5, abi.MaxErrorLen, abi.MaxErrorLen + 1}
)

// gen is the state of one Generate.
type gen struct {
	in  []byte
	off int
	// funcs is the number of piece functions; left, how many more pieces
	// the module may get.
	funcs, left int
	dataLen     int
	code        []byte
	text        strings.Builder
}

// next returns the next input byte, or 0 past the end.
func (g *gen) next() byte {
	if g.off >= len(g.in) {
		return 0
	}
	g.off++
	return g.in[g.off-1]
}

// pick returns a choice in [0, n).
func (g *gen) pick(n int) int { return int(g.next()) % n }

func pickOf[T any](g *gen, choices []T) T { return choices[g.pick(len(choices))] }

func (g *gen) program() *Program {
	g.funcs = g.pick(maxPieceFuncs) + 1
	memMin := pickOf(g, memoryMins)
	tableMin := pickOf(g, tableMins)
	g.dataLen = pickOf(g, dataLens)
	buffer := g.pick(16)
	init := -1
	if g.pick(8) == 7 {
		init = g.pick(g.funcs)
	}
	bufferCode := []byte{0x41, 0x80, 0x08} // i32.const 1024
	bufferText := "normal"
	switch buffer {
	case 14:
		bufferCode, bufferText = []byte{0x41, 0x00}, "0"
	case 15:
		bufferCode, bufferText = appendI32(nil, -256), "outside"
	}
	fmt.Fprintf(&g.text, "memory %d pages, table %d, data %d bytes, wasp_buffer %s", memMin, tableMin, g.dataLen, bufferText)
	if init >= 0 {
		fmt.Fprintf(&g.text, ", _initialize calls p%d", init)
	}

	bodies := make([][]byte, g.funcs)
	for i := range bodies {
		wide := 0
		if g.pick(8) == 7 {
			wide = pickOf(g, wideLocals)
		}
		fmt.Fprintf(&g.text, "\np%d", i)
		if wide > 0 {
			fmt.Fprintf(&g.text, " (%d more locals)", wide)
		}
		g.text.WriteString(":")
		g.code = nil
		g.seq(0)
		g.op(0x0b)
		bodies[i] = cat(vec(cat(u(maxDepth+wide), []byte{i32})), g.code)
		bodies[i] = cat(u(len(bodies[i])), bodies[i])
	}

	g.code = []byte{0x10, fnPieces} // call p0
	kind, output := g.output()
	stage := Body(nil, append(g.code, 0x0b)...)

	initCode := []byte{0x0b}
	if init >= 0 {
		initCode = []byte{0x10, byte(fnPieces + init), 0x0b}
	}
	return &Program{
		Wasm:   g.module(memMin, tableMin, bufferCode, stage, initCode, init >= 0, bodies),
		Kind:   kind,
		Output: output,
		Init:   init >= 0,
		Text:   g.text.String(),
	}
}

// module assembles the binary.
func (g *gen) module(memMin, tableMin int, bufferCode, stage, initCode []byte, init bool, bodies [][]byte) []byte {
	types := [][]byte{
		{0x60, 0, 0},
		{0x60, 1, i32, 1, i32},
		{0x60, 2, i32, i32, 1, i64},
		{0x60, 2, i32, i32, 1, i32},
		{0x60, 4, i32, i32, i32, i32, 1, i32},
		{0x60, 1, i32, 0},
	}
	const wasi = "wasi_snapshot_preview1"
	imports := [][]byte{
		cat(str(wasi), str("random_get"), []byte{0x00}, u(tyTwo)),
		cat(str(wasi), str("fd_write"), []byte{0x00}, u(tyFour)),
		cat(str(wasi), str("poll_oneoff"), []byte{0x00}, u(tyFour)),
		cat(str(wasi), str("proc_exit"), []byte{0x00}, u(tyExit)),
	}
	funcs := [][]byte{u(tyVoid), u(tyBuffer), u(tyStage), u(tyVoid)}
	code := [][]byte{
		Body(nil, 0x0b),
		Body(nil, append(bufferCode, 0x0b)...),
		stage,
		Body(nil, initCode...),
	}
	for _, b := range bodies {
		funcs = append(funcs, u(tyVoid))
		code = append(code, b)
	}
	exports := [][]byte{
		cat(str(abi.MarkerExport), []byte{0x00}, u(fnMarker)),
		cat(str(abi.BufferExport), []byte{0x00}, u(fnBuffer)),
		cat(str(abi.StageTopology.Export()), []byte{0x00}, u(fnStage)),
		cat(str("memory"), []byte{0x02}, u(0)),
	}
	if init {
		exports = append(exports, cat(str("_initialize"), []byte{0x00}, u(fnInit)))
	}
	// The active segment fills the table's first entries with the piece
	// functions in turn; the passive one adds two of other types.
	var active, passive [][]byte
	for i := range min(tableMin, 64) {
		active = append(active, u(fnPieces+i%g.funcs))
	}
	for i := range g.funcs {
		passive = append(passive, u(fnPieces+i))
	}
	passive = append(passive, u(fnMarker), u(fnBuffer))
	elems := [][]byte{
		cat([]byte{0x00, 0x41, 0x00, 0x0b}, vec(active...)), // active, table 0, offset 0
		cat([]byte{0x01, 0x00}, vec(passive...)),            // passive, funcref
	}
	var pattern [256]byte
	for i := range pattern {
		pattern[i] = byte(i*7 + 1)
	}
	data := bytes.Repeat(pattern[:], (g.dataLen+255)/256)[:g.dataLen]
	meta := `{"name":"generated","version":"1.0.0","abi":1,"stages":["topology"]}`
	return cat(
		[]byte("\x00asm\x01\x00\x00\x00"),
		section(1, vec(types...)),
		section(2, vec(imports...)),
		section(3, vec(funcs...)),
		section(4, vec(cat([]byte{0x70, 0x00}, u(tableMin)))), // funcref, min only
		section(5, vec(cat([]byte{0x00}, u(memMin)))),
		section(6, vec([]byte{i32, 0x01, 0x41, 0x00, 0x0b})), // the depth counter
		section(7, vec(exports...)),
		section(9, vec(elems...)),
		section(12, u(1)), // data count: memory.init and data.drop need it
		section(10, vec(code...)),
		section(11, vec(cat([]byte{0x01}, u(len(data)), data))), // passive
		section(0, str(abi.MetadataSection), []byte(meta)),
	)
}

// seq appends a sequence of pieces at nesting depth depth.
func (g *gen) seq(depth int) {
	for range g.pick(maxSeq + 1) {
		if g.left == 0 {
			return
		}
		g.left--
		g.text.WriteString(" ")
		g.piece(depth)
	}
}

// body appends a nested sequence in braces.
func (g *gen) body(depth int) {
	g.text.WriteString("{")
	g.seq(depth + 1)
	g.text.WriteString(" }")
}

// piece appends one piece at nesting depth depth.
func (g *gen) piece(depth int) {
	kind := pieceKind(g.pick(int(numPieceKinds)))
	switch kind {
	case pieceLoop, pieceForever, pieceBlock, pieceIf:
		if depth >= maxDepth {
			kind = pieceConst
		}
	case pieceProcExit, pieceUnreachable:
		// Rare: either ends the program.
		if g.next() != 0 {
			kind = pieceConst
		}
	}
	name := PieceNames[kind]
	switch kind {
	case pieceConst:
		v := int64(g.next())
		g.i32(v)
		g.op(0x1a) // drop
		fmt.Fprintf(&g.text, "%s(%d)", name, v)
	case pieceLoop:
		n := pickOf(g, loopCounts)
		if n == 0 {
			fmt.Fprintf(&g.text, "%s×2^32", name)
		} else {
			fmt.Fprintf(&g.text, "%s×%d", name, n)
		}
		// The counter is local $depth, which no enclosing loop uses.
		g.i32(n)
		g.index(0x21, depth) // local.set
		g.op(0x03, 0x40)     // loop
		g.body(depth)
		g.index(0x20, depth) // local.get
		g.i32(1)
		g.op(0x6b)             // i32.sub
		g.index(0x22, depth)   // local.tee
		g.op(0x0d, 0x00, 0x0b) // br_if 0; end
	case pieceForever:
		g.text.WriteString(name)
		g.op(0x03, 0x40) // loop
		g.body(depth)
		g.op(0x0c, 0x00, 0x0b) // br 0; end
	case pieceBlock:
		c := int64(g.next() & 1)
		fmt.Fprintf(&g.text, "%s(br_if %d)", name, c)
		g.op(0x02, 0x40) // block
		g.body(depth)
		g.i32(c)
		g.op(0x0d, 0x00) // br_if 0
		g.body(depth)
		g.op(0x0b)
	case pieceIf:
		c := int64(g.next() & 1)
		fmt.Fprintf(&g.text, "%s(%d)", name, c)
		g.i32(c)
		g.op(0x04, 0x40) // if
		g.body(depth)
		g.op(0x05) // else
		g.text.WriteString("else")
		g.body(depth)
		g.op(0x0b)
	case pieceCall:
		p := g.pick(g.funcs)
		fmt.Fprintf(&g.text, "%s(p%d", name, p)
		g.guarded(func() { g.op(0x10); g.op(u(fnPieces + p)...) })
	case pieceCallIndirect:
		s := pickOf(g, slots)
		fmt.Fprintf(&g.text, "%s([%d]", name, s)
		g.guarded(func() {
			g.i32(s)
			g.op(0x11, tyVoid, 0x00) // call_indirect (type 0) (table 0)
		})
	case pieceTableSet:
		s := pickOf(g, slots)
		fmt.Fprintf(&g.text, "%s([%d]=", name, s)
		g.i32(s)
		g.ref()
		g.op(0x26, 0x00) // table.set 0
		g.text.WriteString(")")
	case pieceTableGrow:
		n := pickOf(g, tableGrows)
		fmt.Fprintf(&g.text, "%s(%d,", name, n)
		g.ref()
		g.i32(n)
		g.fc(15, 0) // table.grow 0
		g.op(0x1a)
		g.text.WriteString(")")
	case pieceTableFill:
		fmt.Fprintf(&g.text, "%s(", name)
		switch g.pick(4) {
		case 0:
			g.text.WriteString("[1],")
			g.i32(1)
			g.ref()
			g.i32(1)
		case 1:
			g.text.WriteString("[0:16],")
			g.i32(0)
			g.ref()
			g.i32(16)
		case 2:
			g.text.WriteString("whole,")
			g.i32(0)
			g.ref()
			g.fc(16, 0) // table.size
		case 3:
			g.text.WriteString("[0:2^20],")
			g.i32(0)
			g.ref()
			g.i32(1 << 20)
		}
		g.fc(17, 0) // table.fill 0
		g.text.WriteString(")")
	case pieceTableCopy:
		switch g.pick(4) {
		case 0:
			fmt.Fprintf(&g.text, "%s([0]<-[1])", name)
			g.i32(0)
			g.i32(1)
			g.i32(1)
		case 1:
			fmt.Fprintf(&g.text, "%s(whole)", name)
			g.i32(0)
			g.i32(0)
			g.fc(16, 0)
		case 2:
			fmt.Fprintf(&g.text, "%s(second half to first)", name)
			g.i32(0)
			g.fc(16, 0)
			g.i32(1)
			g.op(0x76) // i32.shr_u
			g.fc(16, 0)
			g.i32(1)
			g.op(0x76)
		case 3:
			fmt.Fprintf(&g.text, "%s(2^20)", name)
			g.i32(0)
			g.i32(0)
			g.i32(1 << 20)
		}
		g.fc(14, 0, 0) // table.copy 0 0
	case pieceTableInit:
		whole := int64(g.funcs + 2)
		n := []int64{1, whole, whole + 1, 1 << 20}[g.pick(4)]
		d := []int64{0, 1, 16}[g.pick(3)]
		fmt.Fprintf(&g.text, "%s([%d:+%d])", name, d, n)
		g.i32(d)
		g.i32(0)
		g.i32(n)
		g.fc(12, passiveElem, 0) // table.init 1 0
	case pieceElemDrop:
		g.text.WriteString(name)
		g.fc(13, passiveElem)
	case pieceMemoryGrow:
		n := pickOf(g, memoryGrows)
		fmt.Fprintf(&g.text, "%s(%d)", name, n)
		g.i32(n)
		g.op(0x40, 0x00, 0x1a) // memory.grow 0; drop
	case pieceMemoryFill:
		v := int64(g.next())
		fmt.Fprintf(&g.text, "%s(%d,", name, v)
		g.region(func() { g.i32(v) })
		g.text.WriteString(")")
		g.fc(11, 0) // memory.fill 0
	case pieceMemoryCopy:
		fmt.Fprintf(&g.text, "%s(", name)
		switch g.pick(4) {
		case 0:
			g.text.WriteString("[0:+16]<-[1024:+16])")
			g.i32(0)
			g.i32(bufferAt)
			g.i32(16)
		case 1:
			g.text.WriteString("whole)")
			g.i32(0)
			g.i32(0)
			g.memBytes(0)
		case 2:
			g.text.WriteString("second half to first)")
			g.i32(0)
			g.memBytes(1)
			g.memBytes(1)
		case 3:
			g.text.WriteString("64Mi)")
			g.i32(0)
			g.i32(0)
			g.i32(64 << 20)
		}
		g.fc(10, 0, 0) // memory.copy 0 0
	case pieceMemoryInit:
		n := []int64{16, int64(g.dataLen), int64(g.dataLen) + 1, 64 << 20}[g.pick(4)]
		d := []int64{0, bufferAt, 65536}[g.pick(3)]
		fmt.Fprintf(&g.text, "%s([%d:+%d])", name, d, n)
		g.i32(d)
		g.i32(0)
		g.i32(n)
		g.fc(8, passiveData, 0) // memory.init 0 0
	case pieceDataDrop:
		g.text.WriteString(name)
		g.fc(9, passiveData)
	case pieceStore:
		at := pickOf(g, storeAt)
		v := int64(g.next())
		fmt.Fprintf(&g.text, "%s([%d]=%d)", name, at, v)
		g.i32(at)
		g.i32(v)
		g.op(0x36, 0x02, 0x00) // i32.store align=4
	case pieceRandomGet:
		fmt.Fprintf(&g.text, "%s(", name)
		g.region(func() {})
		g.text.WriteString(")")
		g.call(fnRandomGet)
	case pieceFdWrite:
		fd := int64(1 + g.pick(2))
		fmt.Fprintf(&g.text, "%s(fd %d,", name, fd)
		// iovs[0] at 0: {0, 16} or {0, the whole memory}, or whatever
		// memory holds.
		switch g.pick(3) {
		case 1:
			g.text.WriteString(" iovs[0]={0,16},")
			g.store(0, func() { g.i32(0) })
			g.store(4, func() { g.i32(16) })
		case 2:
			g.text.WriteString(" iovs[0]={0,whole},")
			g.store(0, func() { g.i32(0) })
			g.store(4, func() { g.memBytes(0) })
		}
		g.i32(fd)
		g.i32(0)
		switch g.pick(4) {
		case 0:
			g.text.WriteString(" 1 iovec)")
			g.i32(1)
		case 1:
			g.text.WriteString(" 64 iovecs)")
			g.i32(64)
		case 2:
			g.text.WriteString(" iovecs over the whole memory)")
			g.memBytes(3)
		case 3:
			g.text.WriteString(" 2^20 iovecs)")
			g.i32(1 << 20)
		}
		g.i32(bufferAt - 8) // nwritten
		g.call(fnFdWrite)
	case piecePollOneoff:
		fmt.Fprintf(&g.text, "%s(", name)
		switch g.pick(4) {
		case 0:
			g.text.WriteString("1)")
			g.i32(0)
			g.i32(4096)
			g.i32(1)
		case 1:
			g.text.WriteString("64)")
			g.i32(0)
			g.i32(4096)
			g.i32(64)
		case 2:
			// Subscriptions (48 bytes) in the first half, events (32
			// bytes) in the second.
			g.text.WriteString("whole memory)")
			g.i32(0)
			g.memBytes(1)
			g.memBytes(0)
			g.i32(96)
			g.op(0x6e) // i32.div_u
		case 3:
			g.text.WriteString("2^20)")
			g.i32(0)
			g.i32(0)
			g.i32(1 << 20)
		}
		g.i32(bufferAt - 12) // nevents
		g.call(fnPollOneoff)
	case pieceProcExit:
		code := int64(g.pick(3))
		fmt.Fprintf(&g.text, "%s(%d)", name, code)
		g.i32(code)
		g.op(0x10, fnProcExit)
	case pieceUnreachable:
		g.text.WriteString(name)
		g.op(0x00)
	}
}

// region appends the address and the length of a region of memory, with
// mid's operands between them (memory.fill's value): 16 bytes, the first
// page, the whole memory, 64 MiB, or 64 bytes from 8 before its end.
func (g *gen) region(mid func()) {
	switch g.pick(5) {
	case 0:
		g.text.WriteString("[1024:+16]")
		g.i32(bufferAt)
		mid()
		g.i32(16)
	case 1:
		g.text.WriteString("first page")
		g.i32(0)
		mid()
		g.i32(65536)
	case 2:
		g.text.WriteString("whole")
		g.i32(0)
		mid()
		g.memBytes(0)
	case 3:
		g.text.WriteString("[0:+64Mi]")
		g.i32(0)
		mid()
		g.i32(64 << 20)
	case 4:
		g.text.WriteString("[end-8:+64]")
		g.memBytes(0)
		g.i32(8)
		g.op(0x6b) // i32.sub
		mid()
		g.i32(64)
	}
}

// guarded appends call, a call that leaves the stack as it found it,
// either bare or, with a depth limit, only while the depth counter is
// below it (counting the call). The text must be open after the callee.
func (g *gen) guarded(call func()) {
	limit := pickOf(g, depthLimits)
	if limit < 0 {
		g.text.WriteString(")")
		call()
		return
	}
	fmt.Fprintf(&g.text, ", depth<%d)", limit)
	g.index(0x23, depthGlobal) // global.get
	g.i32(limit)
	g.op(0x49, 0x04, 0x40) // i32.lt_u; if
	g.index(0x23, depthGlobal)
	g.i32(1)
	g.op(0x6a)                 // i32.add
	g.index(0x24, depthGlobal) // global.set
	call()
	g.index(0x23, depthGlobal)
	g.i32(1)
	g.op(0x6b) // i32.sub
	g.index(0x24, depthGlobal)
	g.op(0x0b)
}

// ref appends a funcref: a piece function, null, or wasp_buffer, whose
// type makes call_indirect trap.
func (g *gen) ref() {
	switch p := g.pick(g.funcs + 2); {
	case p < g.funcs:
		fmt.Fprintf(&g.text, "p%d", p)
		g.op(0xd2)
		g.op(u(fnPieces + p)...) // ref.func
	case p == g.funcs:
		g.text.WriteString("null")
		g.op(0xd0, 0x70) // ref.null func
	default:
		g.text.WriteString("wasp_buffer")
		g.op(0xd2, fnBuffer)
	}
}

// call appends a call to a WASI function and drops its errno.
func (g *gen) call(fn byte) { g.op(0x10, fn, 0x1a) }

// store appends an i32.store of the value value leaves at address at.
func (g *gen) store(at int64, value func()) {
	g.i32(at)
	value()
	g.op(0x36, 0x02, 0x00)
}

// memBytes appends the memory's size in bytes, shifted right by shift
// (memory.size << (16 - shift)). The memory must be under 4 GiB.
func (g *gen) memBytes(shift int64) {
	g.op(0x3f, 0x00) // memory.size
	g.i32(16 - shift)
	g.op(0x74) // i32.shl
}

// output appends the code of wasp_topology after its call of p0: the
// writes of the output, if any, and the i64 result.
func (g *gen) output() (OutputKind, []byte) {
	kind := OutputWritten
	switch k := g.pick(8); k {
	case 4, 5, 6, 7:
		kind = OutputKind(k - 3)
	}
	switch kind {
	case OutputNone:
		g.i64(0)
	case OutputHuge:
		g.i64(bufferAt<<32 | 0xFFFFFFFF)
	case OutputOutside:
		g.i64(-0x10000<<32 | 16) // 0xFFFF0000 << 32 | 16
	case OutputInput:
		g.op(0x20, 0x00, 0xad) // local.get 0; i64.extend_i32_u
		g.i64(32)
		g.op(0x86, 0x20, 0x01, 0xad, 0x84) // i64.shl; local.get 1; i64.extend_i32_u; i64.or
	}
	if kind != OutputWritten {
		fmt.Fprintf(&g.text, "\noutput: %s", kind)
		return kind, nil
	}
	at := pickOf(g, outputAt)
	out := g.outputBytes()
	for k := 0; k < len(out); k += 4 {
		w := binary.LittleEndian.Uint32(out[k:])
		g.store(at+int64(k), func() { g.i32(int64(int32(w))) })
	}
	g.i64(at<<32 | int64(len(out)))
	fmt.Fprintf(&g.text, "\noutput: %d bytes at %d: % x", len(out), at, out)
	return kind, out
}

// outputBytes returns a topology output for a batch of one port, with
// records that may break the ABI's rules.
func (g *gen) outputBytes() []byte {
	n := GenPorts
	switch g.pick(16) {
	case 14:
		n = 0
	case 15:
		n = GenPorts + 1
	}
	out := make([]byte, abi.OutputHeaderSize)
	le := binary.LittleEndian
	le.PutUint32(out, abi.OutputMagic)
	le.PutUint16(out[4:], abi.Version)
	out[6] = byte(abi.StageTopology)
	le.PutUint32(out[8:], uint32(n))
	for range n {
		if g.pick(4) == 3 {
			msg := make([]byte, pickOf(g, errorLens))
			for i := range msg {
				msg[i] = 'a' + byte(i%26)
			}
			out = le.AppendUint32(out, abi.StatusError)
			out = le.AppendUint32(out, uint32(len(msg)))
			out = append(out, msg...)
			for len(out)%4 != 0 {
				out = append(out, 0)
			}
			continue
		}
		out = le.AppendUint32(out, abi.StatusOK)
		out = le.AppendUint32(out, uint32(g.pick(4))) // mode; 3 is none
		switch c := g.pick(6); c {
		case 5:
			out = le.AppendUint32(out, abi.NilCount)
		default:
			out = le.AppendUint32(out, uint32(c))
			for range c {
				out = le.AppendUint32(out, uint32(g.pick(GenEndpoints+2)))
			}
		}
	}
	le.PutUint32(out[12:], uint32(len(out)))
	if g.pick(8) == 7 {
		out[g.pick(len(out))] = g.next()
	}
	return out
}

func (g *gen) op(b ...byte) { g.code = append(g.code, b...) }

// index appends an instruction with one index immediate (local.get,
// global.set, ...).
func (g *gen) index(op byte, idx int) {
	g.op(op)
	g.op(u(idx)...)
}

// fc appends a 0xFC-prefixed instruction and its immediates.
func (g *gen) fc(sub int, imm ...int) {
	g.op(0xfc)
	g.op(u(sub)...)
	for _, v := range imm {
		g.op(u(v)...)
	}
}

func (g *gen) i32(v int64) { g.code = appendI32(g.code, v) }

func (g *gen) i64(v int64) {
	g.code = appendSigned(append(g.code, 0x42), v)
}

// appendI32 appends i32.const v, v taken modulo 2^32.
func appendI32(b []byte, v int64) []byte {
	return appendSigned(append(b, 0x41), int64(int32(v)))
}

// Seed is an input of Generate chosen to exercise one kind of piece or
// output.
type Seed struct {
	Name string
	Data []byte
}

// Seeds returns inputs of Generate, one per kind of piece and per kind of
// output, each a program whose p0 runs that piece (alone, or in a loop
// or a recursion where that is what the piece is for) and returns a valid
// output. None runs long enough to reach a deadline of 100 ms unless it
// is an endless loop or recursion: they are fuzzing's starting points
// and the unit tests of the harness.
func Seeds() []Seed {
	// header: one function, 1 page, table of 4, 64 bytes of data, the
	// normal wasp_buffer, no _initialize; then p0: no wide locals.
	one := func(piece ...byte) []byte {
		return append([]byte{0, 0, 0, 0, 0, 0, 0, 1}, piece...)
	}
	k := func(p pieceKind) byte { return byte(p) }
	// looped is one(loop×256 { piece }).
	looped := func(piece ...byte) []byte {
		return one(append([]byte{k(pieceLoop), 2, 1}, piece...)...)
	}
	return []Seed{
		{"drop", one(k(pieceConst), 7)},
		// loop×4096 { store([1024]=1) }
		{"loop", one(k(pieceLoop), 3, 1, k(pieceStore), 1, 1)},
		// forever { }
		{"forever", one(k(pieceForever), 0)},
		{"block", one(k(pieceBlock), 1, 1, k(pieceConst), 2, 1, k(pieceConst), 3)},
		{"if", one(k(pieceIf), 0, 1, k(pieceConst), 1, 1, k(pieceConst), 2)},
		// p0 calls itself twice, under a depth of 16: 2^16 calls.
		{"call tree", []byte{0, 0, 0, 0, 0, 0, 0, 2, k(pieceCall), 0, 5, k(pieceCall), 0, 5}},
		{"call unbounded recursion", one(k(pieceCall), 0, 10)},
		// p0 -> p1 -> p0 ..., under a depth of 16.
		{"call mutual recursion", []byte{1, 0, 0, 0, 0, 0, 0, 1, k(pieceCall), 1, 5, 0, 1, k(pieceCall), 0, 5}},
		// table[1] = p0, then call_indirect [1] under a depth of 8.
		{"call_indirect through a changed table", []byte{0, 0, 0, 0, 0, 0, 0, 2, k(pieceTableSet), 1, 0, k(pieceCallIndirect), 1, 3}},
		// Bulk instructions and host calls run 256 times (cheap here: at
		// most 64 KiB each), a mutation away from heavy work.
		{"table.grow", looped(k(pieceTableGrow), 3, 1)},
		{"table.fill", looped(k(pieceTableFill), 2, 1)},
		{"table.copy", looped(k(pieceTableCopy), 2)},
		{"table.init", looped(k(pieceTableInit), 1, 0)},
		{"elem.drop", one(k(pieceElemDrop))},
		{"memory.grow", looped(k(pieceMemoryGrow), 1)},
		{"memory.fill", looped(k(pieceMemoryFill), 0xa5, 2)},
		{"memory.copy", looped(k(pieceMemoryCopy), 2)},
		{"memory.init", looped(k(pieceMemoryInit), 1, 1)},
		{"data.drop", one(k(pieceDataDrop))},
		{"random_get", looped(k(pieceRandomGet), 0)},
		{"fd_write", looped(k(pieceFdWrite), 1, 1, 1)},
		{"poll_oneoff", looped(k(piecePollOneoff), 1)},
		{"proc_exit", one(k(pieceProcExit), 0, 0)},
		{"unreachable", one(k(pieceUnreachable), 0)},
		// Outputs: p0 does nothing; then the output's kind.
		{"output none", []byte{0, 0, 0, 0, 0, 0, 0, 0, 4}},
		{"output huge", []byte{0, 0, 0, 0, 0, 0, 0, 0, 5}},
		{"output outside", []byte{0, 0, 0, 0, 0, 0, 0, 0, 6}},
		{"output input", []byte{0, 0, 0, 0, 0, 0, 0, 0, 7}},
		// An output with an error record, and one of two eligible
		// endpoints, at 4096.
		{"output written (an error record)", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 1}},
		{"output written (two eligible endpoints)", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 2, 0, 2}},
		// _initialize runs p0, an endless loop.
		{"_initialize", []byte{0, 0, 0, 0, 0, 7, 0, 0, 1, k(pieceForever), 0}},
	}
}
