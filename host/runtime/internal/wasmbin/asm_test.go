package wasmbin

// A tiny assembler for hand-written test modules.

import "bytes"

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

// s encodes v as signed LEB128.
func s(v int) []byte { return appendSLEB(nil, int64(v)) }

// checkOf is the check Instrument inserts for the budget global g and the
// yield function y, charging weight.
func checkOf(g, y byte, weight int) []byte {
	return cat(
		[]byte{0x23, g, 0x41}, s(weight), []byte{0x6b, 0x24, g}, // budget -= weight
		[]byte{0x23, g, 0x41, 0x00, 0x48, 0x04, 0x40, 0x10, y, 0x0b}, // if budget < 0 { yield() }
	)
}

// unweighted returns b with the weight of every check for global 0 and
// yield function 0 replaced by 1, for tests about where checks go rather
// than what they charge.
func unweighted(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		if i+3 <= len(b) && b[i] == 0x23 && b[i+1] == 0x00 && b[i+2] == 0x41 {
			_, n, err := readSLEB(b, i+3, 32)
			tail := []byte{0x6b, 0x24, 0x00, 0x23, 0x00, 0x41, 0x00, 0x48, 0x04, 0x40, 0x10, 0x00, 0x0b}
			if j := n; err == nil && bytes.HasPrefix(b[j:], tail) {
				out = append(out, checkOf(0, 0, 1)...)
				i = j + len(tail)
				continue
			}
		}
		out = append(out, b[i])
		i++
	}
	return out
}

// budgetExport is the export entry Instrument adds for global g.
func budgetExport(g byte) []byte { return cat(str(BudgetGlobal), []byte{0x03, g}) }

// budgetGlobal is the global entry Instrument adds.
var budgetGlobal = []byte{0x7f, 0x01, 0x41, 0x00, 0x0b}

// yieldImport is the import entry Instrument adds, of type t.
func yieldImport(t byte) []byte { return cat(str(YieldModule), str(YieldFunc), []byte{0x00, t}) }

const (
	i32     = 0x7f
	i64     = 0x7e
	funcref = 0x70
)
