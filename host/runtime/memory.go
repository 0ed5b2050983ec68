package runtime

import (
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// memoryPool gives the instances of one module their linear memories, and
// caps what they hold together (Limits.PoolMemoryBytes): a grow past the
// cap fails in the guest as a grow past the per-instance cap does
// (memory.grow returns -1), so the host cost of a module does not
// multiply with its instance pool. On Linux each memory is its own
// anonymous mapping, reserved at the instance's cap and grown in place:
// growing copies nothing and leaves no garbage, pages cost the node only
// once touched, and closing an instance returns them to the kernel at
// once instead of at the Go collector's next cycle.
type memoryPool struct {
	limit uint64
	used  atomic.Uint64
	// refused counts grows refused by the pool's cap.
	refused atomic.Uint64
}

var _ experimental.MemoryAllocator = (*memoryPool)(nil)

// reserve accounts for n more bytes, or reports that the pool's cap does
// not allow them.
func (p *memoryPool) reserve(n uint64) bool {
	for {
		used := p.used.Load()
		if used+n > p.limit {
			p.refused.Add(1)
			return false
		}
		if p.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

func (p *memoryPool) release(n uint64) { p.used.Add(-n) }

// heapMemory is a linear memory on the Go heap, for platforms without
// mappings: it grows by copying, like wazero's own.
type heapMemory struct {
	pool *memoryPool
	buf  []byte
}

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size <= uint64(len(m.buf)) {
		return m.buf[:size]
	}
	if !m.pool.reserve(size - uint64(len(m.buf))) {
		return nil
	}
	m.buf = append(m.buf, make([]byte, size-uint64(len(m.buf)))...)
	return m.buf
}

func (m *heapMemory) Free() {
	m.pool.release(uint64(len(m.buf)))
	m.buf = nil
}
