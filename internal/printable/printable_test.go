package printable_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/wasp-proxy/wasp/internal/printable"
)

func TestString(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "module \"x\" stage topology: trap", "module \"x\" stage topology: trap"},
		{"other scripts", "zone café ゾーン", "zone café ゾーン"},
		{"newline and tab stay", "line 1\n\tline 2", "line 1\n\tline 2"},
		{"clear screen", "panic: \x1b[2J\x1b[Hall good", `panic: \x1b[2J\x1b[Hall good`},
		{"title and bell", "\x1b]0;pwned\a", `\x1b]0;pwned\a`},
		{"carriage return", "fatal\rok     ", `fatal\rok     `},
		{"delete and NUL", "a\x7fb\x00", `a\x7fb\x00`},
		{"C1 control", "a\u009b31mb", `a\u009b31mb`},
		{"bidirectional override", "ok \u202eevil", `ok \u202eevil`},
		{"not UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
		{"replacement character stays", "a\uFFFDb", "a\uFFFDb"},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := printable.String(tc.in); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestError(t *testing.T) {
	if printable.Error(nil) != nil {
		t.Fatal("Error(nil) is not nil")
	}
	err := printable.Error(&fs.PathError{Op: "open", Path: "\x1b[31mred", Err: fs.ErrNotExist})
	if got, want := err.Error(), `open \x1b[31mred: file does not exist`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) {
		t.Errorf("%v does not wrap the error it was given", err)
	}
}
