package wasmbin

import (
	"bytes"
	"context"
	"errors"
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
				sec(SectionType, vec(functype([]byte{i32}, nil))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionGlobal, vec(interruptGlobal)),
				sec(SectionExport, vec(interruptExport(0))),
				sec(SectionCode, vec(body(noLocals, cat(
					[]byte{0x03, 0x40}, checkOf(0),
					[]byte{0x20, 0x00, 0x0d, 0x00, 0x0b, 0x0b})...))),
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
				sec(SectionCode, vec(body(noLocals, 0x03, 0x40, 0x0b, 0x0b))),
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
				)),
				sec(SectionFunction, vec(u(0))),
				sec(SectionGlobal, vec(
					[]byte{i32, 0x01, 0x41, 0x05, 0x0b},
					[]byte{i64, 0x00, 0x42, 0x07, 0x0b},
					interruptGlobal,
				)),
				sec(SectionExport, vec(cat(str("run"), []byte{0x00, 0x01}), interruptExport(3))),
				sec(SectionCode, vec(body(noLocals, cat([]byte{0x03, 0x40}, checkOf(3), []byte{0x0b, 0x0b})...))),
				custom("wasp.other", 0x2a),
			),
		},
		{
			name: "nested and sequential loops",
			in: module(
				sec(SectionType, vec(voidType)),
				sec(SectionFunction, vec(u(0), u(0))),
				sec(SectionCode, vec(
					body(noLocals, 0x03, 0x40, 0x03, 0x40, 0x0b, 0x0b, 0x0b),
					body(noLocals, 0x03, 0x40, 0x0b, 0x02, 0x40, 0x03, 0x40, 0x0b, 0x0b, 0x0b),
				)),
			),
			want: module(
				sec(SectionType, vec(voidType)),
				sec(SectionFunction, vec(u(0), u(0))),
				sec(SectionGlobal, vec(interruptGlobal)),
				sec(SectionExport, vec(interruptExport(0))),
				sec(SectionCode, vec(
					body(noLocals, cat(
						[]byte{0x03, 0x40}, checkOf(0),
						[]byte{0x03, 0x40}, checkOf(0),
						[]byte{0x0b, 0x0b, 0x0b})...),
					body(noLocals, cat(
						[]byte{0x03, 0x40}, checkOf(0),
						[]byte{0x0b, 0x02, 0x40, 0x03, 0x40}, checkOf(0),
						[]byte{0x0b, 0x0b, 0x0b})...),
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
					0x03, 0x01, 0x0b, // loop (type 1) end
					0x03, 0x81, 0x00, 0x0b, // loop (type 1, padded LEB) end
					0x1a, 0x0b))), // drop end
			),
			want: module(
				sec(SectionType, vec(voidType, functype([]byte{i32}, []byte{i32}))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionGlobal, vec(interruptGlobal)),
				sec(SectionExport, vec(interruptExport(0))),
				sec(SectionCode, vec(body(vec(cat(u(1), []byte{i64})), cat(
					[]byte{0x41, 0x07, 0x03, 0x01}, checkOf(0),
					[]byte{0x0b, 0x03, 0x81, 0x00}, checkOf(0),
					[]byte{0x0b, 0x1a, 0x0b})...))),
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
				sec(SectionType, vec(functype([]byte{i32}, nil))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionMemory, vec([]byte{0x00, 0x01})),
				sec(SectionGlobal, vec(interruptGlobal)),
				sec(SectionExport, vec(interruptExport(0))),
				sec(SectionCode, vec(body(noLocals, cat(
					[]byte{0x02, 0x40, 0x02, 0x40, 0x03, 0x40}, checkOf(0),
					[]byte{0x41, 0x03, 0x1a, 0x41, 0x00, 0x29, 0x03, 0x03, 0x1a},
					[]byte{0x20, 0x00, 0x0e, 0x03, 0x00, 0x01, 0x03, 0x02},
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
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	mod, err := rt.Instantiate(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	f := mod.ExportedFunction("f")
	res, err := f.Call(ctx, 1000)
	if err != nil || res[0] != 0 {
		t.Fatalf("f(1000) = %v, %v; want [0], nil", res, err)
	}
	mod.ExportedGlobal(InterruptGlobal).(api.MutableGlobal).Set(1)
	if _, err := f.Call(ctx, 1000); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("f(1000) after interrupt: err = %v, want unreachable trap", err)
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
			name: "already instrumented",
			in: module(
				sec(SectionType, vec(functype(nil, nil))),
				sec(SectionExport, vec(cat(str(InterruptGlobal), []byte{0x03, 0x00}))),
			),
			is: ErrInstrumented,
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
	}{
		{name: "sign extension", code: []byte{0xc0, 0xc4}},
		{name: "sat trunc", code: []byte{0xfc, 0x00, 0xfc, 0x07}},
		{name: "bulk memory", code: []byte{0xfc, 0x08, 0x03, 0x00, 0xfc, 0x09, 0x03, 0xfc, 0x0a, 0x00, 0x00, 0xfc, 0x0b, 0x00}},
		{name: "bulk table", code: []byte{0xfc, 0x0c, 0x03, 0x03, 0xfc, 0x0d, 0x03, 0xfc, 0x0e, 0x03, 0x03, 0xfc, 0x0f, 0x03, 0xfc, 0x10, 0x03, 0xfc, 0x11, 0x03}},
		{name: "reference types", code: []byte{0xd0, 0x70, 0xd0, 0x03, 0xd1, 0xd2, 0x03, 0x25, 0x03, 0x26, 0x03, 0x1c, 0x01, 0x6f, 0x1c, 0x01, 0x64, 0x03}},
		{name: "calls", code: []byte{0x10, 0x03, 0x11, 0x03, 0x00, 0x12, 0x03, 0x13, 0x03, 0x03, 0x14, 0x03, 0x15, 0x03}},
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
		{name: "exception handling", code: []byte{
			0x1f, 0x40, 0x04, 0x00, 0x03, 0x03, 0x01, 0x03, 0x03, 0x02, 0x03, 0x03, 0x03, 0x0b, // try_table with four catches
			0x06, 0x40, 0x08, 0x03, 0x07, 0x03, 0x19, 0x09, 0x03, 0x0b, // try throw catch catch_all rethrow end
			0x06, 0x40, 0x18, 0x03, // try delegate
			0x0a,
		}},
		{name: "typed function references", code: []byte{0xd3, 0xd4, 0x03, 0xd5, 0xd6, 0x03}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := module(
				sec(SectionType, vec(functype(nil, nil))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionCode, vec(body(noLocals, cat(tt.code, []byte{0x03, 0x40, 0x0b, 0x0b})...))),
			)
			got, err := Instrument(in)
			if err != nil {
				t.Fatalf("Instrument: %v", err)
			}
			want := module(
				sec(SectionType, vec(functype(nil, nil))),
				sec(SectionFunction, vec(u(0))),
				sec(SectionGlobal, vec(interruptGlobal)),
				sec(SectionExport, vec(interruptExport(0))),
				sec(SectionCode, vec(body(noLocals, cat(tt.code, []byte{0x03, 0x40}, checkOf(0), []byte{0x0b, 0x0b})...))),
			)
			if !bytes.Equal(got, want) {
				t.Fatalf("Instrument:\n got %x\nwant %x", got, want)
			}
		})
	}
}

// FuzzInstrument checks that Instrument never panics, that its output
// parses, and, differentially against wazero's validator, that it accepts
// every module wazero accepts and keeps it valid.
func FuzzInstrument(f *testing.F) {
	for _, c := range goldenCases() {
		f.Add(c.in)
	}
	for _, seed := range extensionSeeds() {
		f.Add(seed)
	}
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
	valid := func(wasm []byte) error {
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
			// wazero is laxer than the specification in places (it takes
			// any byte as a table's reference type), so only the decoding
			// of function bodies is compared.
			var se *SectionError
			if errors.As(err, &se) && se.ID == SectionCode && valid(in) == nil {
				t.Fatalf("Instrument rejected a module wazero accepts: %v", err)
			}
			return
		}
		m, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Instrument(in)): %v", err)
		}
		if e, ok := m.Export(InterruptGlobal); !ok || e.Kind != KindGlobal {
			t.Fatalf("instrumented module exports %v", m.Exports)
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
