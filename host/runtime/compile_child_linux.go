package runtime

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// yieldToParent makes the calling compile child the first process the
// kernel kills when its cgroup or the node runs out of memory, so that a
// costly compilation does not get the proxy that started it killed.
// Raising one's own score needs no privilege. (Its CPU priority stays:
// at a lower one, a busy node would starve a compilation of an ordinary
// module past its time limit.)
func yieldToParent() {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
}

// selfExecutable is the running executable, even if its file was
// replaced or removed since it started.
func selfExecutable() (string, error) { return "/proc/self/exe", nil }

// residentBytes is the resident memory of process pid.
func residentBytes(pid int) (uint64, bool) {
	statm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false // not started yet, or gone
	}
	// size resident shared text lib data dt, in pages
	fields := bytes.Fields(statm)
	if len(fields) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(string(fields[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}

// childAttr makes a compile child get SIGKILL when the thread that
// started it ends, with its process: an orphaned child stops at once
// instead of at its own time limit.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
