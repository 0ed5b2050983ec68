//go:build unix

package reload

import (
	"os"
	"syscall"
)

// inode returns fi's inode number: a file replaced by rename keeps its
// size and may keep its modification time, not its inode.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
