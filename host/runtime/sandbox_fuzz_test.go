package runtime_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
)

// The sandbox fuzzer: FuzzSandbox turns each input into a valid module
// (hostile.Generate: loops, recursion, indirect calls through a table
// changed at run time, bulk memory and table instructions, memory growth,
// WASI calls, outputs of every shape), loads it under real limits and
// calls it, once and then from two goroutines at once, then shrinks its
// instance pool (Module.Shrink). Refusals and failed calls are fine; an
// input fails when:
//
//   - Load, Call or Shrink panics (on the test's goroutine, or on another
//     one, which ends the process), or fails with a panic of the host it
//     recovered (hostPanic);
//   - Load, Call or Shrink returns later than its deadline plus
//     overrunBound, having run that long (see within), or is still
//     running stuckAfter past that (then the process panics: a call that
//     never returns is as bad as a late one, and waiting for it would
//     stall fuzzing);
//   - Load fails without ErrInvalidModule, or Call fails with anything
//     but a *CallError of a documented Reason;
//   - the process's resident memory peaks memoryCap above what it was
//     before the input, the Go heap live after a collection grows by
//     memoryCap past what it was before the first input, or goroutines
//     pile up;
//   - an output escapes validation (see checkCall).
//
// make fuzz runs it for FUZZTIME in CI, make soak for longer; every
// failing input found is kept under testdata/fuzz/FuzzSandbox, where go
// test runs it as a regression case.

// Limits the modules run under: the real mechanisms and the default
// memory cap (what a host call can be asked to work on grows with it),
// with a deadline short enough that a module that runs to it costs the
// fuzzer little.
const (
	sandboxTimeout     = 100 * time.Millisecond
	sandboxInitTimeout = 200 * time.Millisecond
	sandboxMemory      = runtime.DefaultMemoryBytes
	sandboxInstances   = 2
)

// overrunBound is how long past its deadline a call (or the start of an
// instance) may return. docs/abi.md §5.2 states the bound: at the deadline
// the host empties the guest's budget and the guest stops at its next
// check, so a call overruns by at most one step between two checks, the
// longest of which (a memory.init of a 32 MiB segment, a table.fill of
// 2^20 entries) takes about 30 ms; docs/reliability.md ("Hostile
// modules: what bounds a call") has the measurements. A second is that
// bound with room for a noisy CI machine; work the host does for a guest
// without charging it (the holes of issue 20 overran by minutes) passes
// it by far.
const overrunBound = time.Second

// compileBound is how long Load may take before it starts the module:
// generated modules are small (a few KiB, at most a 1 MiB data segment)
// and compile in milliseconds.
const compileBound = 2 * time.Second

// memoryCap is how far the process's resident memory may peak above what
// it was before an input, and its live Go heap grow past what it was
// before the first input. A module may hold PoolMemoryBytes (1.5 × 256
// MiB) of linear memory, its calls two stacks (wazero caps each at 50 MB,
// grown by copying) and the host its copies of bounded outputs: about
// 600 MiB at worst.
const memoryCap = 1 << 30

// goroutineSlack is how many more goroutines than before the first input
// may be left after an input's module is closed.
const goroutineSlack = 64

// inputsPerRuntime is how many inputs one runtime serves before it is
// closed and replaced: it keeps the machine code of every module it
// compiled (by digest), and every input is a new module.
const inputsPerRuntime = 200

// sandbox is the fuzzer's runtime, shared by the inputs of one process,
// and the process's state before the first input.
var sandbox struct {
	mu     sync.Mutex
	r      *runtime.Runtime
	inputs int
	// Before the first input: peak resident memory (0 where unknown),
	// live heap, goroutines.
	rss, heap  uint64
	goroutines int
}

// sandboxRuntime returns the shared runtime, replacing it every
// inputsPerRuntime inputs.
func sandboxRuntime(t *testing.T) *runtime.Runtime {
	t.Helper()
	sandbox.mu.Lock()
	defer sandbox.mu.Unlock()
	if sandbox.r != nil && sandbox.inputs%inputsPerRuntime == 0 {
		_ = sandbox.r.Close(context.Background())
		sandbox.r = nil
	}
	if sandbox.r == nil {
		r, err := runtime.New(runtime.Config{})
		if err != nil {
			t.Fatal(err)
		}
		sandbox.r = r
	}
	if sandbox.inputs == 0 {
		sandbox.rss, _ = statusBytes("VmHWM")
		sandbox.heap = liveHeap()
		sandbox.goroutines = goruntime.NumGoroutine()
	}
	sandbox.inputs++
	return sandbox.r
}

func FuzzSandbox(f *testing.F) {
	for _, s := range hostile.Seeds() {
		f.Add(s.Data)
	}
	var enc abi.Encoder
	b := batch(abi.StageTopology, "")
	if len(b.Ports) != hostile.GenPorts || len(b.Ports[0].Endpoints) != hostile.GenEndpoints {
		f.Fatalf("the batch has %d ports, the generator writes outputs for %d", len(b.Ports), hostile.GenPorts)
	}
	input, err := enc.Encode(nil, b)
	if err != nil {
		f.Fatal(err)
	}
	limits := runtime.Limits{
		MemoryBytes: sandboxMemory, Timeout: sandboxTimeout, InitTimeout: sandboxInitTimeout,
		Instances: sandboxInstances,
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := hostile.Generate(data)
		r := sandboxRuntime(t)
		rss := resetPeakRSS()
		ctx := context.Background()
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf(format+"\nprogram:\n%s", append(args, p.Text)...)
		}

		var m *runtime.Module
		err := within(t, p, "Load", compileBound+sandboxInitTimeout+overrunBound, func() (err error) {
			m, err = r.Load(ctx, "generated", p.Wasm, limits)
			return err
		})
		switch {
		case hostPanic(err):
			fail("Load recovered a panic: %v", err)
		case err != nil && !errors.Is(err, runtime.ErrInvalidModule):
			fail("Load: %v, want an error wrapping ErrInvalidModule", err)
		case err != nil:
			t.Logf("Load: %v", err)
			return // refused: fine
		}
		defer m.Close()

		// A call may have to start an instance first (the one before it
		// failed), which runs _initialize under the start deadline.
		bound := sandboxTimeout + overrunBound
		if p.Init {
			bound += sandboxInitTimeout
		}
		callOnce := func() {
			var out []byte
			err := within(t, p, "Call", bound, func() (err error) {
				out, err = m.Call(ctx, abi.StageTopology, input, nil)
				return err
			})
			t.Logf("Call: %d bytes, %v", len(out), firstLine(err))
			if msg := checkCall(p, b, input, out, err); msg != "" {
				t.Errorf("%s\nprogram:\n%s", msg, p.Text) // not Fatal: maybe not the test's goroutine
			}
		}
		callOnce()
		var wg sync.WaitGroup
		for range sandboxInstances {
			// A panic here ends the process: a failure too.
			wg.Go(callOnce)
		}
		wg.Wait()
		// Shrink discards grown instances and starts a fresh one, which
		// runs _initialize.
		err = within(t, p, "Shrink", sandboxInitTimeout+overrunBound, func() error { return m.Shrink(ctx) })
		if hostPanic(err) {
			fail("Shrink recovered a panic: %v", err)
		}
		m.Close()
		checkResources(t, p, rss)
	})
}

// within runs f, with its goroutine locked to its thread, and fails the
// test if it returns later than bound and the thread ran for longer than
// bound, or if it returns later than bound + stuckAfter however long the
// thread ran. A call kept off the processor by a loaded machine is not
// late; a call that ran past its deadline, in the guest or in the host
// on its behalf, is. Where the thread's time is not known (outside
// Linux), any return past bound fails. If f is still running bound +
// stuckAfter after it started, within panics on a goroutine of its own,
// which ends the process.
func within(t *testing.T, p *hostile.Program, what string, bound time.Duration, f func() error) error {
	t.Helper()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	start := time.Now()
	cpu0, cpuOK := threadCPU()
	stuck := time.AfterFunc(bound+stuckAfter, func() {
		panic(fmt.Sprintf("%s still running %v after it started (bound %v)\nprogram:\n%s", what, time.Since(start).Round(time.Millisecond), bound, p.Text))
	})
	err := f()
	stuck.Stop()
	wall := time.Since(start)
	cpu1, ok := threadCPU()
	cpu := cpu1 - cpu0
	if wall > bound && (!cpuOK || !ok || cpu > bound || wall > bound+stuckAfter) {
		t.Errorf("%s returned after %v (%v on its thread), more than its bound of %v (error: %v)\nprogram:\n%s", what, wall.Round(time.Millisecond), cpu.Round(time.Millisecond), bound, firstLine(err), p.Text)
	}
	return err
}

// stuckAfter is how long past its bound a call is taken to be stuck
// whether or not it runs: a loaded machine delays a call by a fraction of
// that.
const stuckAfter = 10 * time.Second

// threadCPU returns the time the calling thread has run
// (/proc/thread-self/schedstat, Linux), and whether it is known.
func threadCPU() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), " ")
	ns, err := strconv.ParseInt(first, 10, 64)
	return time.Duration(ns), err == nil
}

// hostPanic reports whether err says that the host panicked and the
// runtime recovered: Load's own recovery ("rejected while loading"), the
// runtime's (errRecovered, "recovered from a panic"), or wazero's
// recovery of a Go runtime error in a host function, to whose error it
// appends a Go stack trace. The guest's traps, and yield's interruptions,
// which are panics of plain errors, are none of those.
func hostPanic(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "rejected while loading") || strings.Contains(msg, "recovered from a panic") ||
		strings.Contains(msg, "Go runtime stack trace:")
}

// firstLine is the first line of err (wazero appends a stack trace), or
// "ok".
func firstLine(err error) string {
	if err == nil {
		return "ok"
	}
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}

// checkCall judges a call's result, and returns what is wrong with it, or
// "".
//
// A failed call must be a *CallError with a documented Reason. A
// successful one hands the pipeline bytes it will validate with
// abi.DecodeOutput; an output escapes validation when the runtime
// claims success for an output it must refuse or misreads, or when
// validation accepts what breaks the ABI's rules:
//
//   - a success longer than abi.MaxOutputLen of the input, which the
//     runtime promises to refuse before it reads it;
//   - a success for an output that is not in linear memory (a length of
//     2^32 - 1, a pointer past any memory) or that is none (0, 0);
//   - a success whose bytes are not those the guest wrote and returned
//     (Program.Output), or not as long as the input when it returned
//     the input's range;
//   - abi.DecodeOutput panicking on the bytes;
//   - abi.DecodeOutput accepting a record that breaks a rule of
//     docs/abi.md §4.2 without marking it invalid, checked here without
//     the decoder's code: the topology mode is known, the eligible set is
//     not nil, strictly ascending, and within the port's endpoints.
func checkCall(p *hostile.Program, b *abi.Batch, input, out []byte, err error) string {
	if err != nil {
		var ce *runtime.CallError
		if hostPanic(err) {
			return fmt.Sprintf("Call recovered a panic of the host: %v", err)
		}
		if !errors.As(err, &ce) {
			return fmt.Sprintf("Call: %v (%T), want a *runtime.CallError", err, err)
		}
		if !slices.Contains(runtime.Reasons, ce.Reason) {
			return fmt.Sprintf("Call: %v: undocumented reason %q", err, ce.Reason)
		}
		return ""
	}
	if max := abi.MaxOutputLen(input); len(out) > max {
		return fmt.Sprintf("Call succeeded with %d bytes, longer than any valid output (%d)", len(out), max)
	}
	switch p.Kind {
	case hostile.OutputWritten:
		if !bytes.Equal(out, p.Output) {
			return fmt.Sprintf("Call succeeded with % x, not the % x the guest wrote", out, p.Output)
		}
	case hostile.OutputInput:
		// The range of the input, which the guest's code may have
		// written over since.
		if len(out) != len(input) {
			return fmt.Sprintf("Call succeeded with %d bytes, not the %d of the input the guest returned", len(out), len(input))
		}
	default:
		return fmt.Sprintf("Call succeeded with %d bytes for an output %s", len(out), p.Kind)
	}
	var res []abi.Result
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		res, err = abi.DecodeOutput(out, b, nil)
	}()
	if err != nil {
		if strings.HasPrefix(err.Error(), "panic: ") {
			return fmt.Sprintf("abi.DecodeOutput(% x): %v", out, err)
		}
		return "" // refused: the pipeline fails the call as invalid-output
	}
	for i, r := range res {
		if r.Err != "" {
			continue
		}
		nep := uint32(len(b.Ports[i].Endpoints))
		ascending := true
		for j, v := range r.Eligible {
			ascending = ascending && v < nep && (j == 0 || v > r.Eligible[j-1])
		}
		if r.Mode > abi.TopologyPreferSameNode || r.Eligible == nil || !ascending {
			return fmt.Sprintf("abi.DecodeOutput accepted port %d's record: mode %d, eligible %v of %d endpoints", i, r.Mode, r.Eligible, nep)
		}
	}
	return ""
}

// checkResources fails the test if the process's resident memory peaked
// memoryCap above rss during the input (above what it was before the
// first input, if rss is 0), or its live heap or its goroutines grew past
// their caps since before the first input.
func checkResources(t *testing.T, p *hostile.Program, rss uint64) {
	t.Helper()
	if rss == 0 {
		rss = sandbox.rss
	}
	if peak, ok := statusBytes("VmHWM"); ok && peak > rss+memoryCap {
		t.Fatalf("peak resident memory %d MiB, %d MiB more than before the input\nprogram:\n%s", peak>>20, (peak-rss)>>20, p.Text)
	}
	if heap := liveHeap(); heap > sandbox.heap+memoryCap {
		t.Fatalf("live heap %d MiB, %d MiB more than before the first input\nprogram:\n%s", heap>>20, (heap-sandbox.heap)>>20, p.Text)
	}
	if n := goruntime.NumGoroutine(); n > sandbox.goroutines+goroutineSlack {
		t.Fatalf("%d goroutines, %d before the first input\nprogram:\n%s", n, sandbox.goroutines, p.Text)
	}
}

// resetPeakRSS resets the process's peak resident memory to its current
// resident memory, which it returns; 0 where Linux's /proc does not
// allow it.
func resetPeakRSS() uint64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0
	}
	rss, _ := statusBytes("VmRSS")
	return rss
}

// statusBytes returns a memory field of /proc/self/status, in bytes,
// where /proc tells it.
func statusBytes(field string) (uint64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// liveHeap returns the Go heap live at the end of the last collection:
// unlike the heap in use, it does not count garbage not yet collected,
// and reading it stops nothing.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
