//go:build !linux

package runtime

import (
	"os"
	"syscall"
)

// selfExecutable is the running executable.
func selfExecutable() (string, error) { return os.Executable() }

// yieldToParent does nothing here.
func yieldToParent() {}

// residentBytes cannot read a process's resident memory here.
func residentBytes(int) (uint64, bool) { return 0, false }

// childAttr is nil here: a compile child stops at its own time limit.
func childAttr() *syscall.SysProcAttr { return nil }
