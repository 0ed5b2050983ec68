package runtime

import (
	"golang.org/x/sys/unix"

	"github.com/tetratelabs/wazero/experimental"
)

// allocate reserves a mapping of max bytes (the instance's cap): the
// kernel backs a page only when the guest first touches it. reserved
// bytes of linear memory, and extra bytes the instance keeps besides, are
// already accounted in the pool, and the memory holds them.
func (p *memoryPool) allocate(_, max, reserved, extra uint64) experimental.LinearMemory {
	if max == 0 {
		max = pageSize
	}
	buf, err := unix.Mmap(-1, 0, int(max), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		// No address space left for a mapping: fall back to the heap.
		return &heapMemory{pool: p, accounted: reserved, extra: extra}
	}
	return &mappedMemory{pool: p, buf: buf, size: reserved, extra: extra}
}

// mappedMemory is a linear memory in a mapping reserved at its cap, so it
// grows in place.
type mappedMemory struct {
	pool *memoryPool
	buf  []byte // the whole mapping
	size uint64 // bytes reserved in the pool: at least those in use
	// extra is what the instance keeps besides, reserved in the pool too.
	extra uint64
}

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) {
		return nil
	}
	if size > m.size {
		if !m.pool.reserve(size - m.size) {
			return nil
		}
		m.size = size
	}
	return m.buf[:size:size]
}

// Free unmaps the memory; it may be called more than once.
func (m *mappedMemory) Free() {
	if m.buf == nil {
		return
	}
	m.pool.release(m.size + m.extra)
	_ = unix.Munmap(m.buf)
	m.buf, m.size, m.extra = nil, 0, 0
}
