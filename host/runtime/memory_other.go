//go:build !linux

package runtime

import "github.com/tetratelabs/wazero/experimental"

// allocate returns a memory on the Go heap, holding reserved and extra
// bytes already accounted in the pool (see the Linux allocate).
func (p *memoryPool) allocate(_, _, reserved, extra uint64) experimental.LinearMemory {
	return &heapMemory{pool: p, accounted: reserved, extra: extra}
}
