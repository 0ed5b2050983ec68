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

// inUse returns the bytes the pool's memories hold.
func (p *memoryPool) inUse() uint64 { return p.used.Load() }

// reservation is the allocator of one new instance: its pool, with the
// instance's declared minimum already reserved in it (newInstance), so
// that wazero's first request, for that minimum, cannot fail. wazero
// panics, outside any recover, when the allocator cannot give a new
// memory its minimum; a reservation turns that into an error returned
// before instantiating. A reservation the instantiation did not take
// (it failed before creating the memory) is given back with cancel.
type reservation struct {
	pool *memoryPool
	// bytes is the linear memory reserved, and extra the host memory
	// the instance keeps besides (Module.hostBytes): the memory holds
	// both, and releases them when freed.
	bytes, extra uint64
	mem          experimental.LinearMemory // the memory Allocate returned, if any
}

var _ experimental.MemoryAllocator = (*reservation)(nil)

// Allocate gives the instance its memory, holding the reserved bytes.
func (r *reservation) Allocate(cap, max uint64) experimental.LinearMemory {
	if r.mem != nil {
		// wasp's modules have one memory: a second one gets no
		// reservation, and its minimum must be reserved as it grows.
		return r.pool.allocate(cap, max, 0, 0)
	}
	r.mem = r.pool.allocate(cap, max, r.bytes, r.extra)
	r.bytes, r.extra = 0, 0
	return r.mem
}

// cancel releases what no memory took, and frees the memory if the
// instantiation failed after creating it.
func (r *reservation) cancel(failed bool) {
	r.pool.release(r.bytes + r.extra)
	r.bytes, r.extra = 0, 0
	if failed && r.mem != nil {
		r.mem.Free()
	}
}

// heapMemory is a linear memory on the Go heap, for platforms without
// mappings: it grows by copying, like wazero's own.
type heapMemory struct {
	pool *memoryPool
	buf  []byte
	// accounted is the bytes reserved in the pool for the memory: at
	// least len(buf); extra is what the instance keeps besides.
	accounted, extra uint64
}

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size <= uint64(len(m.buf)) {
		return m.buf[:size]
	}
	if size > m.accounted {
		if !m.pool.reserve(size - m.accounted) {
			return nil
		}
		m.accounted = size
	}
	m.buf = append(m.buf, make([]byte, size-uint64(len(m.buf)))...)
	return m.buf
}

// Free releases the memory; it may be called more than once.
func (m *heapMemory) Free() {
	m.pool.release(m.accounted + m.extra)
	m.buf, m.accounted, m.extra = nil, 0, 0
}
