//go:build !linux

package runtime

import "github.com/tetratelabs/wazero/experimental"


// allocate returns a memory on the Go heap, holding reserved bytes
// already accounted in the pool.
func (p *memoryPool) allocate(_, _, reserved uint64) experimental.LinearMemory {
	return &heapMemory{pool: p, accounted: reserved}
}
