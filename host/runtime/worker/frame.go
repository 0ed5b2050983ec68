package worker

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// The protocol between a Module and its worker: frames over two pipes,
// one each way, and shared memory (slots.go). A frame is a header of
// headerSize bytes, little-endian like the ABI,
//
//	offset 0   u32  length of the payload
//	offset 4   u8   kind
//	offset 5   u8   stage (kindCall), else 0
//	offset 6   u16  0
//	offset 8   u64  id of the call it is about (0 for kindLoad, kindLoaded)
//	offset 16  u32  kindCall: the slot the input is in, noSlot if none
//	offset 20  u32  kindOutputShared: the output's offset in the slot
//	offset 24  u32  kindCall: the input's length in the slot;
//	                kindOutputShared: the output's length
//	offset 28  u32  kindCall: the slot's size
//
// and its payload. A call's input batch, as the pipeline encoded it
// (docs/abi.md), is at the start of its slot, and the worker writes the
// module's raw output in the same slot, after it: nothing is decoded or
// encoded again on the way, and only headers cross the pipes. A call
// without a slot (its batch does not fit in the largest one) carries its
// input as the payload, and an output that does not fit in the slot comes
// back as the payload of a kindOutput. The worker answers calls in any
// order; ids tell them apart.
const headerSize = 32

// maxPayload bounds a frame's payload, so that a corrupt length cannot
// make either side allocate without end: far more than a batch of
// pipeline.Options.MaxChunk ports or a module binary.
const maxPayload = 1 << 30

// kind is a frame's type.
type kind uint8

const (
	// kindLoad (to the worker, first and once): a loadRequest in JSON.
	kindLoad kind = iota + 1
	// kindCall (to the worker): a stage call; its input is in its slot,
	// or the payload.
	kindCall
	// kindCancel (to the worker): the call's caller gave up; no payload.
	kindCancel
	// kindShrink (to the worker): runtime.Module.Shrink; no payload.
	kindShrink

	// kindLoaded (from the worker, first and once): a loadReply in JSON.
	kindLoaded
	// kindOutput (from the worker): a call succeeded; the payload is its
	// output.
	kindOutput
	// kindFailed (from the worker): a call failed; the payload is a
	// wireError in JSON.
	kindFailed
	// kindShrunk (from the worker): a shrink is done; the payload is its
	// error's message, empty if none.
	kindShrunk
	// kindOutputShared (from the worker): a call succeeded; its output is
	// in its slot, where the header says. No payload.
	kindOutputShared
)

// header is a frame's header.
type header struct {
	size  uint32
	kind  kind
	stage abi.Stage
	id    uint64
	// slot, off, length and slotSize are where a call's input or output
	// is in shared memory (kindCall, kindOutputShared).
	slot, off, length, slotSize uint32
}

// put writes h into b, which has headerSize bytes.
func (h header) put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], h.size)
	b[4], b[5], b[6], b[7] = byte(h.kind), byte(h.stage), 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.id)
	binary.LittleEndian.PutUint32(b[16:], h.slot)
	binary.LittleEndian.PutUint32(b[20:], h.off)
	binary.LittleEndian.PutUint32(b[24:], h.length)
	binary.LittleEndian.PutUint32(b[28:], h.slotSize)
}

// frameWriter writes frames, one at a time.
type frameWriter struct {
	mu   sync.Mutex
	w    io.Writer
	head [headerSize]byte
	vec  [2][]byte
}

// write writes a frame: its header (h.size set to the payload's), then
// its payload.
func (fw *frameWriter) write(h header, payload []byte) error {
	h.size = uint32(len(payload))
	fw.mu.Lock()
	defer fw.mu.Unlock()
	h.put(fw.head[:])
	if f, ok := fw.w.(*os.File); ok {
		// In one system call where the pipe has room: the reader wakes
		// up once, to the whole frame.
		fw.vec = [2][]byte{fw.head[:], payload}
		err := writeVec(f, fw.vec[:])
		fw.vec = [2][]byte{}
		return err
	}
	if _, err := fw.w.Write(fw.head[:]); err != nil {
		return err
	}
	_, err := fw.w.Write(payload)
	return err
}

// readHeader reads a frame's header into h, using b (headerSize bytes)
// to read it.
func readHeader(r io.Reader, b []byte) (h header, err error) {
	if _, err := io.ReadFull(r, b[:headerSize]); err != nil {
		return h, err
	}
	h = header{
		size: binary.LittleEndian.Uint32(b[0:]), kind: kind(b[4]), stage: abi.Stage(b[5]), id: binary.LittleEndian.Uint64(b[8:]),
		slot: binary.LittleEndian.Uint32(b[16:]), off: binary.LittleEndian.Uint32(b[20:]),
		length: binary.LittleEndian.Uint32(b[24:]), slotSize: binary.LittleEndian.Uint32(b[28:]),
	}
	if h.size > maxPayload {
		return h, fmt.Errorf("frame of %d bytes", h.size)
	}
	return h, nil
}

// readPayload appends the n bytes of a payload to dst.
func readPayload(r io.Reader, dst []byte, n uint32) ([]byte, error) {
	start := len(dst)
	if cap(dst)-start < int(n) {
		grown := make([]byte, start, start+int(n))
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:start+int(n)]
	_, err := io.ReadFull(r, dst[start:])
	return dst, err
}

// loadRequest is what a worker loads, and how.
type loadRequest struct {
	Name   string         `json:"name"`
	Wasm   []byte         `json:"wasm"`
	Config []byte         `json:"config,omitempty"`
	Limits runtime.Limits `json:"limits"`
	// The worker's runtime configuration, less Compiled (a function).
	CacheDir       string                `json:"cacheDir,omitempty"`
	Interrupt      runtime.Interrupt     `json:"interrupt,omitempty"`
	Compile        runtime.CompileLimits `json:"compile"`
	IsolateCompile bool                  `json:"isolateCompile,omitempty"`
	// DataLimit is the worker's RLIMIT_DATA, 0 for none, and Memory the
	// resident memory past which it stops itself (somewhat later than
	// its parent would stop it).
	DataLimit uint64 `json:"dataLimit,omitempty"`
	Memory    uint64 `json:"memory,omitempty"`
	// Slots is the number of the worker's slots: file descriptors
	// slotFD and up.
	Slots int `json:"slots,omitempty"`
}

// loadReply is the outcome of a load: what the module declares and its
// configuration as runtime.Module has them, or why it did not load.
type loadReply struct {
	Metadata *metadata.Metadata `json:"metadata,omitempty"`
	Config   []byte             `json:"config,omitempty"`
	// Compiled says whether the load compiled the module (false: the
	// machine code came from the cache), if it asked for a compilation.
	Compiled []bool `json:"compiled,omitempty"`
	// Err is the load's error, if it failed, with the classes of it that
	// callers act on.
	Err *wireLoadError `json:"err,omitempty"`
}

// wireLoadError is a load error with its classes.
type wireLoadError struct {
	Message        string `json:"message"`
	Invalid        bool   `json:"invalid,omitempty"`
	ConfigRejected bool   `json:"configRejected,omitempty"`
	Compile        bool   `json:"compile,omitempty"`
}

// wireError is a *runtime.CallError, its Err reduced to its message.
type wireError struct {
	Reason  runtime.Reason `json:"reason"`
	Stderr  string         `json:"stderr,omitempty"`
	Message string         `json:"message,omitempty"`
}
