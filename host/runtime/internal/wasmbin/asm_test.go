package wasmbin

// A tiny assembler for hand-written test modules.

// cat concatenates byte slices.
func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// u encodes v as unsigned LEB128.
func u(v int) []byte { return appendULEB(nil, uint64(v)) }

// vec encodes a vector: its length, then its items.
func vec(items ...[]byte) []byte { return cat(u(len(items)), cat(items...)) }

// str encodes a name.
func str(s string) []byte { return cat(u(len(s)), []byte(s)) }

// sec encodes a section.
func sec(id SectionID, parts ...[]byte) []byte {
	p := cat(parts...)
	return cat([]byte{byte(id)}, u(len(p)), p)
}

// custom encodes a custom section.
func custom(name string, data ...byte) []byte { return sec(SectionCustom, str(name), data) }

// module encodes a module from its sections.
func module(sections ...[]byte) []byte {
	return cat([]byte("\x00asm\x01\x00\x00\x00"), cat(sections...))
}

// functype encodes a function type.
func functype(params, results []byte) []byte {
	return cat([]byte{0x60}, u(len(params)), params, u(len(results)), results)
}

// body encodes a function body from its local declarations (already a
// vector) and its code.
func body(locals []byte, code ...byte) []byte {
	b := cat(locals, code)
	return cat(u(len(b)), b)
}

// noLocals is an empty local declaration vector.
var noLocals = vec()

// checkOf is the code Instrument inserts into loops for the global g.
func checkOf(g byte) []byte { return []byte{0x23, g, 0x04, 0x40, 0x00, 0x0b} }

// interruptExport is the export entry Instrument adds for global g.
func interruptExport(g byte) []byte { return cat(str(InterruptGlobal), []byte{0x03, g}) }

// interruptGlobal is the global entry Instrument adds.
var interruptGlobal = []byte{0x7f, 0x01, 0x41, 0x00, 0x0b}

const (
	i32 = 0x7f
	i64 = 0x7e
)
