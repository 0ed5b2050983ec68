package wasmbin

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := module(
		custom("wasp.metadata", 'm', 'd'),
		sec(SectionType, vec(functype(nil, nil))),
		sec(SectionImport, vec(
			cat(str("wasi_snapshot_preview1"), str("fd_write"), []byte{0x00, 0x00}),
			cat(str("env"), str("table"), []byte{0x01, 0x70, 0x00, 0x01}),
			cat(str("env"), str("memory"), []byte{0x02, 0x03, 0x01, 0x02}),
			cat(str("env"), str("mem64"), []byte{0x02, 0x04, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}),
			cat(str("env"), str("g"), []byte{0x03, 0x64, 0x70, 0x01}),
			cat(str("env"), str("tag"), []byte{0x04, 0x00, 0x00}),
		)),
		sec(SectionExport, vec(
			cat(str("run"), []byte{0x00, 0x01}),
			cat(str("memory"), []byte{0x02, 0x00}),
			cat(str("ünï"), []byte{0x03, 0x80, 0x01}),
		)),
		custom("name"),
	)
	m, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	wantImports := []Import{
		{"wasi_snapshot_preview1", "fd_write", KindFunc},
		{"env", "table", KindTable},
		{"env", "memory", KindMemory},
		{"env", "mem64", KindMemory},
		{"env", "g", KindGlobal},
		{"env", "tag", KindTag},
	}
	if !reflect.DeepEqual(m.Imports, wantImports) {
		t.Errorf("Imports = %v, want %v", m.Imports, wantImports)
	}
	wantExports := []Export{{"run", KindFunc, 1}, {"memory", KindMemory, 0}, {"ünï", KindGlobal, 128}}
	if !reflect.DeepEqual(m.Exports, wantExports) {
		t.Errorf("Exports = %v, want %v", m.Exports, wantExports)
	}
	var ids []SectionID
	for _, s := range m.Sections {
		ids = append(ids, s.ID)
		if got := in[s.Offset:s.End]; s.Offset < 8 || !bytes.HasSuffix(got, s.Payload) {
			t.Errorf("section %v: payload %x is not the end of %x", s.ID, s.Payload, got)
		}
	}
	if want := []SectionID{SectionCustom, SectionType, SectionImport, SectionExport, SectionCustom}; !reflect.DeepEqual(ids, want) {
		t.Errorf("section IDs = %v, want %v", ids, want)
	}
	if data, ok := m.CustomSection("wasp.metadata"); !ok || string(data) != "md" {
		t.Errorf(`CustomSection("wasp.metadata") = %q, %v; want "md", true`, data, ok)
	}
	if data, ok := m.CustomSection("name"); !ok || len(data) != 0 {
		t.Errorf(`CustomSection("name") = %q, %v; want "", true`, data, ok)
	}
	if _, ok := m.CustomSection("missing"); ok {
		t.Error(`CustomSection("missing") found`)
	}
	if _, ok := m.Section(SectionCode); ok {
		t.Error("Section(SectionCode) found")
	}
	if s, ok := m.Section(SectionType); !ok || s.Offset != 8+len(custom("wasp.metadata", 'm', 'd')) {
		t.Errorf("Section(SectionType) = %+v, %v", s, ok)
	}
}

func TestParseErrors(t *testing.T) {
	typeSec := sec(SectionType, vec(functype(nil, nil)))
	tests := []struct {
		name string
		in   []byte
		msg  string
	}{
		{name: "empty", in: nil, msg: "wasm: header at offset 0: truncated (0 bytes)"},
		{name: "bad magic", in: []byte("\x00wasm\x01\x00\x00"), msg: "wasm: header at offset 0: not a WebAssembly module (bad magic)"},
		{name: "component", in: []byte("\x00asm\x0d\x00\x01\x00"), msg: "wasm: header at offset 4: unsupported version 0x0d000100"},
		{name: "truncated section", in: module([]byte{0x0a, 0x05, 0x00}), msg: "wasm: section 10 (code) at offset 8: truncated: size 5, 1 bytes left"},
		{name: "section size overflow", in: module([]byte{0x01, 0xff, 0xff, 0xff, 0xff, 0x7f}), msg: "wasm: section 1 (type) at offset 8: size: integer representation too long"},
		{name: "section size truncated", in: module([]byte{0x01, 0x80}), msg: "wasm: section 1 (type) at offset 8: size: truncated"},
		{name: "unknown section", in: module(sec(14)), msg: "wasm: section 14 (unknown(14)) at offset 8: unknown section id"},
		{name: "duplicate", in: module(typeSec, typeSec), msg: "wasm: section 1 (type) at offset 14: out of order or duplicate"},
		{name: "out of order", in: module(sec(SectionCode, vec()), typeSec), msg: "section 1 (type) at offset 11: out of order"},
		{name: "tag after global", in: module(sec(SectionGlobal, vec()), sec(SectionTag, vec())), msg: "section 13 (tag) at offset 11: out of order"},
		{name: "custom name truncated", in: module(sec(SectionCustom, []byte{0x05, 'a'})), msg: "section 0 (custom) at offset 8: name: truncated at offset 10"},
		{name: "custom name not UTF-8", in: module(sec(SectionCustom, []byte{0x01, 0xff})), msg: "name at offset 10: invalid UTF-8"},
		{name: "import count too large", in: module(sec(SectionImport, []byte{0x7f})), msg: "section 2 (import) at offset 8: count 127 at offset 10: exceeds remaining 0 bytes"},
		{name: "import kind", in: module(sec(SectionImport, vec(cat(str("a"), str("b"), []byte{0x07, 0x00})))), msg: "import 0 at offset 11: unknown kind 0x7 at offset 15"},
		{name: "import global type", in: module(sec(SectionImport, vec(cat(str("a"), str("b"), []byte{0x03, 0x50, 0x00})))), msg: `global "a"."b": unknown value type 0x50 at offset 16`},
		{name: "import limits", in: module(sec(SectionImport, vec(cat(str("a"), str("b"), []byte{0x02, 0x10, 0x00})))), msg: "limits flags 0x10 at offset 16: unknown"},
		{name: "import trailing", in: module(sec(SectionImport, vec(cat(str("a"), str("b"), []byte{0x00, 0x00})), []byte{0x00})), msg: "1 trailing bytes at offset 17"},
		{name: "export kind", in: module(sec(SectionExport, vec(cat(str("a"), []byte{0x05, 0x00})))), msg: "export 0 at offset 11: unknown kind 0x5"},
		{name: "export index", in: module(sec(SectionExport, vec(cat(str("a"), []byte{0x00, 0x80})))), msg: "export 0 at offset 11: index: truncated at offset 14"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.in)
			if err == nil {
				t.Fatal("Parse succeeded, want error")
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %q, want it to contain %q", err, tt.msg)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte{})
	f.Add(module())
	f.Add(module(
		custom("wasp.metadata", 1, 2, 3),
		sec(SectionType, vec(functype([]byte{i32}, []byte{i64}))),
		sec(SectionImport, vec(
			cat(str("env"), str("f"), []byte{0x00, 0x00}),
			cat(str("env"), str("m"), []byte{0x02, 0x05, 0x01, 0x02}),
			cat(str("env"), str("t"), []byte{0x01, 0x70, 0x01, 0x00, 0x01}),
			cat(str("env"), str("g"), []byte{0x03, 0x63, 0x00, 0x00}),
		)),
		sec(SectionExport, vec(cat(str("run"), []byte{0x00, 0x00}))),
	))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Parse(in)
		if err != nil {
			return
		}
		for _, s := range m.Sections {
			if s.Offset < headerLen || s.End > len(in) || s.Offset >= s.End {
				t.Fatalf("section %v spans [%d, %d) of %d bytes", s.ID, s.Offset, s.End, len(in))
			}
		}
	})
}
