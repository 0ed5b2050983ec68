//go:build !unix

package localfile

// openFlags: no FIFOs or terminals to guard against by flags here; Read
// still refuses whatever is not a regular file.
const openFlags = 0
