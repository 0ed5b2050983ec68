//go:build !linux

package worker

import (
	"errors"
	"os"
	"syscall"
)

// supported: workers do not run here (a worker's pipes are passed as
// extra file descriptors, which Windows lacks, and its memory is read from
// /proc).
const supported = false

// prepare does nothing here.
func prepare() {}

// setDataLimit cannot limit anything here.
func setDataLimit(uint64) error { return errors.ErrUnsupported }

// growPipe does nothing here.
func growPipe(*os.File) {}

// writeVec writes the buffers of vec to f, one after the other.
func writeVec(f *os.File, vec [][]byte) error {
	for _, b := range vec {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// selfExecutable is the running executable.
func selfExecutable() (string, error) { return os.Executable() }

// childAttr is nil here.
func childAttr() *syscall.SysProcAttr { return nil }

// residentMemory cannot read a process's memory here.
func residentMemory(int) (rss, peak uint64, ok bool) { return 0, 0, false }

// prepareSlots does nothing here.
func prepareSlots(int) {}
