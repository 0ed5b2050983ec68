package iptables

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
)

// kernel is the seam between the Backend and what it programs: the
// iptables binaries of one variant and family (kernel_linux.go), or the
// Fake.
type kernel interface {
	// restore runs iptables-restore --noflush --counters with the input
	// that input writes (it may be called again, and writes the same
	// each time) and the xtables lock. Each table's section commits
	// atomically at its COMMIT. A failure on a line is a *LineError.
	restore(ctx context.Context, input xtables.Input) error
	// save writes iptables-save -t table to w.
	save(ctx context.Context, table string, w io.Writer) error
	// chainExists reports whether table has chain.
	chainExists(ctx context.Context, table, chain string) (bool, error)
	// ensureRule prepends the rule to chain unless it is there.
	ensureRule(ctx context.Context, table, chain string, args ...string) (existed bool, err error)
	// deleteRule deletes the rule; a missing rule or chain is not an error.
	deleteRule(ctx context.Context, table, chain string, args ...string) error
	// hasRandomFully reports whether MASQUERADE takes --random-fully.
	hasRandomFully() bool
	// routeLocalnet sets net.ipv4.conf.all.route_localnet to 1, so that
	// packets to 127.0.0.0/8 may be DNATed off the node.
	routeLocalnet(ctx context.Context) error
	// close releases the kernel's resources.
	close() error

	// ensureSet creates the hash:ip,port,ip ipset name of family unless
	// it exists.
	ensureSet(ctx context.Context, name string, family backends.Family) error
	// listSet returns the entries of ipset name.
	listSet(ctx context.Context, name string) ([]HairpinEntry, error)
	// addToSet adds entries to ipset name; one it holds is not an error.
	addToSet(ctx context.Context, name string, entries []HairpinEntry) error
	// delFromSet deletes entries from ipset name; one it lacks is not an
	// error.
	delFromSet(ctx context.Context, name string, entries []HairpinEntry) error
	// destroySet destroys ipset name; a missing set, or no ipset support
	// at all, is not an error, a set a rule still uses is.
	destroySet(ctx context.Context, name string) error
}

// LineError is a restore failure the kernel or iptables-restore pinned
// to a line of the input (1-based).
type LineError struct {
	Line int
	Text string // the line
	Err  error
}

func (e *LineError) Error() string {
	msg := e.Err.Error()
	if strings.Contains(msg, e.Text) { // the binary's error names it already
		return msg
	}
	return fmt.Sprintf("line %d %q: %s", e.Line, e.Text, msg)
}

func (e *LineError) Unwrap() error { return e.Err }

// maxSaveLine is the longest line of iptables-save output that saveLines
// takes.
const maxSaveLine = 1 << 20

// saveLines passes each line of iptables-save -t table of k, without its
// newline, to f (and "" at the end).
func saveLines(ctx context.Context, k kernel, table string, f func(line string)) error {
	w := xtables.NewLineWriter(maxSaveLine, func(line []byte) { f(string(line)) })
	if err := k.save(ctx, table, w); err != nil {
		return err
	}
	return w.Close()
}
