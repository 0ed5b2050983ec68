//go:build unix

package controlplane

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path, so that test processes of
// several packages do not build the same binaries at the same time.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
