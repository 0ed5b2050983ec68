package xtables

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// call is one process a fakeExec was asked to run.
type call struct {
	netns string
	argv  []string // argv[0] by its base name
	stdin string
	input bool // stdin was given
}

func (c call) String() string { return strings.Join(c.argv, " ") }

// fakeExec records the processes a Runner starts and answers them from
// replies, keyed by the command line with argv[0] by its base name; any
// other command exits 0 with no output, but --version, which answers as
// iptables 1.8.9 of the binary's variant.
type fakeExec struct {
	mu      sync.Mutex
	calls   []call
	replies map[string]result
	err     error // if set, every run fails with it
}

var _ execer = (*fakeExec)(nil)

func (f *fakeExec) run(_ context.Context, netns string, argv []string, stdin io.Reader, stdout io.Writer) (result, error) {
	c := call{netns: netns, argv: append([]string{filepath.Base(argv[0])}, argv[1:]...), input: stdin != nil}
	var rerr error
	if stdin != nil {
		var in []byte
		in, rerr = io.ReadAll(stdin)
		c.stdin = string(in)
	}
	res, err := f.answer(c)
	if rerr != nil { // as os/exec, which fails when copying stdin fails
		return result{}, rerr
	}
	if stdout != nil && err == nil {
		_, err = stdout.Write(res.stdout)
		res.stdout = nil
	}
	return res, err
}

// answer records c and returns its reply.
func (f *fakeExec) answer(c call) (result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	if f.err != nil {
		return result{}, f.err
	}
	if r, ok := f.replies[c.String()]; ok {
		return r, nil
	}
	if len(c.argv) == 2 && c.argv[1] == "--version" {
		return result{stdout: []byte(versionOutput(c.argv[0], "1.8.9"))}, nil
	}
	return result{}, nil
}

// versionOutput is what binary name of iptables release ver says to
// --version.
func versionOutput(name, ver string) string {
	prog, mode := "iptables", "legacy"
	if strings.HasPrefix(name, "ip6tables") {
		prog = "ip6tables"
	}
	if strings.Contains(name, "-nft") {
		mode = "nf_tables"
	}
	return prog + " v" + ver + " (" + mode + ")\n"
}

// reply sets the answer to the command line cmd.
func (f *fakeExec) reply(cmd string, code int, stderr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replies == nil {
		f.replies = map[string]result{}
	}
	f.replies[cmd] = result{code: code, stderr: []byte(stderr)}
}

// take returns the calls so far, and forgets them.
func (f *fakeExec) take() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// binDir returns a directory holding empty executables of the given
// names.
func binDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// allBinaries is every binary a Runner of either variant and family uses.
var allBinaries = []string{
	"iptables-nft", "iptables-nft-save", "iptables-nft-restore",
	"ip6tables-nft", "ip6tables-nft-save", "ip6tables-nft-restore",
	"iptables-legacy", "iptables-legacy-save", "iptables-legacy-restore",
	"ip6tables-legacy", "ip6tables-legacy-save", "ip6tables-legacy-restore",
}

// fakeRunner returns a Runner of v and family in netns "/run/netns/t"
// over a fakeExec, which has forgotten the --version call of New.
func fakeRunner(t *testing.T, v Variant, family backends.Family) (*Runner, *fakeExec) {
	t.Helper()
	f := &fakeExec{}
	r, err := newRunner(v, family, "/run/netns/t", f, []string{binDir(t, allBinaries...)})
	if err != nil {
		t.Fatal(err)
	}
	f.take()
	return r, f
}
