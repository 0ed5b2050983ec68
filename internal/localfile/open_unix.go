//go:build unix

package localfile

import "syscall"

// openFlags keep an open from blocking on a FIFO that replaced the file
// after it was looked at, and a terminal from becoming wasp's.
const openFlags = syscall.O_NONBLOCK | syscall.O_NOCTTY
