package runtime_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
)

// The hostile corpus: modules written to hurt the host rather than to
// route, each refused or contained. Shapes that cost the compiler are in
// compile_test.go.

// TestHostileLoopFreeCode: a call tree of 2^62 calls with no loop in the
// stage function, the initialisation and wasp_configure. Each is stopped
// by its deadline; before the checks went on calls, each ran for ever and
// froze the process at its next garbage collection.
func TestHostileLoopFreeCode(t *testing.T) {
	tree := append(hostile.TreeCall(62), 0x42, 0x00, 0x0b) // then i64.const 0
	r := newRuntime(t, runtime.Config{})
	limits := runtime.Limits{Timeout: 200 * time.Millisecond, Instances: 1}
	within := func(t *testing.T, f func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second): // failure guard only
			t.Fatal("still running 30s after a 200ms deadline")
			return nil
		}
	}
	t.Run("stage", func(t *testing.T) {
		m, err := r.Load(context.Background(), "tree", hostile.Guest{Stage: tree}.Module(), limits)
		if err != nil {
			t.Fatal(err)
		}
		err = within(t, func() error { _, err := call(t, m, batch(abi.StageTopology, "")); return err })
		var ce *runtime.CallError
		if !errors.As(err, &ce) || ce.Reason != runtime.ReasonTimeout {
			t.Fatalf("call: %v, want a CallError with reason %s", err, runtime.ReasonTimeout)
		}
	})
	t.Run("initialize", func(t *testing.T) {
		init := append(hostile.TreeCall(62), 0x0b)
		err := within(t, func() error {
			_, err := r.Load(context.Background(), "tree", hostile.Guest{Initialize: init}.Module(), limits)
			return err
		})
		if !errors.Is(err, runtime.ErrInvalidModule) || !strings.Contains(err.Error(), "deadline") {
			t.Fatalf("Load: %v, want ErrInvalidModule after the deadline", err)
		}
	})
	t.Run("configure", func(t *testing.T) {
		err := within(t, func() error {
			_, err := r.Load(context.Background(), "tree", hostile.Guest{Configure: tree}.Module(), limits, runtime.WithConfig([]byte(`{"a":1}`)))
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "deadline") {
			t.Fatalf("Load: %v, want a failure after the deadline", err)
		}
	})
}

// TestHostileOutput: an output far longer than any valid one is refused
// before the host copies it.
func TestHostileOutput(t *testing.T) {
	const size = 96 << 20
	// wasp_topology returns (0, 96 MiB): the whole of a 96 MiB memory.
	stage := []byte{0x42, 0x80, 0x80, 0x80, 0x30, 0x0b} // i64.const 96 << 20
	r := newRuntime(t, runtime.Config{})
	m, err := r.Load(context.Background(), "big", hostile.Guest{Pages: size >> 16, Stage: stage}.Module(), runtime.Limits{Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	before := heapInUse()
	_, err = call(t, m, batch(abi.StageTopology, ""))
	var ce *runtime.CallError
	if !errors.As(err, &ce) || ce.Reason != runtime.ReasonInvalidOutput || !strings.Contains(err.Error(), "longer than any valid output") {
		t.Fatalf("call: %v, want an invalid output longer than any valid one", err)
	}
	if grew := int64(heapInUse()) - int64(before); grew > size/4 {
		t.Errorf("the host's heap grew by %d MiB refusing a %d MiB output", grew>>20, size>>20)
	}
}

// TestHostileMemoryHostCost: what a guest's memory costs the node. A
// memory bomb grows its memory to the cap and writes every page; the process's
// peak resident memory must grow by about the cap, not by the several
// times the cap that growing by reallocation on the Go heap cost. The
// instances of a module together stay under the pool's cap.
func TestHostileMemoryHostCost(t *testing.T) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak resident memory (Linux /proc/self/clear_refs): %v", err)
	}
	r := newRuntime(t, runtime.Config{})
	tests := []struct {
		name      string
		limits    runtime.Limits
		calls     int
		wantBelow uint64 // peak growth, bytes
	}{
		{"one instance", runtime.Limits{MemoryBytes: 128 << 20, Instances: 1, Timeout: time.Minute}, 1, 128 << 20 * 3 / 2},
		{"a pool of four, capped together", runtime.Limits{MemoryBytes: 128 << 20, PoolMemoryBytes: 160 << 20, Instances: 4, Timeout: time.Minute}, 4, 160 << 20 * 3 / 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := r.Load(context.Background(), "misbehave", testModule(t, "misbehave"), tc.limits)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
				t.Fatal(err)
			}
			base := procStatus(t, "VmRSS")
			var wg sync.WaitGroup
			for range tc.calls {
				wg.Go(func() {
					_, err := call(t, m, batch(abi.StageTopology, "fill"))
					var ce *runtime.CallError
					if !errors.As(err, &ce) || ce.Reason != runtime.ReasonMemory {
						t.Errorf("bomb: %v, want reason %s", err, runtime.ReasonMemory)
					}
				})
			}
			wg.Wait()
			peak := procStatus(t, "VmHWM")
			t.Logf("resident memory: %d MiB before, peak %d MiB (+%d MiB)", base>>20, peak>>20, (peak-base)>>20)
			if peak-base > tc.wantBelow {
				t.Errorf("peak resident memory grew by %d MiB, want under %d MiB", (peak-base)>>20, tc.wantBelow>>20)
			}
		})
	}
}

// TestHostileStackOverflow: an endless recursion ends in a trap when
// wazero's stack reaches its ceiling (50 MB, grown by doubling); the
// process's peak grows by that transient stack, not more.
func TestHostileStackOverflow(t *testing.T) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak resident memory (Linux /proc/self/clear_refs): %v", err)
	}
	r := newRuntime(t, runtime.Config{})
	stage := append(hostile.DeepCall(), 0x42, 0x00, 0x0b)
	m, err := r.Load(context.Background(), "deep", hostile.Guest{Stage: stage}.Module(), runtime.Limits{Instances: 1, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	heapInUse() // collect what earlier tests left
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	base := procStatus(t, "VmRSS")
	_, err = call(t, m, batch(abi.StageTopology, ""))
	var ce *runtime.CallError
	if !errors.As(err, &ce) || ce.Reason != runtime.ReasonTrap || !strings.Contains(err.Error(), "stack overflow") {
		t.Fatalf("call: %v, want a stack overflow trap", err)
	}
	peak := procStatus(t, "VmHWM")
	t.Logf("resident memory: %d MiB before, peak %d MiB (+%d MiB)", base>>20, peak>>20, (peak-base)>>20)
	if peak-base > 256<<20 {
		t.Errorf("a stack overflow grew the peak resident memory by %d MiB, want under 256 MiB", (peak-base)>>20)
	}
}

// procStatus reads a memory field of /proc/self/status, in bytes.
func procStatus(t *testing.T, field string) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return kb << 10
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// heapInUse is the Go heap's in-use bytes after a collection.
func heapInUse() uint64 {
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestSharedCacheDirRefused: compiled code read from the cache runs as
// wasp, so a cache directory others can write is refused.
func TestSharedCacheDirRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.New(runtime.Config{CacheDir: dir}); err == nil || !strings.Contains(err.Error(), "lets others write") {
		t.Fatalf("New with a world-writable cache: %v, want a refusal", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	r, err := runtime.New(runtime.Config{CacheDir: dir})
	if err != nil {
		t.Fatalf("New with a private cache: %v", err)
	}
	r.Close(context.Background())
}

// TestHostileBulkMemory: thousands of memory.fill or memory.copy of the
// whole memory in code without a branch, each one instruction. Charged
// one unit each, they once ran a call 70 s past its 200 ms deadline, and
// the garbage collector's stop-the-world waited for them; now each part of
// BulkChunk bytes is charged its size before it runs, and the call stops
// at its deadline. Another module's calls run meanwhile.
func TestHostileBulkMemory(t *testing.T) {
	const size = 256 << 20
	sizeLEB := []byte{0x80, 0x80, 0x80, 0x80, 0x01} // i32 268435456
	fill := append([]byte{0x41, 0x00, 0x41, 0x00, 0x41}, sizeLEB...)
	fill = append(fill, 0xfc, 0x0b, 0x00) // memory.fill (0, 0, 256 MiB)
	cpy := append([]byte{0x41, 0x00, 0x41, 0x00, 0x41}, sizeLEB...)
	cpy = append(cpy, 0xfc, 0x0a, 0x00, 0x00) // memory.copy (0, 0, 256 MiB)
	r := newRuntime(t, runtime.Config{})
	good, err := r.Load(context.Background(), "good", testModule(t, "misbehave"), runtime.Limits{Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		op   []byte
	}{{"memory.fill", fill}, {"memory.copy", cpy}} {
		t.Run(tc.name, func(t *testing.T) {
			var stage []byte
			for range 4096 {
				stage = append(stage, tc.op...)
			}
			stage = append(stage, 0x42, 0x00, 0x0b) // i64.const 0: no output
			// A cap above the memory, so that the failure is not taken
			// for one of memory.
			limits := runtime.Limits{Timeout: 200 * time.Millisecond, Instances: 1, MemoryBytes: 2 * size}
			m, err := r.Load(context.Background(), "bulk", hostile.Guest{Pages: size >> 16, Stage: stage}.Module(), limits)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			done := make(chan error, 1)
			start := time.Now()
			go func() { _, err := call(t, m, batch(abi.StageTopology, "")); done <- err }()
			// The other module answers while the hostile call runs.
			if _, err := call(t, good, batch(abi.StageTopology, "")); err != nil {
				t.Errorf("another module's call: %v", err)
			}
			select {
			case err = <-done:
			case <-time.After(30 * time.Second): // failure guard only
				t.Fatal("still running 30s after a 200ms deadline")
			}
			t.Logf("the call returned after %v", time.Since(start).Round(time.Millisecond))
			var ce *runtime.CallError
			if !errors.As(err, &ce) || ce.Reason != runtime.ReasonTimeout {
				t.Fatalf("call: %v, want a CallError with reason %s", err, runtime.ReasonTimeout)
			}
		})
	}
}

// TestHostileGoGuest: the same classes as a Go guest writes them, in
// loops: clear of a 128 MiB slice (memory.fill), copy of 64 MiB
// (memory.copy) at every iteration, while garbage collections run
// back to back. Each iteration was once charged as a few instructions, so
// that a call yielded once per thousands of gigabytes of work; now each
// is charged its size, and the call stops at its deadline.
func TestHostileGoGuest(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	m, err := r.Load(context.Background(), "misbehave", testModule(t, "misbehave"), runtime.Limits{Timeout: 200 * time.Millisecond, Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	collectUntilDone(t)
	for _, behaviour := range []string{"clear", "copy"} {
		t.Run(behaviour, func(t *testing.T) {
			done := make(chan error, 1)
			start := time.Now()
			go func() { _, err := call(t, m, batch(abi.StageTopology, behaviour)); done <- err }()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second): // failure guard only
				t.Fatal("still running 30s after a 200ms deadline")
			}
			t.Logf("the call returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if runtime.ReasonOf(err) != runtime.ReasonTimeout {
				t.Fatalf("call: %v, want reason %s", err, runtime.ReasonTimeout)
			}
		})
	}
}
