package wasmbin

import (
	"errors"
	"testing"
)

func TestReadULEB(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		bits uint
		want uint64
		next int
		err  error
	}{
		{name: "zero", in: []byte{0}, bits: 32, want: 0, next: 1},
		{name: "one byte", in: []byte{0x7f}, bits: 32, want: 127, next: 1},
		{name: "two bytes", in: []byte{0x80, 0x01}, bits: 32, want: 128, next: 2},
		{name: "padded", in: []byte{0x83, 0x80, 0x00}, bits: 32, want: 3, next: 3},
		{name: "max u32", in: []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, bits: 32, want: 1<<32 - 1, next: 5},
		{name: "u32 overflow bits", in: []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, bits: 32, err: errOverflow},
		{name: "u32 too long", in: []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, bits: 32, err: errOverflow},
		{name: "max u64", in: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, bits: 64, want: 1<<64 - 1, next: 10},
		{name: "u64 overflow", in: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03}, bits: 64, err: errOverflow},
		{name: "truncated", in: []byte{0x80}, bits: 32, err: errTruncated},
		{name: "empty", in: nil, bits: 32, err: errTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, next, err := readULEB(tt.in, 0, tt.bits)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && (got != tt.want || next != tt.next) {
				t.Fatalf("got %d, %d; want %d, %d", got, next, tt.want, tt.next)
			}
		})
	}
}

func TestReadSLEB(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		bits uint
		want int64
		err  error
	}{
		{name: "zero", in: []byte{0}, bits: 32, want: 0},
		{name: "minus one", in: []byte{0x7f}, bits: 32, want: -1},
		{name: "empty block type", in: []byte{0x40}, bits: 33, want: -64},
		{name: "64", in: []byte{0xc0, 0x00}, bits: 32, want: 64},
		{name: "-129", in: []byte{0xff, 0x7e}, bits: 32, want: -129},
		{name: "max i32", in: []byte{0xff, 0xff, 0xff, 0xff, 0x07}, bits: 32, want: 1<<31 - 1},
		{name: "min i32", in: []byte{0x80, 0x80, 0x80, 0x80, 0x78}, bits: 32, want: -1 << 31},
		{name: "i32 overflow", in: []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, bits: 32, err: errOverflow},
		{name: "i32 negative overflow", in: []byte{0x80, 0x80, 0x80, 0x80, 0x70}, bits: 32, err: errOverflow},
		{name: "max s33", in: []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, bits: 33, want: 1<<32 - 1},
		{name: "min i64", in: []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f}, bits: 64, want: -1 << 63},
		{name: "i64 overflow", in: []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, bits: 64, err: errOverflow},
		{name: "truncated", in: []byte{0xff}, bits: 64, err: errTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, next, err := readSLEB(tt.in, 0, tt.bits)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && (got != tt.want || next != len(tt.in)) {
				t.Fatalf("got %d, %d; want %d, %d", got, next, tt.want, len(tt.in))
			}
		})
	}
}

func TestAppendULEB(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 300, 1<<32 - 1, 1<<64 - 1} {
		b := appendULEB(nil, v)
		if len(b) != ulebLen(v) {
			t.Errorf("len(appendULEB(%d)) = %d, ulebLen = %d", v, len(b), ulebLen(v))
		}
		got, next, err := readULEB(b, 0, 64)
		if err != nil || got != v || next != len(b) {
			t.Errorf("readULEB(appendULEB(%d)) = %d, %d, %v", v, got, next, err)
		}
	}
}
