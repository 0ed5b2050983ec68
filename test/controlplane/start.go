package controlplane

import (
	"os/exec"
	"runtime"
)

// StartPinned starts cmd and calls exited with cmd.Wait's result once it
// has exited.
//
// Why pinned? On Linux the processes here get SysProcAttr.Pdeathsig, so
// that they die with the test binary. But the kernel sends that signal
// when the parent *thread* exits, not the parent process, and the Go
// runtime ends an OS thread whenever a goroutine locked to it returns
// without unlocking, which network-namespace code (netlab's NS.Do) does
// all the time. A child forked from such a thread would be killed at
// random (golang/go#27505). So cmd is started from a goroutine locked to
// its thread, and that goroutine waits for cmd there: the thread lives
// exactly as long as the child.
func StartPinned(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}
