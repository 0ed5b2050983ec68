package wasmbin

import (
	"strings"
	"testing"
)

func TestShapes(t *testing.T) {
	// One imported function, so the first defined one is function 1.
	imports := sec(SectionImport, vec(cat(str("env"), str("f"), []byte{0x00}, u(0))))
	types := sec(SectionType, vec(
		functype(nil, nil),
		functype([]byte{i32, i32, i64}, []byte{i32}),
	))
	tests := []struct {
		name   string
		locals []byte // local declarations (a vector)
		code   []byte
		typ    int
		want   FuncShape
	}{
		{
			name: "empty",
			code: []byte{0x0b},
			want: FuncShape{Index: 1, BodyBytes: 2},
		},
		{
			name:   "params and locals",
			locals: vec(cat(u(3), []byte{i32}), cat(u(200), []byte{i64})),
			code:   []byte{0x41, 0x00, 0x0b},
			typ:    1,
			want:   FuncShape{Index: 1, BodyBytes: 9, Locals: 3 + 3 + 200},
		},
		{
			name: "nesting",
			// block (loop (if (block)) ) block end
			code: []byte{0x02, 0x40, 0x03, 0x40, 0x41, 0x00, 0x04, 0x40, 0x02, 0x40, 0x0b, 0x0b, 0x0b, 0x0b, 0x02, 0x40, 0x0b, 0x0b},
			want: FuncShape{Index: 1, BodyBytes: 19, Depth: 4, Blocks: 5},
		},
		{
			name: "branches",
			// block block
			//   br 1; br_if 1; br_table 1 0 1 (default 1); br 0
			// end end; br 0 (the function's label)
			code: []byte{
				0x02, 0x40, 0x02, 0x40,
				0x0c, 0x01, 0x41, 0x00, 0x0d, 0x01,
				0x41, 0x00, 0x0e, 0x03, 0x01, 0x00, 0x01, 0x01,
				0x0c, 0x00,
				0x0b, 0x0b, 0x0c, 0x00, 0x0b,
			},
			want: FuncShape{Index: 1, BodyBytes: 26, Depth: 2, Blocks: 2, BrTable: 4, Edges: 5, EdgesSquared: 5*5 + 2*2 + 1*1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			locals := tt.locals
			if locals == nil {
				locals = noLocals
			}
			wasm := module(types, imports,
				sec(SectionFunction, vec(u(tt.typ))),
				sec(SectionCode, vec(body(locals, tt.code...))))
			got, err := Shapes(wasm)
			if err != nil {
				t.Fatal(err)
			}
			if got.Types != 2 || len(got.Funcs) != 1 || got.Funcs[0] != tt.want {
				t.Errorf("Shapes = %+v, want 2 types and [%+v]", got, tt.want)
			}
		})
	}
}

func TestShapesErrors(t *testing.T) {
	types := sec(SectionType, vec(functype(nil, nil)))
	funcs := sec(SectionFunction, vec(u(0)))
	tests := []struct {
		name string
		code []byte
		want string
	}{
		{"missing end", []byte{0x02, 0x40, 0x0b}, "function 0 body at offset 21: missing end at offset 26"},
		{"code after end", []byte{0x0b, 0x01, 0x0b}, "function 0 body at offset 21: unbalanced 0x0b at offset 23"},
		{"unknown opcode", []byte{0xfb, 0x00, 0x0b}, "unknown opcode 0xfb"},
		{"truncated br_table", []byte{0x0e, 0x05, 0x00}, "function 0 body at offset 21: count 5 at offset 24: exceeds remaining 1 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Shapes(module(types, funcs, sec(SectionCode, vec(body(noLocals, tt.code...)))))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Shapes error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
