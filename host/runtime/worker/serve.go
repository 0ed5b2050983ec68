package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// childEnv, set in its environment, makes a process that links this
// package a worker (serve) before its main function runs. The value is
// the version of the protocol between parent and worker.
const childEnv = "WASP_INTERNAL_WORKER"

const childProtocol = "2"

// The worker's ends of its pipes: cmd.ExtraFiles 0 and 1. Its slots
// follow (slotFD).
const (
	requestFD = 3
	replyFD   = 4
)

func init() {
	v, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	// Neither the variable nor the pipes (prepare) go on to the
	// compile children the worker starts.
	_ = os.Unsetenv(childEnv)
	if v != childProtocol {
		fmt.Fprintf(os.Stderr, "worker: protocol %q, want %q\n", v, childProtocol)
		os.Exit(2)
	}
	prepare()
	os.Exit(serve(os.NewFile(requestFD, "requests"), os.NewFile(replyFD, "replies")))
}

// server is a worker's side of the protocol.
type server struct {
	mod *runtime.Module

	w frameWriter

	mu      sync.Mutex
	cancels map[uint64]context.CancelFunc
	calls   sync.WaitGroup

	// slots are the mappings of the slots, by index; nil: not mapped.
	// Only the read loop maps them again, when a call says a slot grew:
	// the parent sends a slot's next call only once its last is
	// answered.
	slots [][]byte

	bufs sync.Pool // of *[]byte, the inputs and outputs of the pipe
}

// testAnswer, if set (by this package's tests, in the workers they
// start), may change the answer to call before it is sent: a worker that
// breaks the protocol.
var testAnswer func(call header, answer *header)

// serve is the worker: it loads the module of the first frame read from
// in, then runs the calls it reads until in ends, answering on out, and
// returns the process's exit code.
func serve(in io.Reader, out io.Writer) int {
	br := bufio.NewReaderSize(in, 64<<10)
	s := &server{w: frameWriter{w: out}, cancels: map[uint64]context.CancelFunc{}}
	var hb [headerSize]byte
	h, err := readHeader(br, hb[:])
	if err != nil || h.kind != kindLoad {
		fmt.Fprintf(os.Stderr, "worker: no load request: %v\n", err)
		return 2
	}
	payload, err := readPayload(br, nil, h.size)
	var req loadRequest
	if err == nil {
		err = json.Unmarshal(payload, &req)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: load request: %v\n", err)
		return 2
	}
	payload = nil
	if req.Slots < 0 || req.Slots > maxSlots {
		fmt.Fprintf(os.Stderr, "worker: %d slots\n", req.Slots)
		return 2
	}
	s.slots = make([][]byte, req.Slots)
	prepareSlots(req.Slots)
	if err := setDataLimit(req.DataLimit); err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		return 2
	}
	reply := s.load(&req)
	req = loadRequest{} // the binary is the runtime's now
	b, err := json.Marshal(reply)
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		return 2
	}
	if err := s.w.write(header{kind: kindLoaded}, b); err != nil || reply.Err != nil {
		return 1
	}
	debug.FreeOSMemory() // the load's garbage: the binary, the decoded module
	ctx := context.Background()
	for {
		h, err := readHeader(br, hb[:])
		if err != nil {
			// The parent closed the module (io.EOF) or is gone: finish
			// the calls running, for a parent that waits for them.
			s.calls.Wait()
			if errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintf(os.Stderr, "worker: %v\n", err)
			return 2
		}
		switch h.kind {
		case kindCall:
			var in *[]byte
			var mem []byte
			if h.slot == noSlot {
				in = s.buffer()
				*in, err = readPayload(br, (*in)[:0], h.size)
				if err != nil {
					continue // the next read fails too
				}
			} else {
				if h.size != 0 || int(h.slot) >= len(s.slots) || h.length > h.slotSize || h.slotSize > maxSlotSize {
					fmt.Fprintf(os.Stderr, "worker: call in slot %d of %d, %d bytes of %d, payload %d\n", h.slot, len(s.slots), h.length, h.slotSize, h.size)
					return 2
				}
				if mem, err = s.mapSlot(h.slot, h.slotSize); err != nil {
					s.fail(h.id, h.stage, &runtime.CallError{Reason: runtime.ReasonMemory, Err: err})
					continue
				}
			}
			cctx, cancel := context.WithCancel(ctx)
			s.mu.Lock()
			s.cancels[h.id] = cancel
			s.mu.Unlock()
			s.calls.Add(1)
			go s.call(cctx, h, in, mem)
		case kindCancel:
			s.mu.Lock()
			if cancel := s.cancels[h.id]; cancel != nil {
				cancel()
			}
			s.mu.Unlock()
		case kindShrink:
			s.calls.Add(1)
			go s.shrink(ctx, h.id)
		default:
			fmt.Fprintf(os.Stderr, "worker: frame of kind %d\n", h.kind)
			return 2
		}
	}
}

// load loads the module of req.
func (s *server) load(req *loadRequest) *loadReply {
	reply := &loadReply{}
	rt, err := runtime.New(runtime.Config{
		CacheDir: req.CacheDir, Interrupt: req.Interrupt, Compile: req.Compile, IsolateCompile: req.IsolateCompile,
		Compiled: func(cached bool) { reply.Compiled = append(reply.Compiled, !cached) },
	})
	if err != nil {
		reply.Err = &wireLoadError{Message: err.Error()}
		return reply
	}
	// The runtime is never closed: it lives as long as the process.
	m, err := rt.Load(context.Background(), req.Name, req.Wasm, req.Limits, runtime.WithConfig(req.Config))
	if err != nil {
		reply.Err = &wireLoadError{
			Message: err.Error(), Invalid: errors.Is(err, runtime.ErrInvalidModule),
			ConfigRejected: errors.Is(err, runtime.ErrConfigRejected), Compile: errors.Is(err, runtime.ErrCompile),
		}
		return reply
	}
	s.mod = m
	reply.Metadata, reply.Config = m.Metadata, m.Config
	return reply
}

// mapSlot returns the mapping of slot i, which is size bytes: mapped
// again if it grew.
func (s *server) mapSlot(i, size uint32) ([]byte, error) {
	if len(s.slots[i]) == int(size) {
		return s.slots[i], nil
	}
	unmapSlot(s.slots[i])
	s.slots[i] = nil
	mem, err := mapSlot(slotFD+int(i), int(size))
	if err != nil {
		return nil, err
	}
	s.slots[i] = mem
	return mem, nil
}

// call runs one call and answers it. Its input is *in (from the pipe),
// or at the start of its slot, mem, where its output goes after it if it
// fits.
func (s *server) call(ctx context.Context, h header, in *[]byte, mem []byte) {
	defer s.calls.Done()
	var input, dst []byte
	var out *[]byte
	if in != nil {
		out = s.buffer()
		input, dst = *in, (*out)[:0]
	} else {
		input, dst = mem[:h.length], mem[h.length:h.length:len(mem)]
	}
	res, err := s.mod.Call(ctx, h.stage, input, dst)
	s.mu.Lock()
	cancel := s.cancels[h.id]
	delete(s.cancels, h.id)
	s.mu.Unlock()
	cancel()
	if in != nil {
		s.bufs.Put(in)
	}
	answer := header{kind: kindOutput, id: h.id}
	payload := res
	if err == nil && in == nil && inPlace(res, dst) {
		answer = header{kind: kindOutputShared, id: h.id, off: h.length, length: uint32(len(res))}
		payload = nil
	}
	if testAnswer != nil {
		testAnswer(h, &answer)
	}
	if err != nil {
		s.fail(h.id, h.stage, err)
	} else {
		_ = s.w.write(answer, payload) // a failed write ends the read loop too
	}
	if out != nil {
		if err == nil {
			*out = res
		}
		s.bufs.Put(out)
	}
}

// inPlace reports whether out, which the module's call appended to dst,
// is where dst is: in its slot, where append had the room.
func inPlace(out, dst []byte) bool {
	if len(out) == 0 {
		return true
	}
	return cap(dst) > 0 && cap(out) == cap(dst) && &out[:1][0] == &dst[:1][0]
}

// shrink shrinks the module's instance pool and gives the memory the
// instances and buffers held back to the system.
func (s *server) shrink(ctx context.Context, id uint64) {
	defer s.calls.Done()
	var msg []byte
	if err := s.mod.Shrink(ctx); err != nil {
		msg = []byte(err.Error())
	}
	debug.FreeOSMemory()
	_ = s.w.write(header{kind: kindShrunk, id: id}, msg)
}

// fail answers call id with err.
func (s *server) fail(id uint64, stage abi.Stage, err error) {
	w := wireError{Reason: runtime.ReasonTrap, Message: err.Error()}
	var ce *runtime.CallError
	if errors.As(err, &ce) {
		w = wireError{Reason: ce.Reason, Stderr: ce.Stderr}
		if ce.Err != nil {
			w.Message = ce.Err.Error()
		}
	}
	b, merr := json.Marshal(w)
	if merr != nil {
		b = []byte(`{"reason":"trap"}`)
	}
	_ = s.w.write(header{kind: kindFailed, stage: stage, id: id}, b)
}

// buffer returns a buffer of the pool.
func (s *server) buffer() *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}
