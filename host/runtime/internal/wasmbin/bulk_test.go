package wasmbin

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// bulkPages is the memory of bulkModule: 2.5 parts of BulkChunk, so that
// fills and copies span several parts and end part-way through one.
const bulkPages = 5 * BulkChunk / 2 / 65536

// bulkModule exports fill (d, v, n) and copy (d, s, n), one memory.fill
// or memory.copy each, on a memory of bulkPages pages.
func bulkModule() []byte {
	t := functype([]byte{i32, i32, i32}, nil)
	return module(
		sec(SectionType, vec(t)),
		sec(SectionFunction, vec(u(0), u(0))),
		sec(SectionMemory, vec(cat([]byte{0x00}, u(bulkPages)))),
		sec(SectionExport, vec(
			cat(str("fill"), []byte{0x00, 0x00}),
			cat(str("copy"), []byte{0x00, 0x01}),
			cat(str("memory"), []byte{0x02, 0x00}),
		)),
		sec(SectionCode, vec(
			body(noLocals, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfc, 0x0b, 0x00, 0x0b),
			body(noLocals, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfc, 0x0a, 0x00, 0x00, 0x0b),
		)),
	)
}

// bulkPair is bulkModule, as it is and instrumented, instantiated.
type bulkPair struct {
	native, instrumented api.Module
	y                    *yielder
}

func newBulkPair(tb testing.TB) *bulkPair {
	tb.Helper()
	ctx := context.Background()
	rt, y := newRuntime(tb, ctx, wazero.NewRuntimeConfig())
	in := bulkModule()
	out := mustInstrument(tb, in)
	return &bulkPair{native: instantiate(tb, ctx, rt, in), instrumented: instantiate(tb, ctx, rt, out), y: y}
}

// run applies one fill or copy to both and fails if they disagree on
// whether it traps or on any byte of memory after it.
func (p *bulkPair) run(tb testing.TB, isCopy bool, d, s, n uint32) {
	tb.Helper()
	ctx := context.Background()
	name := "fill"
	if isCopy {
		name = "copy"
	} else {
		s &= 0xff
	}
	_, errN := p.native.ExportedFunction(name).Call(ctx, uint64(d), uint64(s), uint64(n))
	_, errI := p.instrumented.ExportedFunction(name).Call(ctx, uint64(d), uint64(s), uint64(n))
	if (errN == nil) != (errI == nil) {
		tb.Fatalf("%s(%d, %d, %d): native: %v, instrumented: %v", name, d, s, n, errN, errI)
	}
	mn, _ := p.native.Memory().Read(0, p.native.Memory().Size())
	mi, _ := p.instrumented.Memory().Read(0, p.instrumented.Memory().Size())
	if !bytes.Equal(mn, mi) {
		at := 0
		for at < len(mn) && mn[at] == mi[at] {
			at++
		}
		tb.Fatalf("%s(%d, %d, %d): memories differ from byte %d", name, d, s, n, at)
	}
}

// seed writes the same pseudo-random bytes into both memories.
func (p *bulkPair) seed(r *rand.Rand) {
	mn, _ := p.native.Memory().Read(0, p.native.Memory().Size())
	mi, _ := p.instrumented.Memory().Read(0, p.instrumented.Memory().Size())
	for i := 0; i+8 <= len(mn); i += 8 {
		binary.LittleEndian.PutUint64(mn[i:], r.Uint64())
	}
	copy(mi, mn)
}

// TestInstrumentBulk: the helpers that replace memory.fill and
// memory.copy do what the instructions do, byte for byte and trap for
// trap, across the sizes where they change path (BulkSmall, BulkChunk),
// for overlapping copies either way, and out of bounds; and a large fill
// or copy checks the budget once per part.
func TestInstrumentBulk(t *testing.T) {
	p := newBulkPair(t)
	p.seed(rand.New(rand.NewPCG(1, 2)))
	const size = bulkPages * 65536
	type op struct {
		copy    bool
		d, s, n uint32
	}
	tests := []struct {
		name string
		ops  []op
	}{
		{"small", []op{{false, 10, 7, 100}, {true, 5000, 100, 4096}, {true, 100, 5000, 4096}}},
		{"just over small", []op{{false, 3, 9, BulkSmall + 1}, {true, 9000, 3, BulkSmall + 1}}},
		{"parts, forward", []op{{false, 1, 0xab, BulkChunk + 17}, {true, 0, 1000, 2*BulkChunk + 5}}},
		{"parts, backward and overlapping", []op{{true, 1000, 0, 2*BulkChunk + 5}, {true, BulkChunk / 2, BulkChunk/2 - 3, BulkChunk + BulkChunk/2}}},
		{"whole memory", []op{{false, 0, 0x5a, size}, {true, 0, 0, size}}},
		{"exactly a part", []op{{false, 0, 1, BulkChunk}, {true, BulkChunk, 0, BulkChunk}}},
		{"out of bounds, large", []op{{false, 1, 2, size}, {true, 0, 1, size}, {true, 1, 0, size}, {false, size, 0, BulkChunk + 1}}},
		{"out of bounds, small", []op{{false, size - 10, 2, 11}, {true, size - 5, 0, 6}, {true, 0, size - 5, 6}}},
		{"wrapping", []op{{false, 0xffffffff, 0, 2}, {true, 0xfffffff0, 0, BulkChunk + 1}, {true, 0, 0xffff0000, BulkChunk + 1}}},
		{"empty", []op{{false, size, 0, 0}, {true, size, size, 0}, {false, size + 1, 0, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, o := range tt.ops {
				p.run(t, o.copy, o.d, o.s, o.n)
			}
		})
	}

	t.Run("checks per part", func(t *testing.T) {
		p.y.interval = 0 // every check yields: yields count checks
		defer func() { p.y.interval = 1 << 16 }()
		for _, isCopy := range []bool{false, true} {
			p.y.yields.Store(0)
			p.run(t, isCopy, 0, 0, 2*BulkChunk+1)
			// A check before each of the three parts; none for the
			// small calls of the exported function itself.
			if got := p.y.yields.Load(); got != 3 {
				t.Errorf("copy %v: %d checks for three parts, want 3", isCopy, got)
			}
		}
	})
}

// FuzzInstrumentBulk: the helpers against the instructions on arbitrary
// operands, biased towards the sizes and offsets where they change path.
func FuzzInstrumentBulk(f *testing.F) {
	f.Add(false, uint32(0), uint32(0), uint32(BulkChunk+1))
	f.Add(true, uint32(1), uint32(0), uint32(2*BulkChunk))
	f.Add(true, uint32(0), uint32(3), uint32(BulkSmall+1))
	p := newBulkPair(f)
	p.seed(rand.New(rand.NewPCG(3, 4)))
	f.Fuzz(func(t *testing.T, isCopy bool, d, s, n uint32) {
		const size = bulkPages * 65536
		// Most operands in or near the memory.
		d, s, n = d%(size+BulkChunk), s%(size+BulkChunk), n%(size+2*BulkChunk)
		p.run(t, isCopy, d, s, n)
	})
}

// BenchmarkBulk measures memory.fill and memory.copy as the instructions
// and through the helpers, in one run, at the sizes where the helpers
// change path: a small copy (the caller's check counts it), one just over
// BulkSmall (a check of its own), and one part of BulkChunk bytes, whose
// time is the most a guest can run past its deadline in one part (the
// bound docs/reliability.md states). x-helper is the helper's time over
// the instruction's.
func BenchmarkBulk(b *testing.B) {
	p := newBulkPair(b)
	ctx := context.Background()
	for _, n := range []uint32{64, BulkSmall + 1, BulkChunk} {
		for _, name := range []string{"fill", "copy"} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				native, instr := p.native.ExportedFunction(name), p.instrumented.ExportedFunction(name)
				stack := make([]uint64, 3)
				var tn, ti time.Duration
				timed := func(f api.Function, d *time.Duration) {
					stack[0], stack[1], stack[2] = 0, BulkChunk, uint64(n)
					start := time.Now()
					if err := f.CallWithStack(ctx, stack); err != nil {
						b.Fatal(err)
					}
					*d += time.Since(start)
				}
				for b.Loop() {
					timed(native, &tn)
					timed(instr, &ti)
				}
				b.ReportMetric(float64(tn.Nanoseconds())/float64(b.N), "native-ns/op")
				b.ReportMetric(float64(ti.Nanoseconds())/float64(b.N), "helper-ns/op")
				b.ReportMetric(float64(ti)/float64(tn), "x-helper")
			})
		}
	}
}

// BenchmarkLongestStep measures the instructions that do the most work
// between two budget checks of an instrumented guest, each at the most it
// may do: one part of a memory.fill or memory.copy (BulkChunk bytes), a
// memory.init of a 32 MiB segment (the module size limit), and a
// table.fill and a table.grow of MaxTableEntries. The largest is the most
// a call can run past its deadline in one step (docs/abi.md §5.2): each
// is charged its work, with a check, before it runs.
func BenchmarkLongestStep(b *testing.B) {
	const segment = 32 << 20
	seg := make([]byte, segment)
	t3 := functype([]byte{i32, i32, i32}, nil)
	t1 := functype([]byte{i32}, nil)
	wasm := module(
		sec(SectionType, vec(t3, t1)),
		sec(SectionFunction, vec(u(0), u(0), u(0), u(1))),
		sec(SectionTable, vec(cat([]byte{0x70, 0x00}, u(MaxTableEntries)))), // funcref, min 2^20
		sec(SectionMemory, vec(cat([]byte{0x00}, u(2*segment/65536)))),
		sec(SectionExport, vec(
			cat(str("fill"), []byte{0x00, 0x00}),
			cat(str("copy"), []byte{0x00, 0x01}),
			cat(str("init"), []byte{0x00, 0x02}),
			cat(str("tfill"), []byte{0x00, 0x03}),
		)),
		sec(SectionDataCount, u(1)),
		sec(SectionCode, vec(
			body(noLocals, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfc, 0x0b, 0x00, 0x0b),
			body(noLocals, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfc, 0x0a, 0x00, 0x00, 0x0b),
			body(noLocals, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfc, 0x08, 0x00, 0x00, 0x0b),
			body(noLocals, 0x41, 0x00, 0xd0, 0x70, 0x20, 0x00, 0xfc, 0x11, 0x00, 0x0b), // table.fill 0 (0, null, n)
		)),
		sec(SectionData, vec(cat([]byte{0x01}, u(segment), seg))), // passive
	)
	// A table of at most MaxTableEntries, as Instrument caps it, alone.
	tableModule := module(
		sec(SectionType, vec(t1)),
		sec(SectionFunction, vec(u(0))),
		sec(SectionTable, vec(cat([]byte{0x70, 0x01, 0x00}, u(MaxTableEntries)))),
		sec(SectionExport, vec(cat(str("tgrow"), []byte{0x00, 0x00}))),
		sec(SectionCode, vec(body(noLocals, 0xd0, 0x70, 0x20, 0x00, 0xfc, 0x0f, 0x00, 0x1a, 0x0b))),
	)
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	b.Cleanup(func() { rt.Close(ctx) })
	mod := instantiate(b, ctx, rt, wasm)
	steps := []struct {
		name string
		fn   string
		args []uint64
	}{
		{"fill-part", "fill", []uint64{0, 1, BulkChunk}},
		{"copy-part", "copy", []uint64{0, segment, BulkChunk}},
		{"memory.init-32MiB", "init", []uint64{0, 0, segment}},
		{"table.grow-max", "tgrow", []uint64{MaxTableEntries}},
		{"table.fill-max", "tfill", []uint64{MaxTableEntries}},
	}
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) {
			m := mod
			for b.Loop() {
				if s.fn == "tgrow" {
					// A table grows once to its cap: from empty each time.
					b.StopTimer()
					m = instantiate(b, ctx, rt, tableModule)
					b.StartTimer()
				}
				if _, err := m.ExportedFunction(s.fn).Call(ctx, s.args...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
