package wasmbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// goldenCase is a hand-assembled module and its expected instrumentation.
type goldenCase struct {
	name     string
	in, want []byte
}

func goldenCases() []goldenCase {
	voidType := functype(nil, nil)
	return []goldenCase{
		{
			name: "no global or export section",
			in: module(
				sec(SectionType, vec(functype([]byte{i32}, nil))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionCode, vec(body(noLocals,
					0x03, 0x40, // loop
					0x20, 0x00, 0x0d, 0x00, // local.get 0, br_if 0
					0x0b, 0x0b))),
			),
			want: module(
				sec(SectionType, vec(functype([]byte{i32}, nil), voidType)),
				sec(SectionImport, vec(yieldImport(1))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionGlobal, vec(budgetGlobal)),
				sec(SectionExport, vec(budgetExport(0))),
				sec(SectionCode, vec(body(noLocals, cat(
					[]byte{0x03, 0x40, 0x20, 0x00}, checkOf(0, 0, 2),
					[]byte{0x0d, 0x00, 0x0b, 0x0b})...))),
			),
		},
		{
			name: "imported and defined globals, custom sections",
			in: module(
				custom("wasp.metadata", 'm', 'd'),
				sec(SectionType, vec(voidType)),
				sec(SectionImport, vec(
					cat(str("env"), str("g"), []byte{0x03, i32, 0x00}),
					cat(str("env"), str("f"), []byte{0x00, 0x00}),
				)),
				sec(SectionFunction, vec(u(0))),
				sec(SectionGlobal, vec(
					[]byte{i32, 0x01, 0x41, 0x05, 0x0b},
					[]byte{i64, 0x00, 0x42, 0x07, 0x0b},
				)),
				sec(SectionExport, vec(cat(str("run"), []byte{0x00, 0x01}))),
				sec(SectionCode, vec(body(noLocals, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b))),
				custom("name"),
				custom(".debug_info", 0x01, 0x02),
				custom("wasp.other", 0x2a),
			),
			want: module(
				custom("wasp.metadata", 'm', 'd'),
				sec(SectionType, vec(voidType)),
				sec(SectionImport, vec(
					cat(str("env"), str("g"), []byte{0x03, i32, 0x00}),
					cat(str("env"), str("f"), []byte{0x00, 0x00}),
					yieldImport(0),
				)),
				sec(SectionFunction, vec(u(0))),
				sec(SectionGlobal, vec(
					[]byte{i32, 0x01, 0x41, 0x05, 0x0b},
					[]byte{i64, 0x00, 0x42, 0x07, 0x0b},
					budgetGlobal,
				)),
				sec(SectionExport, vec(cat(str("run"), []byte{0x00, 0x02}), budgetExport(3))),
				sec(SectionCode, vec(body(noLocals, cat([]byte{0x03, 0x40}, checkOf(3, 1, 1), []byte{0x0c, 0x00, 0x0b, 0x0b})...))),
				custom("wasp.other", 0x2a),
			),
		},
		{
			name: "no type section",
			in: module(
				sec(SectionMemory, vec([]byte{0x00, 0x01})),
				custom("wasp.metadata", 'm'),
			),
			want: module(
				sec(SectionType, vec(voidType)),
				sec(SectionImport, vec(yieldImport(0))),
				sec(SectionMemory, vec([]byte{0x00, 0x01})),
				custom("wasp.metadata", 'm'),
				// Added sections go after the custom sections that
				// follow the last section ranked before them.
				sec(SectionGlobal, vec(budgetGlobal)),
				sec(SectionExport, vec(budgetExport(0))),
			),
		},
		{
			name: "empty module",
			in:   module(),
			want: module(
				sec(SectionType, vec(voidType)),
				sec(SectionImport, vec(yieldImport(0))),
				sec(SectionGlobal, vec(budgetGlobal)),
				sec(SectionExport, vec(budgetExport(0))),
			),
		},
		{
			name: "branches back to loops and out of blocks",
			in: module(
				sec(SectionType, vec(voidType)),
				sec(SectionFunction, vec(u(0), u(0))),
				sec(SectionCode, vec(
					body(noLocals,
						0x03, 0x40, 0x03, 0x40, // loop loop
						0x41, 0x00, 0x0d, 0x01, // br_if 1 (outer loop)
						0x0b, 0x0b, 0x0b),
					body(noLocals,
						0x03, 0x40, 0x0b, // loop end: no branch, no check
						0x02, 0x40, 0x03, 0x40, // block loop
						0x41, 0x00, 0x0d, 0x01, // br_if 1 (block): forwards
						0x41, 0x00, 0x0d, 0x00, // br_if 0 (loop): backwards
						0x41, 0x00, 0x0d, 0x02, // br_if 2 (function): returns
						0x0b, 0x0b, 0x0b),
				)),
			),
			want: module(
				sec(SectionType, vec(voidType)),
				sec(SectionImport, vec(yieldImport(0))),
				sec(SectionFunction, vec(u(0), u(0))),
				sec(SectionGlobal, vec(budgetGlobal)),
				sec(SectionExport, vec(budgetExport(0))),
				sec(SectionCode, vec(
					body(noLocals, cat(
						[]byte{0x03, 0x40, 0x03, 0x40, 0x41, 0x00}, checkOf(0, 0, 3),
						[]byte{0x0d, 0x01, 0x0b, 0x0b, 0x0b})...),
					body(noLocals, cat(
						[]byte{0x03, 0x40, 0x0b, 0x02, 0x40, 0x03, 0x40},
						[]byte{0x41, 0x00, 0x0d, 0x01, 0x41, 0x00}, checkOf(0, 0, 7),
						[]byte{0x0d, 0x00, 0x41, 0x00, 0x0d, 0x02, 0x0b, 0x0b, 0x0b})...),
				)),
			),
		},
		{
			name: "loop with a block type index",
			in: module(
				sec(SectionType, vec(voidType, functype([]byte{i32}, []byte{i32}))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionCode, vec(body(vec(cat(u(1), []byte{i64})),
					0x41, 0x07, // i32.const 7
					0x03, 0x01, 0x41, 0x00, 0x0d, 0x00, 0x0b, // loop (type 1) br_if 0 end
					0x03, 0x81, 0x00, 0x0b, // loop (type 1, padded LEB) end
					0x1a, 0x0b))), // drop end
			),
			want: module(
				sec(SectionType, vec(voidType, functype([]byte{i32}, []byte{i32}))),
				sec(SectionImport, vec(yieldImport(0))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionGlobal, vec(budgetGlobal)),
				sec(SectionExport, vec(budgetExport(0))),
				sec(SectionCode, vec(body(vec(cat(u(1), []byte{i64})), cat(
					[]byte{0x41, 0x07, 0x03, 0x01, 0x41, 0x00}, checkOf(0, 0, 3),
					[]byte{0x0d, 0x00, 0x0b, 0x03, 0x81, 0x00, 0x0b, 0x1a, 0x0b})...))),
			),
		},
		{
			name: "br_table and immediates that look like loop",
			in: module(
				sec(SectionType, vec(functype([]byte{i32}, nil))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionMemory, vec([]byte{0x00, 0x01})),
				sec(SectionCode, vec(body(noLocals,
					0x02, 0x40, 0x02, 0x40, 0x03, 0x40, // block block loop
					0x41, 0x03, 0x1a, // i32.const 3, drop
					0x41, 0x00, 0x29, 0x03, 0x03, 0x1a, // i64.load align=3 offset=3, drop
					0x20, 0x00, 0x0e, 0x03, 0x00, 0x01, 0x03, 0x02, // br_table [0 1 3] 2
					0x0b, 0x0b, 0x0b, 0x0b))),
			),
			want: module(
				sec(SectionType, vec(functype([]byte{i32}, nil), voidType)),
				sec(SectionImport, vec(yieldImport(1))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionMemory, vec([]byte{0x00, 0x01})),
				sec(SectionGlobal, vec(budgetGlobal)),
				sec(SectionExport, vec(budgetExport(0))),
				sec(SectionCode, vec(body(noLocals, cat(
					[]byte{0x02, 0x40, 0x02, 0x40, 0x03, 0x40},
					[]byte{0x41, 0x03, 0x1a, 0x41, 0x00, 0x29, 0x03, 0x03, 0x1a},
					[]byte{0x20, 0x00}, checkOf(0, 0, 9), []byte{0x0e, 0x03, 0x00, 0x01, 0x03, 0x02},
					[]byte{0x0b, 0x0b, 0x0b, 0x0b})...))),
			),
		},
	}
}

func TestInstrumentGolden(t *testing.T) {
	tests := goldenCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustCompile(t, tt.in)
			in := bytes.Clone(tt.in)
			got, err := Instrument(tt.in)
			if err != nil {
				t.Fatalf("Instrument: %v", err)
			}
			if !bytes.Equal(tt.in, in) {
				t.Fatal("Instrument modified its input")
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("Instrument:\n got %x\nwant %x", got, tt.want)
			}
			mustCompile(t, got)
			if _, err := Instrument(got); !errors.Is(err, ErrInstrumented) {
				t.Fatalf("Instrument(instrumented) = %v, want %v", err, ErrInstrumented)
			}
		})
	}

}

// TestInstrumentRuns checks how often an instrumented loop yields, and
// that a yield can stop the guest.
func TestInstrumentRuns(t *testing.T) {
	// (func (export "f") (param i32) (result i32)
	//   (loop (br_if 0 (local.tee 0 (i32.sub (local.get 0) (i32.const 1)))))
	//   (local.get 0))
	in := module(
		sec(SectionType, vec(functype([]byte{i32}, []byte{i32}))),
		sec(SectionFunction, vec(u(0))),
		sec(SectionExport, vec(cat(str("f"), []byte{0x00, 0x00}))),
		sec(SectionCode, vec(body(noLocals,
			0x03, 0x40,
			0x20, 0x00, 0x41, 0x01, 0x6b, 0x22, 0x00, 0x0d, 0x00,
			0x0b,
			0x20, 0x00, 0x0b))),
	)
	out, err := Instrument(in)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt, y := newRuntime(t, ctx, wazero.NewRuntimeConfig())
	// Each iteration costs 5 (local.get, i32.const, i32.sub, local.tee,
	// br_if; the first: loop instead of br_if): a budget of 45 lasts 9.
	y.interval = 45
	mod := instantiate(t, ctx, rt, out)
	f := mod.ExportedFunction("f")
	res, err := f.Call(ctx, 100)
	if err != nil || res[0] != 0 {
		t.Fatalf("f(100) = %v, %v; want [0], nil", res, err)
	}
	// The budget starts at 0: the first iteration yields, then every
	// tenth (interval+1).
	if got := y.yields.Load(); got != 10 {
		t.Errorf("f(100) yielded %d times, want 10", got)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.Call(cctx, 1000); !errors.Is(err, context.Canceled) {
		t.Fatalf("f(1000) with a cancelled context: err = %v, want %v", err, context.Canceled)
	}
}

// TestInstrumentRenumbers runs a module that reaches functions in every way
// a module can name one, before and after instrumentation: the added
// import moves every defined function up by one, and a missed reference
// changes a result.
func TestInstrumentRenumbers(t *testing.T) {
	in := renumberModule()
	mustCompile(t, in)
	out, err := Instrument(in)
	if err != nil {
		t.Fatal(err)
	}
	mustCompile(t, out)

	acc := func(digits ...int32) uint64 {
		var a int32
		for _, d := range digits {
			a = a*10 + d
		}
		return uint64(uint32(a))
	}
	want := map[string]uint64{
		"one":    1,
		"imp":    1000,
		"direct": 1030,
		"tail":   4,
		"table0": acc(1, 2, 3, 4, 5, 6, 1000, 2, 6),
		"table1": 555,
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		wasm []byte
	}{{"original", in}, {"instrumented", out}} {
		t.Run(tc.name, func(t *testing.T) {
			rt, y := newRuntime(t, ctx, wazero.NewRuntimeConfig().WithCoreFeatures(allFeatures))
			_, err := rt.NewHostModuleBuilder("env").NewFunctionBuilder().
				WithFunc(func() uint32 { return 1000 }).Export("imp").Instantiate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			mod := instantiate(t, ctx, rt, tc.wasm)
			for name, w := range want {
				if got := call(t, ctx, mod, name); got[0] != w {
					t.Errorf("%s() = %d, want %d", name, got[0], w)
				}
			}
			if got := mod.ExportedGlobal("started").Get(); got != 71 {
				t.Errorf("global set by the start function = %d, want 71", got)
			}
			if tc.name == "instrumented" && y.yields.Load() == 0 {
				t.Error("the instrumented loops never yielded")
			}
		})
	}
}

// renumberModule is a module that names functions in every way a module
// can.
func renumberModule() []byte {
	// Functions: 0 imported env.imp (returns 1000); 1..6 return 1..6;
	// 7 start; 8 direct; 9 tail; 10 table0; 11 table1.
	ret := functype(nil, []byte{i32})
	void := functype(nil, nil)
	constBody := func(v int) []byte { return body(noLocals, cat([]byte{0x41}, s(v), []byte{0x0b})...) }
	// sumTable folds the first n entries of table tab: acc = acc*10 + f().
	sumTable := func(tab, n byte) []byte {
		return body(vec(cat(u(2), []byte{i32})),
			0x03, 0x40,
			0x20, 0x01, 0x41, 0x0a, 0x6c, // acc * 10
			0x20, 0x00, 0x11, 0x00, tab, // call_indirect (type 0) tab i
			0x6a, 0x21, 0x01, // acc = ... + ...
			0x20, 0x00, 0x41, 0x01, 0x6a, 0x22, 0x00, // i++
			0x41, n, 0x49, 0x0d, 0x00, // br_if i < n
			0x0b,
			0x20, 0x01, 0x0b)
	}
	export := func(name string, kind ExternKind, idx int) []byte { return cat(str(name), []byte{byte(kind)}, u(idx)) }
	refFunc := func(f int) []byte { return cat([]byte{0xd2}, u(f), []byte{0x0b}) }
	offset := func(o int) []byte { return cat([]byte{0x41}, s(o), []byte{0x0b}) }
	return module(
		sec(SectionType, vec(ret, void)),
		sec(SectionImport, vec(cat(str("env"), str("imp"), []byte{0x00, 0x00}))),
		sec(SectionFunction, vec(u(0), u(0), u(0), u(0), u(0), u(0), u(1), u(0), u(0), u(0), u(0))),
		sec(SectionTable, vec(
			[]byte{funcref, 0x00, 0x09},                              // table 0, filled by the segments and the start function
			cat([]byte{0x40, 0x00, funcref, 0x00, 0x03}, refFunc(5)), // table 1, initialised to function 5
		)),
		sec(SectionGlobal, vec(
			cat([]byte{funcref, 0x00}, refFunc(6)), // global 0: function 6
			[]byte{i32, 0x01, 0x41, 0x00, 0x0b},    // global 1: set by the start function
		)),
		sec(SectionExport, vec(
			export("one", KindFunc, 1),
			export("imp", KindFunc, 0),
			export("direct", KindFunc, 8),
			export("tail", KindFunc, 9),
			export("table0", KindFunc, 10),
			export("table1", KindFunc, 11),
			export("started", KindGlobal, 1),
		)),
		sec(SectionStart, u(7)),
		sec(SectionElement, vec(
			cat(u(0), offset(0), vec(u(1), u(2))),                        // active, table 0: slots 0, 1
			cat(u(1), []byte{0x00}, vec(u(6))),                           // passive: table.init into slot 5
			cat(u(2), u(0), offset(2), []byte{0x00}, vec(u(3))),          // active, explicit table: slot 2
			cat(u(3), []byte{0x00}, vec(u(2))),                           // declarative
			cat(u(4), offset(3), vec(refFunc(4))),                        // active, expressions: slot 3
			cat(u(5), []byte{funcref}, vec(refFunc(0))),                  // passive, expressions: slot 6
			cat(u(6), u(0), offset(4), []byte{funcref}, vec(refFunc(5))), // active, explicit table, expressions: slot 4
			cat(u(7), []byte{funcref}, vec(refFunc(3))),                  // declarative, expressions
		)),
		sec(SectionCode, vec(
			constBody(1), constBody(2), constBody(3), constBody(4), constBody(5), constBody(6),
			body(noLocals,
				0x41, 0x05, 0x41, 0x00, 0x41, 0x01, 0xfc, 0x0c, 0x01, 0x00, // table.init 0 elem 1: slot 5
				0x41, 0x06, 0x41, 0x00, 0x41, 0x01, 0xfc, 0x0c, 0x05, 0x00, // table.init 0 elem 5: slot 6
				0x41, 0x07, 0xd2, 0x02, 0x26, 0x00, // table.set 0 slot 7 (ref.func 2)
				0x41, 0x08, 0x23, 0x00, 0x26, 0x00, // table.set 0 slot 8 (global 0)
				0x10, 0x01, 0x41, 0xc6, 0x00, 0x6a, 0x24, 0x01, // global 1 = f1() + 70
				0x0b),
			body(noLocals, 0x10, 0x00, 0x10, 0x03, 0x41, 0x0a, 0x6c, 0x6a, 0x0b), // imp() + f3()*10
			body(noLocals, 0x12, 0x04, 0x0b),                                     // return_call f4
			sumTable(0, 9),
			sumTable(1, 3),
		)),
	)
}

// TestInstrumentRenumbersWideIndices checks renumbering across a LEB128
// length boundary: function 127 becomes 128, one byte longer.
func TestInstrumentRenumbersWideIndices(t *testing.T) {
	const n = 130
	funcs := make([][]byte, n+1)
	bodies := make([][]byte, n+1)
	for i := range n {
		funcs[i] = u(0)
		bodies[i] = body(noLocals, cat([]byte{0x41}, s(i*3), []byte{0x0b})...)
	}
	// Function n calls 126, 127 and 128 and sums their results.
	funcs[n] = u(0)
	bodies[n] = body(noLocals, 0x10, 0x7e, 0x10, 0x7f, 0x6a, 0x10, 0x80, 0x01, 0x6a, 0x0b)
	in := module(
		sec(SectionType, vec(functype(nil, []byte{i32}))),
		sec(SectionFunction, vec(funcs...)),
		sec(SectionExport, vec(
			cat(str("sum"), []byte{0x00}, u(n)),
			cat(str("f127"), []byte{0x00}, u(127)),
		)),
		sec(SectionCode, vec(bodies...)),
	)
	out, err := Instrument(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]byte{
		{0x10, 0x7f, 0x10, 0x80, 0x01, 0x6a, 0x10, 0x81, 0x01, 0x6a, 0x0b}, // body of sum
		cat(str("f127"), []byte{0x00}, u(128)),                             // export
	} {
		if !bytes.Contains(out, want) {
			t.Errorf("instrumented module lacks %x", want)
		}
	}
	ctx := context.Background()
	rt, _ := newRuntime(t, ctx, wazero.NewRuntimeConfig())
	mod := instantiate(t, ctx, rt, out)
	if got := call(t, ctx, mod, "sum"); got[0] != (126+127+128)*3 {
		t.Errorf("sum() = %d, want %d", got[0], (126+127+128)*3)
	}
	if got := call(t, ctx, mod, "f127"); got[0] != 127*3 {
		t.Errorf("f127() = %d, want %d", got[0], 127*3)
	}
}

func TestInstrumentErrors(t *testing.T) {
	withBody := func(code ...byte) []byte {
		return module(
			sec(SectionType, vec(functype(nil, nil))),
			sec(SectionFunction, vec(u(0))),
			sec(SectionCode, vec(body(noLocals, code...))),
		)
	}
	tests := []struct {
		name string
		in   []byte
		is   error
		msg  string
	}{
		{name: "not a module", in: []byte("hello"), msg: "wasm: header at offset 0: truncated"},
		{
			name: "exports the budget",
			in: module(
				sec(SectionType, vec(functype(nil, nil))),
				sec(SectionExport, vec(cat(str(BudgetGlobal), []byte{0x03, 0x00}))),
			),
			is: ErrInstrumented,
		},
		{
			name: "imports yield",
			in: module(
				sec(SectionType, vec(functype(nil, nil))),
				sec(SectionImport, vec(yieldImport(0))),
			),
			is: ErrInstrumented,
		},
		{
			name: "function index overflow",
			in:   withBody(0x10, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x0b),
			msg:  "function index 4294967295 at offset 24: out of range",
		},
		{
			name: "unknown element segment form",
			in: module(
				sec(SectionType, vec(functype(nil, nil))),
				sec(SectionElement, vec(cat(u(8), []byte{0x00, 0x00}))),
			),
			msg: "element segment flags 0x8",
		},
		{name: "GC opcode", in: withBody(0xfb, 0x00, 0x0b), is: ErrUnknownOpcode, msg: "function 0 body at offset 21: unknown opcode 0xfb at offset 23"},
		{name: "unassigned opcode", in: withBody(0x27, 0x0b), is: ErrUnknownOpcode, msg: "unknown opcode 0x27"},
		{name: "unassigned SIMD opcode", in: withBody(0xfd, 0x9a, 0x01, 0x0b), is: ErrUnknownOpcode, msg: "unknown opcode 0xfd 154"},
		{name: "unknown misc opcode", in: withBody(0xfc, 0x12, 0x0b), is: ErrUnknownOpcode, msg: "unknown opcode 0xfc 18"},
		{name: "unknown atomic opcode", in: withBody(0xfe, 0x04, 0x0b), is: ErrUnknownOpcode, msg: "unknown opcode 0xfe 4"},
		{name: "truncated immediate", in: withBody(0x41), is: errTruncated},
		{name: "missing end", in: withBody(0x03, 0x40, 0x0b), msg: "missing end"},
		{name: "end before body end", in: withBody(0x0b, 0x01), msg: "unbalanced 0x0b"},
		{name: "negative block type", in: withBody(0x02, 0x80, 0x7f, 0x0b, 0x0b), msg: "block type -128 at offset 24: invalid"},
		{name: "bad try_table catch", in: withBody(0x1f, 0x40, 0x01, 0x07, 0x0b, 0x0b), msg: "try_table catch kind 0x7"},
		{
			name: "body larger than section",
			in: module(
				sec(SectionType, vec(functype(nil, nil))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionCode, vec([]byte{0x10, 0x00, 0x0b})),
			),
			msg: "truncated: size 16, 2 bytes left",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Instrument(tt.in)
			if err == nil {
				t.Fatal("Instrument succeeded, want error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %q, want it to contain %q", err, tt.msg)
			}
		})
	}
}

// TestInstrumentDecodesExtensions checks that instructions of every
// supported extension are skipped with their immediates, by instrumenting a
// loop after them.
func TestInstrumentDecodesExtensions(t *testing.T) {
	memarg := []byte{0x43, 0x00, 0x08} // align flags with the multi-memory bit, memory 0, offset 8
	tests := []struct {
		name string
		code []byte
		want []byte // code after instrumentation, if function indices change
	}{
		{name: "sign extension", code: []byte{0xc0, 0xc4}},
		{name: "sat trunc", code: []byte{0xfc, 0x00, 0xfc, 0x07}},
		// memory.fill and memory.copy become calls: TestInstrumentBulk.
		{name: "bulk memory", code: []byte{0xfc, 0x08, 0x03, 0x00, 0xfc, 0x09, 0x03}},
		{
			name: "bulk table",
			code: []byte{0xfc, 0x0c, 0x03, 0x03, 0xfc, 0x0d, 0x03, 0xfc, 0x0e, 0x03, 0x03, 0xfc, 0x0f, 0x03, 0xfc, 0x10, 0x03, 0xfc, 0x11, 0x03},
			// table.copy, table.grow and table.fill are charged the most
			// entries a table may hold: a check goes before each, and
			// before whatever follows.
			want: cat([]byte{0xfc, 0x0c, 0x03, 0x03, 0xfc, 0x0d, 0x03}, checkOf(0, 0, 1), []byte{0xfc, 0x0e, 0x03, 0x03}, checkOf(0, 0, 1),
				[]byte{0xfc, 0x0f, 0x03}, checkOf(0, 0, 1), []byte{0xfc, 0x10, 0x03}, checkOf(0, 0, 1), []byte{0xfc, 0x11, 0x03}, checkOf(0, 0, 1)),
		},
		{
			name: "reference types",
			code: []byte{0xd0, 0x70, 0xd0, 0x03, 0xd1, 0xd2, 0x03, 0x25, 0x03, 0x26, 0x03, 0x1c, 0x01, 0x6f, 0x1c, 0x01, 0x64, 0x03},
			want: []byte{0xd0, 0x70, 0xd0, 0x03, 0xd1, 0xd2, 0x04, 0x25, 0x03, 0x26, 0x03, 0x1c, 0x01, 0x6f, 0x1c, 0x01, 0x64, 0x03},
		},
		{
			name: "calls",
			code: []byte{0x10, 0x03, 0x11, 0x03, 0x00, 0x12, 0x03, 0x13, 0x03, 0x03, 0x14, 0x03, 0x15, 0x03},
			// Function 3 is not defined: a call to it costs one. An
			// indirect call gets a check before and after it, and code
			// after a tail call is unreachable.
			want: cat([]byte{0x10, 0x04}, checkOf(0, 0, 1), []byte{0x11, 0x03, 0x00}, checkOf(0, 0, 1),
				[]byte{0x12, 0x04, 0x13, 0x03, 0x03, 0x14, 0x03, 0x15, 0x03}),
		},
		{name: "multi-memory memarg", code: cat([]byte{0x28}, memarg, []byte{0x3f, 0x03, 0x40, 0x03})},
		{name: "consts", code: []byte{0x41, 0x83, 0x80, 0x00, 0x42, 0x7f, 0x43, 0x03, 0x03, 0x03, 0x03, 0x44, 3, 3, 3, 3, 3, 3, 3, 3}},
		{name: "SIMD", code: cat(
			[]byte{0xfd, 0x00}, memarg,
			[]byte{0xfd, 0x0c}, bytes.Repeat([]byte{0x03}, 16),
			[]byte{0xfd, 0x0d}, bytes.Repeat([]byte{0x03}, 16),
			[]byte{0xfd, 0x15, 0x03, 0xfd, 0x22, 0x03},
			[]byte{0xfd, 0x54}, memarg, []byte{0x03},
			[]byte{0xfd, 0x5c}, memarg,
			[]byte{0xfd, 0xff, 0x01, 0xfd, 0x80, 0x02, 0xfd, 0x93, 0x02},
		)},
		{name: "atomics", code: cat([]byte{0xfe, 0x00}, memarg, []byte{0xfe, 0x03, 0x00, 0xfe, 0x4e}, memarg)},
		{
			name: "exception handling",
			code: []byte{
				0x1f, 0x40, 0x04, 0x00, 0x03, 0x03, 0x01, 0x03, 0x03, 0x02, 0x03, 0x03, 0x03, 0x0b, // try_table with four catches
				0x06, 0x40, 0x08, 0x03, 0x07, 0x03, 0x19, 0x09, 0x03, 0x0b, // try throw catch catch_all rethrow end
				0x06, 0x40, 0x18, 0x03, // try delegate
				0x0a,
			},
			// What a catch runs after is not known: the next
			// instruction gets a check.
			want: cat([]byte{
				0x1f, 0x40, 0x04, 0x00, 0x03, 0x03, 0x01, 0x03, 0x03, 0x02, 0x03, 0x03, 0x03, 0x0b,
				0x06, 0x40, 0x08, 0x03, 0x07, 0x03, 0x19, 0x09, 0x03, 0x0b,
			}, checkOf(0, 0, SegmentCost+1), []byte{0x06, 0x40, 0x18, 0x03, 0x0a}),
		},
		{name: "typed function references", code: []byte{0xd3, 0xd4, 0x03, 0xd5, 0xd6, 0x03}},
		{
			name: "try_table catching into a loop",
			code: []byte{0x03, 0x40, 0x1f, 0x40, 0x02, 0x00, 0x00, 0x01, 0x02, 0x00, 0x0b, 0x0b}, // loop try_table (catch 0 1) (catch_all 0) end end
			want: cat([]byte{0x03, 0x40, 0x1f, 0x40, 0x02, 0x00, 0x00, 0x01, 0x02, 0x00}, checkOf(0, 0, 1), []byte{0x0b, 0x0b}),
		},
		{
			name: "br_on_null and br_on_non_null to a loop",
			code: []byte{0x03, 0x40, 0xd0, 0x70, 0xd4, 0x00, 0x1a, 0xd0, 0x70, 0xd6, 0x00, 0x0b},
			want: cat([]byte{0x03, 0x40, 0xd0, 0x70}, checkOf(0, 0, 1), []byte{0xd4, 0x00, 0x1a, 0xd0, 0x70}, checkOf(0, 0, 1), []byte{0xd6, 0x00, 0x0b}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := module(
				sec(SectionType, vec(functype(nil, nil))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionCode, vec(body(noLocals, cat(tt.code, []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b})...))),
			)
			got, err := Instrument(in)
			if err != nil {
				t.Fatalf("Instrument: %v", err)
			}
			code := tt.code
			if tt.want != nil {
				code = tt.want
			}
			want := module(
				sec(SectionType, vec(functype(nil, nil))),
				sec(SectionImport, vec(yieldImport(0))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionGlobal, vec(budgetGlobal)),
				sec(SectionExport, vec(budgetExport(0))),
				sec(SectionCode, vec(body(noLocals, cat(code, []byte{0x03, 0x40}, checkOf(0, 0, 1), []byte{0x0c, 0x00, 0x0b, 0x0b})...))),
			)
			// Where the checks go is the point here, not their weights,
			// whose encodings change the bodies' sizes.
			if got, want := unweighted(firstBody(t, got)), unweighted(firstBody(t, want)); !bytes.Equal(got, want) {
				t.Fatalf("Instrument's body:\n got %x\nwant %x", got, want)
			}
			gotMod, err := Parse(got)
			if err != nil {
				t.Fatal(err)
			}
			wantMod, _ := Parse(want)
			for _, ws := range wantMod.Sections {
				if gs, ok := gotMod.Section(ws.ID); ws.ID != SectionCode && (!ok || !bytes.Equal(gs.Payload, ws.Payload)) {
					t.Errorf("section %s: got %x, want %x", ws.ID, gs.Payload, ws.Payload)
				}
			}
		})
	}
}

// firstBody returns the first function body of wasm's code section,
// without its size.
func firstBody(t *testing.T, wasm []byte) []byte {
	t.Helper()
	m, err := Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := m.Section(SectionCode)
	if !ok {
		t.Fatal("no code section")
	}
	r := s.payloadReader(wasm)
	if _, err := r.u32(); err != nil {
		t.Fatal(err)
	}
	size, err := r.u32()
	if err != nil {
		t.Fatal(err)
	}
	return r.b[r.off : r.off+int(size)]
}

// FuzzInstrument checks that Instrument never panics, that its output
// parses, and, differentially against wazero's validator, that it accepts
// every module wazero accepts (unless already instrumented) and keeps it
// valid. Sections Instrument decodes (types, tables, globals, exports,
// start, elements, code) are decoded as laxly as wazero does where wazero
// is laxer than the specification, such as any byte as a table's type.
func FuzzInstrument(f *testing.F) {
	for _, c := range goldenCases() {
		f.Add(c.in)
	}
	for _, seed := range extensionSeeds() {
		f.Add(seed)
	}
	f.Add(renumberModule())
	// wazero takes any byte as the type of an imported table.
	f.Add(module(sec(SectionImport, vec(cat(str("m"), str(""), []byte{0x01, 0x30, 0x00, 0x30})))))
	f.Add(module(
		sec(SectionType, vec(functype([]byte{i32}, nil))),
		sec(SectionFunction, vec(u(0))),
		sec(SectionCode, vec(body(noLocals, 0x03, 0x40, 0x20, 0x00, 0x0d, 0x00, 0x0b, 0x0b))),
	))
	f.Add(module(
		sec(SectionType, vec(functype(nil, nil))),
		sec(SectionImport, vec(cat(str("env"), str("g"), []byte{0x03, i32, 0x00}))),
		sec(SectionFunction, vec(u(0))),
		sec(SectionGlobal, vec([]byte{i32, 0x01, 0x41, 0x05, 0x0b})),
		sec(SectionExport, vec(cat(str("run"), []byte{0x00, 0x00}))),
		sec(SectionCode, vec(body(noLocals, 0x02, 0x40, 0x03, 0x40, 0x0e, 0x01, 0x00, 0x01, 0x0b, 0x0b, 0x0b))),
		custom("name", 0x00),
	))
	f.Add(module(
		sec(SectionType, vec(functype(nil, nil))),
		sec(SectionFunction, vec(u(0))),
		sec(SectionCode, vec(body(noLocals, 0xfd, 0x0c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0x1a,
			0x1f, 0x40, 0x01, 0x02, 0x00, 0x0b, 0xfe, 0x03, 0x00, 0xfc, 0x0a, 0x00, 0x00, 0x03, 0x40, 0x0b, 0x0b))),
	))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(allFeatures))
	defer rt.Close(ctx)
	valid := func(wasm []byte) (err error) {
		// wazero's decoder panics on some malformed inputs (huge local
		// counts); the host recovers from that in runtime.Load, and here it
		// counts as a rejection.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("wazero panicked: %v", r)
			}
		}()
		if !boundedLEBs(wasm) {
			// wazero's decoder preallocates from vector counts it has not
			// checked against the input size; a fuzzed count of 2^32 makes
			// it run out of memory. Such modules get no oracle.
			return errors.New("not checked")
		}
		cm, err := rt.CompileModule(ctx, wasm)
		if err == nil {
			cm.Close(ctx)
		}
		return err
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Instrument(in)
		if err != nil {
			if !errors.Is(err, ErrInstrumented) && valid(in) == nil {
				t.Fatalf("Instrument rejected a module wazero accepts: %v", err)
			}
			return
		}
		m, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Instrument(in)): %v", err)
		}
		if e, ok := m.Export(BudgetGlobal); !ok || e.Kind != KindGlobal {
			t.Fatalf("instrumented module exports %v", m.Exports)
		}
		if imp := m.Imports[len(m.Imports)-1]; imp != (Import{YieldModule, YieldFunc, KindFunc}) {
			t.Fatalf("instrumented module's last import is %v", imp)
		}
		if valid(in) == nil {
			if err := valid(out); err != nil {
				t.Fatalf("wazero accepts the module but not its instrumentation: %v", err)
			}
		}
	})
}

// extensionSeeds are valid modules using extensions, to seed the fuzzer.
func extensionSeeds() [][]byte {
	void := sec(SectionType, vec(functype(nil, nil)))
	fn := sec(SectionFunction, vec(u(0)))
	return [][]byte{
		module(void, fn, sec(SectionMemory, vec([]byte{0x00, 0x01})), sec(SectionCode, vec(body(noLocals, cat(
			[]byte{0x41, 0x00, 0xfd, 0x0c}, bytes.Repeat([]byte{0x03}, 16), // i32.const 0, v128.const
			[]byte{0xfd, 0x0c}, bytes.Repeat([]byte{0x40}, 16), []byte{0xfd, 0x6e}, // v128.const, i8x16.add
			[]byte{0xfd, 0x0b, 0x04, 0x00}, // v128.store
			[]byte{0x03, 0x40, 0x0b, 0x0b})...)))),
		module(void, fn, sec(SectionCode, vec(body(noLocals,
			0x1f, 0x40, 0x01, 0x02, 0x00, 0x03, 0x40, 0x0b, 0x0b, 0x0b)))), // try_table (catch_all 0) loop
		module(void, fn, sec(SectionMemory, vec([]byte{0x03, 0x01, 0x01})), sec(SectionCode, vec(body(noLocals,
			0x41, 0x00, 0xfe, 0x10, 0x02, 0x00, 0x1a, 0xfe, 0x03, 0x00, // i32.atomic.load, drop, atomic.fence
			0x03, 0x40, 0x0b, 0x0b)))),
		module(void, fn, sec(SectionCode, vec(body(vec(cat(u(2), []byte{i32})),
			0x20, 0x00, 0xc0, 0x1a, // local.get 0, i32.extend8_s, drop
			0x43, 0, 0, 0x80, 0x3f, 0xfc, 0x00, 0x1a, // f32.const 1, i32.trunc_sat_f32_s, drop
			0xd0, 0x70, 0xd1, 0x1a, // ref.null func, ref.is_null, drop
			0x03, 0x40, 0x0b, 0x0b)))),
	}
}

func TestExtensionSeedsAreValid(t *testing.T) {
	for i, seed := range extensionSeeds() {
		mustCompile(t, seed)
		out, err := Instrument(seed)
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		mustCompile(t, out)
	}
}

// boundedLEBs reports whether b has no run of three bytes with the high bit
// set, so that every LEB128 value in it is below 2^21.
func boundedLEBs(b []byte) bool {
	run := 0
	for _, c := range b {
		if c&0x80 == 0 {
			run = 0
		} else if run++; run == 3 {
			return false
		}
	}
	return true
}

// allFeatures are the features wazero v1.12 validates, including its
// experimental ones.
const allFeatures = api.CoreFeaturesV2 | experimental.CoreFeaturesThreads |
	experimental.CoreFeaturesTailCall | experimental.CoreFeaturesExtendedConst |
	experimental.CoreFeaturesExceptionHandling | experimental.CoreFeaturesTypedFunctionReferences

// mustCompile checks that wazero accepts wasm.
func mustCompile(t *testing.T, wasm []byte) {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(allFeatures))
	defer rt.Close(ctx)
	if _, err := rt.CompileModule(ctx, wasm); err != nil {
		t.Fatalf("compile: %v", err)
	}
}
