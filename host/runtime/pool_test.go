package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
)

// The memory pool's holes: wazero panics, on whatever goroutine creates
// the instance and outside any recover, when the allocator cannot give a
// new memory its declared minimum. A module whose minimum the pool cannot
// give every instance is refused at load, and a new instance's minimum is
// reserved before it is created.

// TestPoolMinimumAboveShare: a module whose declared minimum, times its
// instances, is over the pool. It once loaded (its first instance fits)
// and crashed the process when a second call created a second instance.
func TestPoolMinimumAboveShare(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	const mib = 1 << 20
	tests := []struct {
		name    string
		pages   int // the declared minimum, 64 KiB pages
		limits  runtime.Limits
		refused bool
	}{
		// Just over 3/4 of the 256 MiB cap: two instances need more
		// than the 384 MiB pool (the 214-byte module of the probe).
		{"over three quarters of the cap, two instances", 193 * mib >> 16, runtime.Limits{Instances: 2}, true},
		{"over three quarters of the cap, one instance", 193 * mib >> 16, runtime.Limits{Instances: 1}, false},
		{"the pool's share exactly", 96 * mib >> 16, runtime.Limits{Instances: 4}, false},
		{"a page over the pool's share", 96*mib>>16 + 1, runtime.Limits{Instances: 4}, true},
		{"over the cap", 257 * mib >> 16, runtime.Limits{Instances: 1}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			refused := ""
			if tc.refused {
				refused = "min"
			}
			loadOrRefused(t, r, hostile.Guest{Pages: tc.pages}.Module(), tc.limits, refused)
		})
	}
}

// TestPoolConcurrentGrowth: instances that grow their memory in
// concurrent calls until the pool is full, so that it has no room for a
// new instance's minimum. That once crashed the process; now the call
// that needed the new instance fails with ReasonMemory, and the module
// works again once the other calls end.
func TestPoolConcurrentGrowth(t *testing.T) {
	var enc abi.Encoder
	short, err := enc.Encode(nil, batch(abi.StageTopology, "a"))
	if err != nil {
		t.Fatal(err)
	}
	long, err := enc.Encode(nil, batch(abi.StageTopology, "a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	// For a long input the stage grows memory by a page until refused,
	// then spins until its deadline; for a short one it returns no
	// output at once, taking nothing from the pool but its minimum, so
	// that its instance is discarded and the next short call needs a new
	// one.
	n := uint32(len(short))
	stage := []byte{
		0x20, 0x01, // local.get 1 (the input's length)
		// i32.const len(short), as a padded five-byte signed LEB128
		0x41, byte(n) | 0x80, byte(n>>7) | 0x80, byte(n>>14) | 0x80, byte(n>>21) | 0x80, byte(n>>28) & 0x07,
		0x4b, 0x04, 0x40, // i32.gt_u; if
		0x03, 0x40, // loop
		0x41, 0x01, 0x40, 0x00, // i32.const 1; memory.grow
		0x41, 0x7f, 0x47, 0x0d, 0x00, // i32.const -1; i32.ne; br_if 0
		0x0b,                         // end
		0x03, 0x40, 0x0c, 0x00, 0x0b, // loop br 0 end
		0x0b,             // end
		0x42, 0x00, 0x0b, // i64.const 0; end
	}
	for _, instances := range []int{4, 16} {
		t.Run(fmt.Sprint(instances, " instances"), func(t *testing.T) {
			r := newRuntime(t, runtime.Config{})
			limits := runtime.Limits{Instances: instances, MemoryBytes: 64 << 20, PoolMemoryBytes: uint64(instances) * 8 << 20, Timeout: 5 * time.Second}
			m, err := r.Load(context.Background(), "grow", hostile.Guest{Pages: 16, Stage: stage}.Module(), limits)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			// All instances but one fill the pool and spin, until the
			// test is done with them.
			spin, stop := context.WithCancel(context.Background())
			defer stop()
			var wg sync.WaitGroup
			for range instances - 1 {
				wg.Go(func() {
					_, err := m.Call(spin, abi.StageTopology, long, nil)
					switch r := runtime.ReasonOf(err); {
					case r == runtime.ReasonTimeout, r == runtime.ReasonMemory:
					case r == runtime.ReasonInstantiate && errors.Is(err, context.Canceled):
						// On a loaded machine, still waiting to start when
						// the test was done with the spinners.
					default:
						t.Errorf("spinning call: %v, want reason %s (or %s if refused an instance)", err, runtime.ReasonTimeout, runtime.ReasonMemory)
					}
				})
			}
			// Each short call needs a new instance; once the spinners
			// have filled the pool, there is no room for one.
			refused := false
			for start := time.Now(); !refused && time.Since(start) < 4*time.Second; time.Sleep(10 * time.Millisecond) {
				_, err := m.Call(context.Background(), abi.StageTopology, short, nil)
				switch runtime.ReasonOf(err) {
				case runtime.ReasonMemory:
					refused = true
					if !strings.Contains(err.Error(), "no room for a new instance") {
						t.Errorf("call refused an instance: %v, want the pool named", err)
					}
				case runtime.ReasonNoOutput:
				default:
					t.Fatalf("short call: %v, want reason %s or %s", err, runtime.ReasonNoOutput, runtime.ReasonMemory)
				}
			}
			if !refused {
				t.Errorf("no call was refused an instance while the spinners held the pool")
			}
			stop()
			wg.Wait()
			if _, err := m.Call(context.Background(), abi.StageTopology, short, nil); runtime.ReasonOf(err) != runtime.ReasonNoOutput {
				t.Errorf("call after the others ended: %v, want reason %s", err, runtime.ReasonNoOutput)
			}
		})
	}
}

// loadOrRefused loads a guest that returns no output under limits. With
// refused set, Load must fail with ErrInvalidModule naming it; otherwise
// every instance of the pool at once must run the guest (reason
// ReasonNoOutput).
func loadOrRefused(t *testing.T, r *runtime.Runtime, wasm []byte, limits runtime.Limits, refused string) {
	t.Helper()
	m, err := r.Load(context.Background(), "guest", wasm, limits)
	if refused != "" {
		if !errors.Is(err, runtime.ErrInvalidModule) || !strings.Contains(fmt.Sprint(err), refused) {
			t.Fatalf("Load: %v, want ErrInvalidModule naming %q", err, refused)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	callAll(t, m, m.Instances(), func(err error) {
		if runtime.ReasonOf(err) != runtime.ReasonNoOutput {
			t.Errorf("call: %v, want reason %s (the guest returns nothing)", err, runtime.ReasonNoOutput)
		}
	})
}

// callAll calls m's topology stage n times at once and hands each error
// to check.
func callAll(t *testing.T, m *runtime.Module, n int, check func(error)) {
	t.Helper()
	var enc abi.Encoder
	in, err := enc.Encode(nil, batch(abi.StageTopology, ""))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := m.Call(context.Background(), abi.StageTopology, in, nil)
			check(err)
		})
	}
	wg.Wait()
}

// TestPoolInstanceHostMemory: what every instance keeps in the host's
// memory outside its linear memory, wazero's objects for the module's
// globals and data segments, once went uncounted: a 20 MB module of four
// million globals cost 343 MiB of heap per instance. It is now estimated
// at load, refused past Compile.InstanceBytes, and reserved in the
// module's memory pool with each instance.
func TestPoolInstanceHostMemory(t *testing.T) {
	r := newRuntime(t, runtime.Config{})
	tests := []struct {
		name    string
		guest   hostile.Guest
		limits  runtime.Limits
		refused string
	}{
		{"a few globals", hostile.Guest{Globals: 100}, runtime.Limits{Instances: 4}, ""},
		{"a million globals", hostile.Guest{Globals: 1 << 20}, runtime.Limits{Instances: 1}, "1048576 globals"},
		{"over a million data segments", hostile.Guest{DataSegments: 1_200_000}, runtime.Limits{Instances: 1}, "1200000 data segments"},
		// 200,000 globals: about 18 MiB an instance, under the cap; four
		// of them and their memory are over a 64 MiB pool.
		{"globals over the pool", hostile.Guest{Globals: 200_000}, runtime.Limits{Instances: 4, MemoryBytes: 32 << 20, PoolMemoryBytes: 64 << 20}, "host memory"},
		{"globals within the pool", hostile.Guest{Globals: 200_000}, runtime.Limits{Instances: 2, MemoryBytes: 32 << 20, PoolMemoryBytes: 64 << 20}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { loadOrRefused(t, r, tc.guest.Module(), tc.limits, tc.refused) })
	}
}
