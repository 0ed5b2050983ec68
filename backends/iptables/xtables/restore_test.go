package xtables

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
)

// restoreInput is fed to the failing restores of TestRestoreError.
const restoreInput = `*filter
:WASP-A - [0:0]
-A WASP-A -j ACCEPT
COMMIT
*nat
:WASP-B - [0:0]
-A WASP-B -j ACCEPT
-A WASP-B -m nosuchmatch -j ACCEPT
-A WASP-B -p tcp -j REJECT
-A WASP-B -j RETURN
COMMIT
`

func TestRestoreError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		variant Variant
		code    int
		stderr  string // as iptables 1.8.9 wrote it
		line    int
		text    string
		context []string
		table   string
		wantMsg string
	}{
		{
			name: "a rule nft cannot parse", variant: NFT, code: 2,
			stderr: "iptables-nft-restore v1.8.9 (nf_tables): Couldn't load match `nosuchmatch':No such file or directory\n\n" +
				"Error occurred at line: 8\nTry `iptables-nft-restore -h' or 'iptables-nft-restore --help' for more information.\n",
			line: 8, text: "-A WASP-B -m nosuchmatch -j ACCEPT", table: "nat",
			context: []string{"*nat", ":WASP-B - [0:0]", "-A WASP-B -j ACCEPT", "-A WASP-B -m nosuchmatch -j ACCEPT", "-A WASP-B -p tcp -j REJECT", "-A WASP-B -j RETURN", "COMMIT"},
			wantMsg: `iptables-nft-restore failed at input line 8 (table nat) "-A WASP-B -m nosuchmatch -j ACCEPT": ` +
				"iptables-nft-restore v1.8.9 (nf_tables): Couldn't load match `nosuchmatch':No such file or directory; Error occurred at line: 8",
		},
		{
			name: "a rule legacy cannot parse", variant: Legacy, code: 2,
			stderr: "Ignoring deprecated --wait-interval option.\niptables-restore v1.8.9 (legacy): Couldn't load match `nosuchmatch':No such file or directory\n\n" +
				"Error occurred at line: 8\nTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n",
			line: 8, text: "-A WASP-B -m nosuchmatch -j ACCEPT", table: "nat",
			context: []string{"*nat", ":WASP-B - [0:0]", "-A WASP-B -j ACCEPT", "-A WASP-B -m nosuchmatch -j ACCEPT", "-A WASP-B -p tcp -j REJECT", "-A WASP-B -j RETURN", "COMMIT"},
			wantMsg: `iptables-legacy-restore failed at input line 8 (table nat) "-A WASP-B -m nosuchmatch -j ACCEPT": ` +
				"iptables-restore v1.8.9 (legacy): Couldn't load match `nosuchmatch':No such file or directory; Error occurred at line: 8",
		},
		{
			name: "a rule the kernel refuses, nft", variant: NFT, code: 4,
			stderr: "iptables-nft-restore v1.8.9 (nf_tables): \nline 9: RULE_APPEND failed (Invalid argument): rule in chain WASP-B\n",
			line:   9, text: "-A WASP-B -p tcp -j REJECT", table: "nat",
			context: []string{":WASP-B - [0:0]", "-A WASP-B -j ACCEPT", "-A WASP-B -m nosuchmatch -j ACCEPT", "-A WASP-B -p tcp -j REJECT", "-A WASP-B -j RETURN", "COMMIT", ""},
			wantMsg: `failed at input line 9 (table nat) "-A WASP-B -p tcp -j REJECT": iptables-nft-restore v1.8.9 (nf_tables):; line 9: RULE_APPEND failed (Invalid argument): rule in chain WASP-B`,
		},
		{
			name: "a table the kernel refuses at COMMIT, legacy", variant: Legacy, code: 1,
			stderr: "iptables-restore: line 11 failed\n",
			line:   11, text: "COMMIT", table: "nat",
			context: []string{"-A WASP-B -m nosuchmatch -j ACCEPT", "-A WASP-B -p tcp -j REJECT", "-A WASP-B -j RETURN", "COMMIT", ""},
			wantMsg: `failed at input line 11 (table nat) "COMMIT": iptables-restore: line 11 failed`,
		},
		{
			name: "the first line", variant: NFT, code: 2,
			stderr: "iptables-nft-restore v1.8.9 (nf_tables): Bad table\nError occurred at line: 1\n",
			line:   1, text: "*filter", table: "filter",
			context: []string{"*filter", ":WASP-A - [0:0]", "-A WASP-A -j ACCEPT", "COMMIT"},
			wantMsg: `failed at input line 1 (table filter) "*filter"`,
		},
		{
			name: "a line past the input", variant: NFT, code: 2,
			stderr:  "Error occurred at line: 40\n",
			line:    40,
			wantMsg: `failed at input line 40 "": Error occurred at line: 40`,
		},
		{
			name: "no line: the lock", variant: NFT, code: 4,
			stderr:  "Another app is currently holding the xtables lock. Stopped waiting after 5s.\n",
			wantMsg: "iptables-nft-restore: exit status 4: Another app is currently holding the xtables lock. Stopped waiting after 5s.",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, f := fakeRunner(t, tc.variant, backends.IPv4)
			name, _ := command(tc.variant, backends.IPv4, toolRestore)
			f.reply(name+" --noflush --counters -w 5 -W 100000", tc.code, tc.stderr)
			err := r.Restore(context.Background(), []byte(restoreInput))
			var re *RestoreError
			if !errors.As(err, &re) {
				t.Fatalf("Restore = %v, want a *RestoreError", err)
			}
			if re.Line != tc.line || re.Text != tc.text || re.Table != tc.table || re.Stderr != tc.stderr {
				t.Errorf("Line, Text, Table, Stderr = %d, %q, %q, %q; want %d, %q, %q, %q",
					re.Line, re.Text, re.Table, re.Stderr, tc.line, tc.text, tc.table, tc.stderr)
			}
			if !slices.Equal(re.Context, tc.context) {
				t.Errorf("Context =\n\t%q\nwant\n\t%q", re.Context, tc.context)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("Error() =\n\t%s\nwant it to contain\n\t%s", err, tc.wantMsg)
			}
		})
	}
}

// An iptables-restore older than 1.6.2 cannot wait for the xtables lock:
// the Runner holds the lock around it.
func TestRestoreTakesTheLockForOldIptables(t *testing.T) {
	f := &fakeExec{replies: map[string]result{"iptables-legacy --version": {stdout: []byte("iptables v1.6.1\n")}}}
	r, err := newRunner(Legacy, backends.IPv4, "", f, []string{binDir(t, allBinaries...)})
	if err != nil {
		t.Fatal(err)
	}
	f.take()
	r.lockPath = filepath.Join(t.TempDir(), "xtables.lock")
	r.lockWait, r.lockInterval = 0, time.Millisecond

	held, err := lockFile(context.Background(), r.lockPath, 0, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	err = r.Restore(context.Background(), []byte("*nat\nCOMMIT\n"))
	if err == nil || !strings.Contains(err.Error(), "held the xtables lock "+r.lockPath) {
		t.Errorf("Restore while another holds the lock = %v, want a lock error naming %s", err, r.lockPath)
	}
	if calls := f.take(); len(calls) != 0 {
		t.Errorf("ran %v while another held the lock", calls)
	}

	held()
	if err := r.Restore(context.Background(), []byte("*nat\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	calls := f.take()
	if len(calls) != 1 || calls[0].String() != "iptables-legacy-restore --noflush --counters" {
		t.Errorf("ran %v, want iptables-legacy-restore --noflush --counters, without wait flags", calls)
	}
	// Released after the restore: taking it again succeeds at once.
	unlock, err := lockFile(context.Background(), r.lockPath, 0, time.Millisecond)
	if err != nil {
		t.Fatalf("lock still held after Restore: %v", err)
	}
	unlock()
	if _, err := os.Stat(r.lockPath); err != nil {
		t.Error(err)
	}
}

// FuzzRestoreError: whatever a restore binary writes, the error names a
// line of the input it was given, with that line in its context, and the
// table and context lines are those of the input split into lines.
func FuzzRestoreError(f *testing.F) {
	f.Add("Error occurred at line: 8\n", restoreInput)
	f.Add("line 9: RULE_APPEND failed (Invalid argument): rule in chain WASP-B\n", restoreInput)
	f.Add("iptables-restore: line 1 failed\n", "COMMIT")
	f.Add("line 99999999999999999999 failed", "")
	f.Fuzz(func(t *testing.T, stderr, input string) {
		e := newRestoreError("iptables-nft-restore", Bytes([]byte(input)), result{code: 1, stderr: []byte(stderr)})
		_ = e.Error()
		lines := strings.Split(input, "\n")
		if e.Line < 0 || (e.Line == 0 && (e.Text != "" || e.Context != nil || e.Table != "")) {
			t.Fatalf("Line %d with Text %q, Context %q, Table %q", e.Line, e.Text, e.Context, e.Table)
		}
		if e.Line > 0 && e.Line <= len(lines) {
			if e.Text != lines[e.Line-1] || !slices.Contains(e.Context, e.Text) || len(e.Context) > 2*contextLines+1 {
				t.Fatalf("line %d: Text %q, Context %q; input line %q", e.Line, e.Text, e.Context, lines[e.Line-1])
			}
		}
		if e.Line > 0 { // the lines the error keeps, read from the whole input
			table := ""
			for i := 0; i < len(lines) && i < e.Line; i++ {
				if t, ok := strings.CutPrefix(lines[i], "*"); ok {
					table = strings.TrimSpace(t)
				}
			}
			if e.Line > len(lines) {
				table = ""
			}
			var context []string
			for i := max(1, e.Line-contextLines); i <= min(len(lines), e.Line+contextLines); i++ {
				context = append(context, lines[i-1])
			}
			if e.Table != table || !slices.Equal(e.Context, context) {
				t.Fatalf("line %d: Table %q, Context %q; want %q, %q", e.Line, e.Table, e.Context, table, context)
			}
		}
	})
}

// quitter is a restore binary that reads the first line of its input and
// exits 1, naming line 2.
type quitter struct{ read string }

func (q *quitter) run(_ context.Context, _ string, _ []string, stdin io.Reader, _ io.Writer) (result, error) {
	line, _ := bufio.NewReader(stdin).ReadString('\n')
	q.read = line
	return result{code: 1, stderr: []byte("Error occurred at line: 2\n")}, nil
}

// A binary that exits before it read its whole input does not leave
// RestoreFrom waiting on the rest; the error still has the failing line,
// which RestoreFrom writes again to find.
func TestRestoreFromBinaryStopsReading(t *testing.T) {
	q := &quitter{}
	r := &Runner{restore: "/sbin/iptables-restore", restoreWaits: true, exec: q}
	calls := 0
	input := func(w io.Writer) error {
		calls++
		if _, err := io.WriteString(w, "*nat\n:WASP-X - [0:0]\n"); err != nil {
			return err
		}
		for range 100000 { // megabytes: far more than a pipe holds
			if _, err := io.WriteString(w, "-A WASP-X -j ACCEPT\n"); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, "COMMIT\n")
		return err
	}
	err := r.RestoreFrom(context.Background(), input)
	var re *RestoreError
	if !errors.As(err, &re) {
		t.Fatalf("RestoreFrom = %v, want a *RestoreError", err)
	}
	if q.read != "*nat\n" {
		t.Errorf("the binary read %q, want the first line", q.read)
	}
	if re.Line != 2 || re.Text != ":WASP-X - [0:0]" || re.Table != "nat" {
		t.Errorf("Line, Text, Table = %d, %q, %q; want 2, %q, nat", re.Line, re.Text, re.Table, ":WASP-X - [0:0]")
	}
	if calls != 2 {
		t.Errorf("input written %d times, want twice: to the binary, and to find the line", calls)
	}
}

// An Input that fails is an error of RestoreFrom even when the binary
// succeeded on what it read.
func TestRestoreFromInputFails(t *testing.T) {
	f := &fakeExec{}
	r := &Runner{restore: "/sbin/iptables-restore", restoreWaits: true, exec: f}
	boom := errors.New("boom")
	err := r.RestoreFrom(context.Background(), func(w io.Writer) error {
		io.WriteString(w, "*nat\n")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("RestoreFrom = %v, want it to wrap %v", err, boom)
	}
	if calls := f.take(); len(calls) != 1 || calls[0].stdin != "*nat\n" {
		t.Errorf("calls %v, want one restore that read %q", calls, "*nat\n")
	}
}
