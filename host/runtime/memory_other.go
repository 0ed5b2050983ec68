//go:build !linux

package runtime

import "github.com/tetratelabs/wazero/experimental"

// Allocate returns a memory on the Go heap.
func (p *memoryPool) Allocate(_, _ uint64) experimental.LinearMemory {
	return &heapMemory{pool: p}
}
