package xtables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/wasp-proxy/wasp/internal/nsthread"
)

// execer is the seam between a Runner and the processes it starts.
type execer interface {
	// run starts argv[0] (a path) with arguments argv[1:] inside the
	// network namespace at netns ("" for the current one), and waits for
	// it. Its standard input is read from stdin (none if nil); its
	// standard output goes to stdout as it comes, or into the result
	// when stdout is nil. A process that ran and exited non-zero is a
	// result with its exit code, not an error: err says it could not run
	// or was killed.
	run(ctx context.Context, netns string, argv []string, stdin io.Reader, stdout io.Writer) (result, error)
}

// result is what a finished process left.
type result struct {
	stdout []byte // nil when run was given a writer for it
	stderr []byte
	code   int // exit status
}

// osExec runs real processes.
type osExec struct{}

var _ execer = osExec{}

func (osExec) run(ctx context.Context, netns string, argv []string, stdin io.Reader, stdout io.Writer) (result, error) {
	var res result
	// The child is forked from the thread that calls Start, so it is born
	// in that thread's namespace.
	err := nsthread.Do(netns, func() error {
		var out, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, &stderr
		if stdout == nil {
			cmd.Stdout = &out
		}
		err := cmd.Run()
		res = result{stderr: stderr.Bytes()}
		if stdout == nil {
			res.stdout = out.Bytes()
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() > 0 && ctx.Err() == nil {
			res.code = exit.ExitCode()
			return nil
		}
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	})
	if err != nil {
		return result{}, fmt.Errorf("run %s: %w", filepath.Base(argv[0]), err)
	}
	return res, nil
}

// searchDirs returns where binaries are looked for: PATH, then /usr/sbin
// and /sbin, where distributions install iptables and which a service's
// PATH may lack.
func searchDirs() []string {
	var dirs []string
	for _, d := range append(filepath.SplitList(os.Getenv("PATH")), "/usr/sbin", "/sbin") {
		if d != "" && filepath.IsAbs(d) && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// ErrNotInstalled is wrapped by the error of New (and so of Detect) when
// binaries of the variant are missing.
var ErrNotInstalled = errors.New("iptables binaries not installed")

// installHint says what to install, for the error of a missing binary.
const installHint = `install the iptables package (Debian and Ubuntu: "apt-get install iptables"; ` +
	`iptables 1.8 and later provide both the nft and the legacy variant)`

// lookPaths returns the path of each named executable in the first of
// dirs that has it, or one error naming every missing one.
func lookPaths(dirs []string, names ...string) ([]string, error) {
	var paths, missing []string
	for _, name := range names {
		found := ""
		for _, d := range dirs {
			if p, err := exec.LookPath(filepath.Join(d, name)); err == nil {
				found = p
				break
			}
		}
		if found == "" {
			missing = append(missing, name)
		}
		paths = append(paths, found)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s not found in %s: %s",
			ErrNotInstalled, strings.Join(missing, ", "), strings.Join(dirs, ":"), installHint)
	}
	return paths, nil
}
