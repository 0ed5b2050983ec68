package wasmbin

// AppendCustomSection returns a copy of wasm with a custom section named
// name holding payload. An existing custom section of that name is replaced
// in place (the first one; any further ones are dropped); otherwise the new
// section is appended at the end of the module. The result is a fresh slice
// that depends only on the inputs.
//
// AppendCustomSection only walks the section framing. If wasm is not a
// well-framed module, the part it cannot walk is kept as is and the section
// is appended after it; Parse reports such modules.
func AppendCustomSection(wasm []byte, name string, payload []byte) []byte {
	out := make([]byte, 0, len(wasm)+len(name)+len(payload)+16)
	if len(wasm) < headerLen {
		out = append(out, wasm...)
		return appendCustom(out, name, payload)
	}
	out = append(out, wasm[:headerLen]...)
	replaced := false
	for off := headerLen; off < len(wasm); {
		s, err := readSection(wasm, off)
		if err != nil {
			out = append(out, wasm[off:]...)
			break
		}
		off = s.End
		if s.ID == SectionCustom && s.Name == name {
			if !replaced {
				out = appendCustom(out, name, payload)
				replaced = true
			}
			continue
		}
		out = append(out, wasm[s.Offset:s.End]...)
	}
	if !replaced {
		out = appendCustom(out, name, payload)
	}
	return out
}

// appendCustom appends a custom section to b.
func appendCustom(b []byte, name string, payload []byte) []byte {
	size := ulebLen(uint64(len(name))) + len(name) + len(payload)
	b = append(b, byte(SectionCustom))
	b = appendULEB(b, uint64(size))
	b = appendULEB(b, uint64(len(name)))
	b = append(b, name...)
	return append(b, payload...)
}

// appendSection appends a non-custom section with the given payload to b.
func appendSection(b []byte, id SectionID, payload []byte) []byte {
	b = append(b, byte(id))
	b = appendULEB(b, uint64(len(payload)))
	return append(b, payload...)
}
