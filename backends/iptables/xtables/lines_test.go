package xtables

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// A LineWriter passes every line whole, however the writes cut it, the
// last one at Close even when empty, and refuses a line longer than its
// bound.
func TestLineWriter(t *testing.T) {
	for _, tt := range []struct {
		text string
		want []string
	}{
		{"*nat\n:WASP-A - [0:0]\n\n-A WASP-A -j ACCEPT\nCOMMIT", []string{"*nat", ":WASP-A - [0:0]", "", "-A WASP-A -j ACCEPT", "COMMIT"}},
		{"COMMIT\n", []string{"COMMIT", ""}},
		{"", []string{""}},
	} {
		for size := 1; size <= max(1, len(tt.text)); size++ {
			var got []string
			w := NewLineWriter(0, func(l []byte) { got = append(got, string(l)) })
			for p := []byte(tt.text); len(p) > 0; {
				n := min(size, len(p))
				if m, err := w.Write(p[:n]); m != n || err != nil {
					t.Fatalf("Write = %d, %v; want %d, nil", m, err, n)
				}
				p = p[n:]
			}
			w.Close()
			if !slices.Equal(got, tt.want) {
				t.Fatalf("%q in writes of %d bytes: lines %q, want %q", tt.text, size, got, tt.want)
			}
		}
	}

	const limit = 1 << 20
	w := NewLineWriter(limit, func([]byte) {})
	long := bytes.Repeat([]byte("x"), limit/2+1)
	if _, err := w.Write(long); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(long); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("a line of %d bytes: %v, want %v", 2*len(long), err, ErrLineTooLong)
	}
}
