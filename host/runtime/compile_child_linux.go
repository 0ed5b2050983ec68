package runtime

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

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
