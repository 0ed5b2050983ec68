//go:build linux

package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
	"github.com/wasp-proxy/wasp/modules/builds"
)

// testAnswerEnv, in the environment of a worker this package's tests
// start, makes it misbehave (testAnswer): its value is one of the
// misbehaviours below. The worker inherits it from the test's
// environment (t.Setenv).
const testAnswerEnv = "WASP_WORKER_TEST_ANSWER"

// Misbehaviours of a worker, set before serve runs (package variables
// are initialized before init functions).
var _ = func() bool {
	mode := os.Getenv(testAnswerEnv)
	if mode == "" {
		return false
	}
	testAnswer = func(call header, answer *header) {
		shared := answer.kind == kindOutputShared
		switch {
		case mode == "offset" && shared: // past the slot's end
			answer.off = call.slotSize
		case mode == "length" && shared: // one byte past the slot's end
			answer.length = call.slotSize - answer.off + 1
		case mode == "wrap" && shared: // off + length wraps around in 32 bits
			answer.off, answer.length = ^uint32(0), 2
		case mode == "truncate" && call.slot != noSlot:
			// Shrink the slot under the parent's mapping: if that worked,
			// the parent would get SIGBUS reading the output; say so with
			// an empty output instead.
			if err := unix.Ftruncate(slotFD+int(call.slot), 0); err == nil {
				answer.length = 0
			}
		case mode == "sleep": // answer late, as a call the parent gave up
			time.Sleep(300 * time.Millisecond)
		}
	}
	return true
}()

// sameOutput calls local and m over a topology input, and checks that
// m appends to dst the output local returns.
func sameOutput(t *testing.T, local *runtime.Module, m *Module, in []byte) {
	t.Helper()
	want, err := local.Call(context.Background(), abi.StageTopology, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	dst := []byte("prefix")
	got, err := m.Call(context.Background(), abi.StageTopology, in, dst)
	if err != nil || !bytes.Equal(got, slices.Concat(dst, want)) {
		t.Fatalf("%d bytes in: %d bytes out, %v; want %d bytes", len(in), len(got)-len(dst), err, len(want))
	}
}

// freeSlots returns the number of free slots of m's running worker, and
// of slots retired by calls given up.
func freeSlots(t *testing.T, m *Module) (free, retired int) {
	t.Helper()
	m.mu.Lock()
	p := m.cur
	m.mu.Unlock()
	if p == nil {
		t.Fatal("no worker running")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.slots.free), len(p.retired)
}

// TestSlotSealed: a slot's memory file cannot be shrunk, by any
// descriptor of it (the worker's are the same file), nor sealed further;
// it can be grown, and the parent grows it past a size the worker chose.
func TestSlotSealed(t *testing.T) {
	ss, err := newSlots(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.close()
	s := ss.take()
	defer ss.release(s)
	if _, _, err := s.put([]byte("input")); err != nil {
		t.Fatal(err)
	}
	if len(s.mem) != minSlotSize {
		t.Fatalf("slot of %d bytes, want %d", len(s.mem), minSlotSize)
	}
	// The worker's descriptor: another open file description.
	other, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", s.f.Fd()), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	fd := int(other.Fd())
	for _, size := range []int64{0, minSlotSize - 1} {
		if err := unix.Ftruncate(fd, size); !errors.Is(err, unix.EPERM) {
			t.Errorf("ftruncate to %d: %v, want EPERM", size, err)
		}
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, minSlotSize/2, 4096); err != nil {
		t.Errorf("punching a hole: %v", err) // zeros: the parent reads them as any other bytes
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_GROW); !errors.Is(err, unix.EPERM) {
		t.Errorf("sealing against growth: %v, want EPERM", err)
	}
	// A worker that grew the file: the parent maps what it needs.
	if err := unix.Ftruncate(fd, 3*minSlotSize); err != nil {
		t.Fatal(err)
	}
	if err := s.grow(2 * minSlotSize); err != nil {
		t.Fatal(err)
	}
	if len(s.mem) != 2*minSlotSize || !bytes.Equal(s.mem[:5], []byte("input")) {
		t.Errorf("slot of %d bytes starting %q after growing", len(s.mem), s.mem[:5])
	}
}

// TestSlotOutput: the output a worker says it wrote is checked against
// the slot before it is copied.
func TestSlotOutput(t *testing.T) {
	s := &slot{mem: []byte("0123456789")}
	tests := []struct {
		name   string
		s      *slot
		off, n uint32
		want   string
		ok     bool
	}{
		{"all", s, 0, 10, "0123456789", true},
		{"empty at the end", s, 10, 0, "", true},
		{"some", s, 3, 4, "3456", true},
		{"past the end", s, 8, 3, "", false},
		{"offset past the end", s, 11, 0, "", false},
		{"wrapping", s, ^uint32(0), 2, "", false},
		{"no slot", nil, 0, 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.s.output(tt.off, tt.n, []byte("-"))
			switch {
			case !tt.ok && err == nil:
				t.Errorf("output %q, want an error", got)
			case tt.ok && err != nil:
				t.Errorf("error %v, want %q", err, tt.want)
			case tt.ok && string(got) != "-"+tt.want:
				t.Errorf("output %q, want %q", got, "-"+tt.want)
			}
		})
	}
}

// TestLyingWorker: a worker that says its output is outside its slot
// fails the call with a CallError and is killed; this process reads
// nothing out of bounds.
func TestLyingWorker(t *testing.T) {
	wasm := builtin(t, builds.Rust, abi.StageTopology)
	in := topologyInput(t, 10)
	for _, mode := range []string{"offset", "length", "wrap"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv(testAnswerEnv, mode)
			m := load(t, "m", wasm, runtime.Limits{Instances: 1})
			pid := m.Stats().PID
			err := callTopology(context.Background(), m, in)
			wantCallError(t, err, runtime.ReasonInvalidOutput, false)
			deadline := time.Now().Add(5 * time.Second)
			for !gone(pid) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if !gone(pid) {
				t.Errorf("worker %d not killed", pid)
			}
		})
	}
}

// TestSlotTruncated: a worker that tries to shrink its slot's file to
// nothing is refused by the seal; this process keeps reading the outputs.
func TestSlotTruncated(t *testing.T) {
	t.Setenv(testAnswerEnv, "truncate")
	wasm := builtin(t, builds.Rust, abi.StageTopology)
	m := load(t, "m", wasm, runtime.Limits{Instances: 1})
	local := inProcess(t, "m", wasm, runtime.Limits{Instances: 1})
	for _, n := range []int{1, 100} {
		sameOutput(t, local, m, topologyInput(t, n))
	}
	if st := m.Stats(); st.Restarts != 0 {
		t.Errorf("%d restarts", st.Restarts)
	}
}

// TestSlotGrows: a batch larger than the slot grows it, in this process
// and the worker, and a batch the slot holds then needs no more.
func TestSlotGrows(t *testing.T) {
	wasm := builtin(t, builds.Rust, abi.StageTopology)
	m := load(t, "m", wasm, runtime.Limits{Instances: 1})
	local := inProcess(t, "m", wasm, runtime.Limits{Instances: 1})
	var size int
	for _, n := range []int{1, 3000, 10, 3000} {
		in := topologyInput(t, n)
		sameOutput(t, local, m, in)
		s := m.cur.slots.take()
		if s == nil {
			t.Fatal("no free slot after the call")
		}
		grown := len(s.mem)
		m.cur.slots.release(s)
		if need := len(in) + abi.MaxOutputLen(in); grown < need || grown < size {
			t.Fatalf("%d ports: slot of %d bytes, need %d, was %d", n, grown, need, size)
		}
		if n == 3000 && grown <= minSlotSize {
			t.Fatalf("%d ports: slot of %d bytes did not grow", n, grown)
		}
		size = grown
	}
}

// TestKilledWithSlot: a worker killed while a call holds its slot fails
// the call; the slots of the dead worker are unmapped and closed, and the
// next worker has its own.
func TestKilledWithSlot(t *testing.T) {
	spin := hostile.Guest{Stage: append(hostile.TreeCall(62), 0x42, 0x00, 0x0b)}.Module()
	m := load(t, "m", spin, runtime.Limits{Timeout: time.Minute, Instances: 1})
	p := m.cur
	in := topologyInput(t, 1)
	errs := make(chan error, 1)
	go func() { errs <- callTopology(context.Background(), m, in) }()
	deadline := time.Now().Add(5 * time.Second)
	for free, _ := freeSlots(t, m); free != 0; free, _ = freeSlots(t, m) {
		if time.Now().After(deadline) {
			t.Fatal("the call did not take its slot")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // in the worker, spinning
	if err := unix.Kill(p.pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wantCallError(t, <-errs, runtime.ReasonTrap, true)
	<-p.dead
	for i, f := range p.slots.files {
		if f.Fd() != ^uintptr(0) {
			t.Errorf("slot %d of the dead worker still open", i)
		}
	}
	if next, err := m.running(context.Background()); err != nil || next == p {
		t.Fatalf("no new worker: %v", err)
	}
	if free, retired := freeSlots(t, m); free != 1 || retired != 0 {
		t.Errorf("new worker: %d free and %d retired slots, want 1 free", free, retired)
	}
}

// TestCancelledCallRetiresSlot: the slot of a call given up is not used
// again until the worker answers the call (it may write to it until
// then); the calls meanwhile go through the pipe, with the right
// outputs.
func TestCancelledCallRetiresSlot(t *testing.T) {
	t.Setenv(testAnswerEnv, "sleep")
	wasm := builtin(t, builds.Rust, abi.StageTopology)
	m := load(t, "m", wasm, runtime.Limits{Instances: 1})
	local := inProcess(t, "m", wasm, runtime.Limits{Instances: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	wantCallError(t, callTopology(ctx, m, topologyInput(t, 200)), runtime.ReasonTimeout, false)
	if free, retired := freeSlots(t, m); free != 0 || retired != 1 {
		t.Fatalf("after the call given up: %d free and %d retired slots, want 0 and 1", free, retired)
	}
	for _, n := range []int{5, 50} {
		sameOutput(t, local, m, topologyInput(t, n))
	}
	deadline := time.Now().Add(5 * time.Second)
	for free, retired := freeSlots(t, m); free != 1 || retired != 0; free, retired = freeSlots(t, m) {
		if time.Now().After(deadline) {
			t.Fatalf("%d free and %d retired slots, want the slot free once the call was answered", free, retired)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := m.Stats(); st.Restarts != 0 {
		t.Errorf("%d restarts", st.Restarts)
	}
}
