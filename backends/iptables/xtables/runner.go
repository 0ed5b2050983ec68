package xtables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
)

// Waiting for the xtables lock, which every iptables process of the node
// takes while it changes rules: at most lockWaitSeconds, trying again
// every lockIntervalMicros (the interval flag is ignored by iptables
// 1.8.8 and later, which block on the lock; earlier ones poll).
const (
	lockWaitSeconds    = 5
	lockIntervalMicros = 100000
)

// xtablesLockPath is the lock file of iptables 1.6 and later, which a
// Runner takes itself around a restore whose binary cannot wait for it.
const xtablesLockPath = "/run/xtables.lock"

// Version thresholds.
var (
	// minVersion is the oldest iptables a Runner uses: the first whose
	// -w takes a number of seconds.
	minVersion = version{1, 6, 0}
	// restoreWaitVersion is the first iptables-restore that waits for
	// the xtables lock (-w, -W), and the first with MASQUERADE
	// --random-fully.
	restoreWaitVersion = version{1, 6, 2}
)

// Runner runs one variant's binaries for one IP family, in one network
// namespace. Its methods are safe for concurrent use; it holds no state
// but what New found out about the binaries.
type Runner struct {
	variant Variant
	family  backends.Family
	netns   string // "": the current namespace

	exec                   execer
	main, save, restore    string // paths of the binaries
	version                version
	restoreWaits           bool          // the restore binary takes -w and -W
	lockPath               string        // taken by Restore when !restoreWaits
	lockWait, lockInterval time.Duration // for lockPath
}

// New returns a Runner of variant v for family (iptables for IPv4,
// ip6tables for IPv6) that runs every binary inside the network namespace
// at netns (a path such as /run/netns/NAME; "" for the current one). It
// fails with an error wrapping ErrNotInstalled, naming the binaries and
// what to install, when the variant's binaries are missing; and for an
// iptables older than 1.6.0.
func New(v Variant, family backends.Family, netns string) (*Runner, error) {
	return newRunner(v, family, netns, osExec{}, searchDirs())
}

// newRunner is New with its seams: the process runner and where binaries
// are looked for.
func newRunner(v Variant, family backends.Family, netns string, ex execer, dirs []string) (*Runner, error) {
	var names []string
	for _, tool := range []string{toolMain, toolSave, toolRestore} {
		name, err := command(v, family, tool)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	paths, err := lookPaths(dirs, names...)
	if err != nil {
		return nil, err
	}
	r := &Runner{
		variant: v, family: family, netns: netns, exec: ex,
		main: paths[0], save: paths[1], restore: paths[2],
		lockPath: xtablesLockPath, lockWait: lockWaitSeconds * time.Second, lockInterval: lockIntervalMicros * time.Microsecond,
	}
	res, err := ex.run(context.Background(), netns, []string{r.main, "--version"}, nil, nil)
	if err != nil {
		return nil, err
	}
	if res.code != 0 {
		return nil, r.failure([]string{r.main, "--version"}, res)
	}
	ver, mode, err := parseVersion(string(res.stdout))
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", names[0], err)
	}
	if mode != v {
		return nil, fmt.Errorf("%s --version says %q: it is the %s variant, not %s", names[0], strings.TrimSpace(string(res.stdout)), mode, v)
	}
	if ver.less(minVersion) {
		return nil, fmt.Errorf("%s is version %s, older than %s, the oldest wasp supports: upgrade iptables", names[0], ver, minVersion)
	}
	r.version = ver
	r.restoreWaits = !ver.less(restoreWaitVersion)
	return r, nil
}

// Variant returns the Runner's variant.
func (r *Runner) Variant() Variant { return r.variant }

// Family returns the Runner's IP family.
func (r *Runner) Family() backends.Family { return r.family }

// HasRandomFully reports whether the binaries know MASQUERADE
// --random-fully (iptables 1.6.2 and later).
func (r *Runner) HasRandomFully() bool { return !r.version.less(restoreWaitVersion) }

// Input writes the input of a restore to w. RestoreFrom calls it once to
// stream the input to the restore binary, and again when the restore
// fails, to find the lines the binary names: it must write the same
// input every time.
type Input func(w io.Writer) error

// Bytes is the Input that writes b.
func Bytes(b []byte) Input {
	return func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}
}

// Restore feeds input to the variant's restore binary with --noflush (a
// chain the input does not declare is left alone; one it declares with
// ":CHAIN - [0:0]" is flushed first) and --counters, waiting up to 5 s for
// the xtables lock. Each table of input is committed at its COMMIT line,
// atomically: a failure leaves the failing table as it was, but the
// tables before it in input stay committed. A restore that fails returns
// a *RestoreError.
func (r *Runner) Restore(ctx context.Context, input []byte) error {
	return r.RestoreFrom(ctx, Bytes(input))
}

// RestoreFrom is Restore with an input that input writes as the binary
// reads it, so that a large input is never in memory whole.
func (r *Runner) RestoreFrom(ctx context.Context, input Input) error {
	argv := []string{r.restore, "--noflush", "--counters"}
	if r.restoreWaits {
		argv = append(argv, "-w", strconv.Itoa(lockWaitSeconds), "-W", strconv.Itoa(lockIntervalMicros))
	} else {
		unlock, err := lockFile(ctx, r.lockPath, r.lockWait, r.lockInterval)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(r.restore), err)
		}
		defer unlock()
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	var n int64
	go func() {
		cw := &countingWriter{w: pw}
		err := input(cw)
		n = cw.n
		pw.CloseWithError(err) // nil: the binary reads EOF
		written <- err
	}()
	res, err := r.exec.run(ctx, r.netns, argv, pr, nil)
	// A binary that stopped reading early (it failed, or was killed)
	// leaves input blocked on the pipe: this unblocks it.
	pr.CloseWithError(errStoppedReading)
	werr := <-written
	klog.FromContext(ctx).V(4).Info("Restored iptables rules", "command", filepath.Base(r.restore), "bytes", n)
	switch {
	case err != nil:
		return err
	case res.code != 0:
		return newRestoreError(filepath.Base(r.restore), input, res)
	case werr != nil:
		// The binary read up to the error and committed every table it
		// saw whole; none follows the error.
		return fmt.Errorf("%s: write the input: %w", filepath.Base(r.restore), werr)
	}
	return nil
}

// errStoppedReading is what an Input's writes fail with once the restore
// binary exited.
var errStoppedReading = errors.New("the restore binary stopped reading its input")

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Save returns the rules of table as the variant's save binary writes
// them, without counters. With the legacy variant this loads the table
// into the kernel if it was not there.
func (r *Runner) Save(ctx context.Context, table string) ([]byte, error) {
	var out bytes.Buffer
	if err := r.SaveTo(ctx, table, &out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// SaveTo is Save writing the rules to w as the binary writes them, so
// that a large table is never in memory whole. On error, w may have had
// part of them.
func (r *Runner) SaveTo(ctx context.Context, table string, w io.Writer) error {
	argv := []string{r.save, "-t", table}
	res, err := r.exec.run(ctx, r.netns, argv, nil, w)
	if err != nil {
		return err
	}
	if res.code != 0 {
		return r.failure(argv, res)
	}
	return nil
}

// EnsureChain creates chain in table unless it exists.
func (r *Runner) EnsureChain(ctx context.Context, table, chain string) error {
	argv, res, err := r.run(ctx, "-t", table, "-N", chain)
	if err != nil || res.code == 0 {
		return err
	}
	// Exit status 1 is also "Chain already exists".
	if exists, err := r.ChainExists(ctx, table, chain); err == nil && exists {
		return nil
	}
	return r.failure(argv, res)
}

// ChainExists reports whether table has chain.
func (r *Runner) ChainExists(ctx context.Context, table, chain string) (bool, error) {
	// Listing rule 1 only costs nothing for a long chain, and succeeds
	// for an empty one.
	argv, res, err := r.run(ctx, "-t", table, "-S", chain, "1")
	switch {
	case err != nil:
		return false, err
	case res.code == 0:
		return true, nil
	case res.code == 1:
		return false, nil
	}
	return false, r.failure(argv, res)
}

// EnsureRule checks for the rule args in chain of table and, when it is
// missing, inserts it first in the chain. existed says it was there.
// args is the rule as iptables takes it after the chain
// ("-m", "comment", "--comment", "x", "-j", "WASP-SERVICES").
func (r *Runner) EnsureRule(ctx context.Context, table, chain string, args ...string) (existed bool, err error) {
	argv, res, err := r.run(ctx, append([]string{"-t", table, "-C", chain}, args...)...)
	switch {
	case err != nil:
		return false, err
	case res.code == 0:
		return true, nil
	case res.code != 1: // 1: no such rule (or chain)
		return false, r.failure(argv, res)
	}
	argv, res, err = r.run(ctx, append([]string{"-t", table, "-I", chain}, args...)...)
	if err != nil {
		return false, err
	}
	if res.code != 0 {
		return false, r.failure(argv, res)
	}
	return false, nil
}

// DeleteRule deletes the rule args from chain of table. A rule that is
// not there, because it never was, its chain is missing or the chain it
// jumps to is, is no error.
func (r *Runner) DeleteRule(ctx context.Context, table, chain string, args ...string) error {
	argv, res, err := r.run(ctx, append([]string{"-t", table, "-D", chain}, args...)...)
	if err != nil || res.code == 0 {
		return err
	}
	if gone, err := r.ruleGone(ctx, table, chain, args); err == nil && gone {
		return nil
	}
	return r.failure(argv, res)
}

// ruleGone reports whether the rule args cannot be in chain of table.
// Both variants exit with 1 for -C of a missing rule or chain. A rule
// that jumps to a missing chain is a parameter problem (2) for -C, with
// the chain's name quoted in the message (nft: "Chain 'X' does not
// exist", legacy: "Couldn't load target `X'").
func (r *Runner) ruleGone(ctx context.Context, table, chain string, args []string) (bool, error) {
	_, res, err := r.run(ctx, append([]string{"-t", table, "-C", chain}, args...)...)
	switch {
	case err != nil:
		return false, err
	case res.code == 1:
		return true, nil
	case res.code != 2:
		return false, nil
	}
	target := jumpTarget(args)
	if target == "" || !(strings.Contains(string(res.stderr), "'"+target+"'") || strings.Contains(string(res.stderr), "`"+target+"'")) {
		return false, nil
	}
	exists, err := r.ChainExists(ctx, table, target)
	return err == nil && !exists, err
}

// jumpTarget returns the last -j or -g argument of a rule, or "".
func jumpTarget(args []string) string {
	target := ""
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-j", "--jump", "-g", "--goto":
			target = args[i+1]
		}
	}
	return target
}

// DeleteChain flushes chain of table and deletes it. A missing chain is
// no error; a chain that rules still jump to is.
func (r *Runner) DeleteChain(ctx context.Context, table, chain string) error {
	for _, op := range []string{"-F", "-X"} {
		argv, res, err := r.run(ctx, "-t", table, op, chain)
		if err != nil {
			return err
		}
		if res.code == 0 {
			continue
		}
		if exists, err := r.ChainExists(ctx, table, chain); err == nil && !exists {
			return nil
		}
		return r.failure(argv, res)
	}
	return nil
}

// run runs the variant's main binary with args, waiting for the xtables
// lock, and returns the argv it ran.
func (r *Runner) run(ctx context.Context, args ...string) ([]string, result, error) {
	argv := append([]string{r.main, "-w", strconv.Itoa(lockWaitSeconds)}, args...)
	klog.FromContext(ctx).V(5).Info("Running iptables", "command", argv)
	res, err := r.exec.run(ctx, r.netns, argv, nil, nil)
	return argv, res, err
}

// failure is the error of a binary that exited non-zero: its command
// line, exit status and message.
func (r *Runner) failure(argv []string, res result) error {
	cmd := append([]string{filepath.Base(argv[0])}, argv[1:]...)
	return fmt.Errorf("%s: exit status %d: %s", strings.Join(cmd, " "), res.code, condense(string(res.stderr)))
}

// condense joins the lines of an iptables message into one, without the
// usage hint ("Try `iptables -h' ...") and the notice about the ignored
// wait interval.
func condense(msg string) string {
	var lines []string
	for l := range strings.Lines(msg) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Try `") || strings.HasPrefix(l, "Ignoring deprecated --wait-interval") {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return "no message"
	}
	return strings.Join(lines, "; ")
}
