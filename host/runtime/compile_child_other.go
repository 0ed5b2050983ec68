//go:build !linux

package runtime

import "os"

// selfExecutable is the running executable.
func selfExecutable() (string, error) { return os.Executable() }

// yieldToParent does nothing here.
func yieldToParent() {}

// watchMemory does nothing where resident memory is not read: a compile
// child is bounded in time only.
func watchMemory(*os.Process, uint64, chan<- struct{}) (stop func()) { return func() {} }
