package localfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/internal/localfile"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, size int) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Repeat("x", size)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	atLimit, overLimit := write("at", 100), write("over", 101)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(atLimit, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		want    int   // bytes read
		wantErr error // errors.Is
		msg     string
	}{
		{name: "at the limit", path: atLimit, want: 100},
		{name: "symbolic link", path: link, want: 100},
		{name: "over the limit", path: overLimit, wantErr: localfile.ErrTooLarge, msg: overLimit + ": file too large: 101 bytes, more than the limit of 100"},
		{name: "directory", path: dir, wantErr: localfile.ErrNotRegular, msg: dir + ": not a regular file (a directory)"},
		{name: "absent", path: filepath.Join(dir, "absent"), wantErr: os.ErrNotExist},
	}
	if runtime.GOOS != "windows" {
		tests = append(tests, struct {
			name    string
			path    string
			want    int
			wantErr error
			msg     string
		}{name: "endless device", path: "/dev/zero", wantErr: localfile.ErrNotRegular, msg: "/dev/zero: not a regular file (a character device)"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := localfile.Read(tc.path, 100)
			if tc.wantErr == nil {
				if err != nil || len(b) != tc.want {
					t.Fatalf("got %d bytes, %v; want %d bytes", len(b), err, tc.want)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %d bytes, %v; want %v", len(b), err, tc.wantErr)
			}
			if tc.msg != "" && err.Error() != tc.msg {
				t.Errorf("error %q, want %q", err, tc.msg)
			}
		})
	}
}

// TestReadFIFO: a FIFO without a writer would block an open or a read
// forever; it is refused without being opened.
func TestReadFIFO(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no FIFOs")
	}
	p := filepath.Join(t.TempDir(), "fifo")
	if err := mkfifo(p); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := localfile.Read(p, 100); !errors.Is(err, localfile.ErrNotRegular) || !strings.Contains(err.Error(), "a FIFO") {
		t.Fatalf("got %v, want a FIFO refused", err)
	}
}

func TestWithin(t *testing.T) {
	base := t.TempDir()
	allowed, other := filepath.Join(base, "mod"), filepath.Join(base, "modx")
	for _, d := range []string{allowed, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	in := filepath.Join(allowed, "m.wasm")
	out := filepath.Join(other, "secret")
	for _, p := range []string{in, out} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	escape := filepath.Join(allowed, "escape")
	if err := os.Symlink(out, escape); err != nil {
		t.Fatal(err)
	}
	real := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tests := []struct {
		name string
		path string
		dirs []string
		want string // "" for ErrOutside
	}{
		{name: "inside", path: in, dirs: []string{allowed}, want: real(in)},
		{name: "dot-dot out", path: allowed + "/../" + filepath.Base(other) + "/secret", dirs: []string{allowed}},
		{name: "link out", path: escape, dirs: []string{allowed}},
		{name: "no directory", path: in},
		{name: "second directory", path: out, dirs: []string{allowed, other}, want: real(out)},
		{name: "a prefix is no parent", path: out, dirs: []string{allowed}},
		{name: "the root", path: out, dirs: []string{filepath.VolumeName(base) + string(filepath.Separator)}, want: real(out)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := localfile.Within(tc.path, tc.dirs)
			if tc.want == "" {
				if !errors.Is(err, localfile.ErrOutside) {
					t.Fatalf("got %q, %v; want ErrOutside", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
