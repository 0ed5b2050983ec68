package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// process is one started binary, with its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // exit status, valid once done is closed
}

func startProcess(bin, logPath string, args ...string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	p := &process{name: filepath.Base(bin), cmd: cmd, logPath: logPath, done: make(chan struct{})}
	if err := StartPinned(cmd, func(err error) {
		p.err = err
		logFile.Close()
		close(p.done)
	}); err != nil {
		logFile.Close()
		return nil, err
	}
	return p, nil
}

// waitReady polls ready every 100ms until it reports true, the process
// exits, ctx ends or readyTimeout passes.
func (p *process) waitReady(ctx context.Context, ready func() bool) error {
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-p.done:
			return fmt.Errorf("%s (pid %d) exited during start-up: %v; last lines of %s:\n%s",
				p.name, p.cmd.Process.Pid, p.err, p.logPath, p.logTail(30))
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", p.name, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("%s (pid %d) not ready after %s; last lines of %s:\n%s",
				p.name, p.cmd.Process.Pid, readyTimeout, p.logPath, p.logTail(30))
		case <-tick.C:
		}
	}
	return nil
}

// stop sends SIGTERM to the process, by PID, and SIGKILL if it has not
// exited after stopGrace.
func (p *process) stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Logf("stop %s (pid %d): %v", p.name, pid, err)
	}
	select {
	case <-p.done:
		return
	case <-time.After(stopGrace):
	}
	t.Logf("%s (pid %d) still running %s after SIGTERM, killing it", p.name, pid, stopGrace)
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	return lastLines(b, n)
}
