package worker

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// newSlotFile creates a slot's memory file, empty, sealed against
// shrinking and against further seals: the worker it is passed to can
// neither shrink it under this process's mapping nor seal it against the
// growth this process may need.
func newSlotFile() (*os.File, error) {
	fd, err := unix.MemfdCreate("wasp-worker-slot", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sealing a memfd: %w", err)
	}
	return os.NewFile(uintptr(fd), "wasp-worker-slot"), nil
}

// grow makes s size bytes, more than it is, and maps it again.
func (s *slot) grow(size int) error {
	fd := int(s.f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("shared memory: %w", err)
	}
	// The worker may have grown the file already: it cannot be shrunk
	// back, and need not be.
	if st.Size < int64(size) {
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			return fmt.Errorf("shared memory of %d bytes: %w", size, err)
		}
	}
	mem, err := mapSlot(fd, size)
	if err != nil {
		return err
	}
	s.unmap()
	s.mem = mem
	return nil
}

// trim gives the memory of s back to the system (for this process and
// the worker); its pages read as zeros after.
func (s *slot) trim() error {
	if len(s.mem) == 0 {
		return nil
	}
	return unix.Fallocate(int(s.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, int64(len(s.mem)))
}

// unmap unmaps s, if mapped.
func (s *slot) unmap() {
	if s.mem != nil {
		_ = unix.Munmap(s.mem)
		s.mem = nil
	}
}

// close unmaps and closes s.
func (s *slot) close() {
	s.unmap()
	s.f.Close()
}

// mapSlot maps size bytes of the slot file fd, shared, readable and
// writable.
func mapSlot(fd, size int) ([]byte, error) {
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of shared memory: %w", size, err)
	}
	return mem, nil
}

// unmapSlot unmaps a mapping of mapSlot.
func unmapSlot(mem []byte) {
	if mem != nil {
		_ = unix.Munmap(mem)
	}
}
