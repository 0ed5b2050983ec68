package wasmbin

import (
	"bytes"
	"testing"
)

func TestAppendCustomSection(t *testing.T) {
	typeSec := sec(SectionType, vec(functype(nil, nil)))
	tests := []struct {
		name string
		in   []byte
		want []byte
	}{
		{
			name: "append",
			in:   module(typeSec, custom("other", 1)),
			want: module(typeSec, custom("other", 1), custom("wasp.metadata", 'n', 'e', 'w')),
		},
		{
			name: "replace in place and drop duplicates",
			in:   module(custom("wasp.metadata", 'o'), typeSec, custom("wasp.metadata", 'p'), custom("other", 1)),
			want: module(custom("wasp.metadata", 'n', 'e', 'w'), typeSec, custom("other", 1)),
		},
		{
			name: "malformed tail kept",
			in:   cat(module(typeSec), []byte{0x01, 0x7f}),
			want: cat(module(typeSec), []byte{0x01, 0x7f}, custom("wasp.metadata", 'n', 'e', 'w')),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := bytes.Clone(tt.in)
			got := AppendCustomSection(tt.in, "wasp.metadata", []byte("new"))
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("got  %x\nwant %x", got, tt.want)
			}
			if !bytes.Equal(tt.in, in) {
				t.Fatal("input modified")
			}
			if _, err := Parse(got); err != nil {
				return // idempotence holds for well-framed modules only
			}
			if again := AppendCustomSection(got, "wasp.metadata", []byte("new")); !bytes.Equal(again, got) {
				t.Fatalf("not idempotent:\n got %x\nwant %x", again, got)
			}
		})
	}
}

func TestAppendCustomSectionParses(t *testing.T) {
	in := module(sec(SectionType, vec(functype(nil, nil))))
	big := bytes.Repeat([]byte{0xab}, 300) // a payload whose size needs a two-byte LEB128
	out := AppendCustomSection(in, "wasp.metadata", big)
	m, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if data, ok := m.CustomSection("wasp.metadata"); !ok || !bytes.Equal(data, big) {
		t.Fatalf("CustomSection = %x, %v", data, ok)
	}
	mustCompile(t, out)
}
