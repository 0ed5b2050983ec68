package runtime

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// yieldToParent makes the calling compile child the first process the
// kernel kills when its cgroup or the node runs out of memory, and the
// last to get a CPU, so that a costly compilation takes neither memory
// nor time from the proxy that started it. Both are best effort: raising
// them needs no privilege.
func yieldToParent() {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19)
}

// selfExecutable is the running executable, even if its file was
// replaced or removed since it started.
func selfExecutable() (string, error) { return "/proc/self/exe", nil }

// memoryPollInterval is how often a compile child's resident memory is
// read.
const memoryPollInterval = 20 * time.Millisecond

// watchMemory kills p, and closes over, if its resident memory grows past
// limit. The returned function stops watching.
func watchMemory(p *os.Process, limit uint64, over chan<- struct{}) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	path := "/proc/" + strconv.Itoa(p.Pid) + "/statm"
	page := uint64(os.Getpagesize())
	go func() {
		defer close(stopped)
		t := time.NewTicker(memoryPollInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			statm, err := os.ReadFile(path)
			if err != nil {
				continue // not started yet, or gone
			}
			// size resident shared text lib data dt, in pages
			fields := bytes.Fields(statm)
			if len(fields) < 2 {
				continue
			}
			resident, err := strconv.ParseUint(string(fields[1]), 10, 64)
			if err == nil && resident*page > limit {
				close(over)
				_ = p.Kill()
				return
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
