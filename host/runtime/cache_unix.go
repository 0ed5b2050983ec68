//go:build unix

package runtime

import (
	"fmt"
	"os"
	"syscall"
)

// checkPrivateDir refuses a directory owned by another user, or writable
// by its group or by others.
func checkPrivateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("owned by uid %d, not %d: %w", st.Uid, os.Geteuid(), errSharedCache)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("mode %#o lets others write: %w", perm, errSharedCache)
	}
	return nil
}
