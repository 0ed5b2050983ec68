package worker

import (
	"fmt"
	"math/bits"
	"os"
	"sync"

	"github.com/wasp-proxy/wasp/abi"
)

// A call's input and output cross between a Module and its worker in
// shared memory rather than through the pipes: each worker has slots,
// one per call it can run at once, each a memory file (memfd) that the
// parent creates before it starts the worker, passes it as a file
// descriptor (slotFD and up) and maps, as the worker does. A call takes
// a free slot, copies its input to the slot's start and sends a header;
// the worker runs the module over the input where it is, has it append
// its output after it, and answers with where the output is; the parent
// checks that against the slot's size (it trusts nothing the worker
// says), copies the output out once and frees the slot. That is one copy
// each way instead of two through a pipe, and no pipe buffers. A call
// that finds no free slot (more calls at once than the module has
// instances, or slots still held by calls given up, below) sends its
// input through the pipe, as does one whose input no slot can hold: it
// costs more, and nothing else changes, the watchdog's bounds among them.
//
// The parent seals each file against shrinking before the worker gets
// it: a worker, whatever runs in it, cannot make the parent's mapping
// point past the file's end (which would be SIGBUS in wasp). It may grow
// it, which changes nothing for the parent, which maps the size it chose.
// The parent grows a slot when a call's input and the largest output it
// can have (abi.MaxOutputLen) do not fit; the call's header carries the
// new size, and the worker maps the slot again.
const (
	// maxSlots bounds a worker's slots.
	maxSlots = 64
	// minSlotSize is the least size a slot is given, when first used.
	minSlotSize = 64 << 10
	// maxSlotSize bounds a slot's size (the header's u32 holds it): an
	// input past it goes in the pipe, as does an output that does not fit
	// in a slot of maxSlotSize.
	maxSlotSize = 1 << 30
	// noSlot, in a call's header: the input is the frame's payload.
	noSlot = ^uint32(0)
	// slotFD is the worker's file descriptor of its first slot:
	// cmd.ExtraFiles 2.
	slotFD = 5
)

// slot is a shared memory slot, on the parent's side.
type slot struct {
	index uint32
	f     *os.File // the memory file, which the worker has too
	mem   []byte   // this process's mapping of it: the slot's size
}

// slots are a worker's slots, on the parent's side. A slot belongs to
// the free channel, to the call that took it, or to proc.retired (a call
// given up, whose answer the worker still owes: it may still write to the
// slot) until the worker answers; a retired slot is freed by the answer.
// Once the worker exited, each slot is unmapped and closed by whoever
// holds it, when it is released (close).
type slots struct {
	files []*os.File // for cmd.ExtraFiles
	free  chan *slot

	mu     sync.Mutex
	closed bool
}

// newSlots creates n slots (unmapped, empty), at most maxSlots.
func newSlots(n int) (*slots, error) {
	n = max(1, min(n, maxSlots))
	ss := &slots{free: make(chan *slot, n)}
	for i := range n {
		f, err := newSlotFile()
		if err != nil {
			ss.close()
			return nil, fmt.Errorf("shared memory: %w", err)
		}
		ss.files = append(ss.files, f)
		ss.free <- &slot{index: uint32(i), f: f}
	}
	return ss, nil
}

// take returns a free slot, nil if none is.
func (ss *slots) take() *slot {
	select {
	case s := <-ss.free:
		return s
	default:
		return nil
	}
}

// release frees s, or unmaps and closes it if the worker exited.
func (ss *slots) release(s *slot) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		s.close()
		return
	}
	ss.free <- s // never blocks: it has room for every slot
}

// close unmaps and closes the free slots, once the worker exited; the
// others are closed when released.
func (ss *slots) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for {
		select {
		case s := <-ss.free:
			s.close()
		default:
			return
		}
	}
}

// trim gives the memory of the free slots back to the system; their
// pages read as zeros after.
func (ss *slots) trim() {
	var held []*slot
	defer func() {
		for _, s := range held {
			ss.release(s)
		}
	}()
	for range cap(ss.free) {
		select {
		case s := <-ss.free:
			held = append(held, s)
			_ = s.trim() // an error: the memory stays in use, nothing else
		default:
			return
		}
	}
}

// put copies input to the start of s, which it first grows to hold
// input and the largest output a module may return for it, and returns
// the header fields that say where it is. It fails if s cannot hold it:
// the input then goes in the pipe.
func (s *slot) put(input []byte) (length, size uint32, err error) {
	if len(input) > maxSlotSize {
		return 0, 0, fmt.Errorf("input of %d bytes, more than a slot's %d", len(input), maxSlotSize)
	}
	need := uint64(len(input)) + uint64(abi.MaxOutputLen(input))
	if need > uint64(len(s.mem)) && len(s.mem) < maxSlotSize {
		size := uint64(1) << bits.Len64(max(need, minSlotSize)-1) // the next power of two
		if err := s.grow(int(min(size, maxSlotSize))); err != nil {
			return 0, 0, err
		}
	}
	copy(s.mem, input)
	return uint32(len(input)), uint32(len(s.mem)), nil
}

// output appends to dst the output that the worker says is n bytes at
// off in s, if it is within s.
func (s *slot) output(off, n uint32, dst []byte) ([]byte, error) {
	if s == nil {
		return dst, fmt.Errorf("an output in shared memory, for a call without a slot")
	}
	if end := uint64(off) + uint64(n); end > uint64(len(s.mem)) {
		return dst, fmt.Errorf("output [%d,+%d) outside its slot of %d bytes", off, n, len(s.mem))
	}
	return append(dst, s.mem[off:off+n]...), nil
}
