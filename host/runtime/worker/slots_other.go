//go:build !linux

package worker

import (
	"fmt"
	"os"
)

// errNoSharedMemory: slots exist on Linux only, as workers do.
var errNoSharedMemory = fmt.Errorf("shared memory: %w", ErrNotSupported)

func newSlotFile() (*os.File, error)   { return nil, errNoSharedMemory }
func (s *slot) grow(int) error         { return errNoSharedMemory }
func (s *slot) trim() error            { return nil }
func (s *slot) unmap()                 {}
func (s *slot) close()                 {}
func mapSlot(int, int) ([]byte, error) { return nil, errNoSharedMemory }
func unmapSlot([]byte)                 {}
