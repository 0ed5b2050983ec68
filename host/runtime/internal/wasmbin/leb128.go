package wasmbin

import "errors"

// LEB128 decoding errors. They carry no offset: the reader wraps them with
// the position of the value that failed.
var (
	errTruncated = errors.New("truncated")
	errOverflow  = errors.New("integer representation too long")
)

// readULEB decodes an unsigned LEB128 value of at most bits bits from b
// starting at off. It returns the value and the offset just past it.
func readULEB(b []byte, off int, bits uint) (uint64, int, error) {
	var v uint64
	var shift uint
	for i := off; i < len(b); i++ {
		c := b[i]
		if shift >= bits {
			return 0, 0, errOverflow
		}
		// The last permitted byte may only carry the remaining bits.
		if rem := bits - shift; rem < 7 && c&0x7f>>rem != 0 {
			return 0, 0, errOverflow
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, i + 1, nil
		}
		shift += 7
	}
	return 0, 0, errTruncated
}

// readSLEB decodes a signed LEB128 value of at most bits bits from b
// starting at off. It returns the value and the offset just past it.
func readSLEB(b []byte, off int, bits uint) (int64, int, error) {
	var v int64
	var shift uint
	for i := off; i < len(b); i++ {
		c := b[i]
		if shift >= bits {
			return 0, 0, errOverflow
		}
		if rem := bits - shift; rem < 7 {
			// The unused high bits of the last byte must all equal the
			// sign bit.
			hi := int8(c<<1) >> rem // bits rem-1..6, sign-extended
			if c&0x80 != 0 || (hi != 0 && hi != -1) {
				return 0, 0, errOverflow
			}
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1, nil
		}
	}
	return 0, 0, errTruncated
}

// appendULEB appends v encoded as unsigned LEB128 (minimal length) to b.
func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// ulebLen is the length of v encoded by appendULEB.
func ulebLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// appendSLEB appends v encoded as signed LEB128 (minimal length) to b.
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
