package wasmbin

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
)

// Hostile shapes without a loop: each would run for ages, and without a
// check on its path a goroutine running it could not even be stopped for
// a garbage collection.

// recursiveTree is (func $f (export "run") (param i32) (result i32)): f(0)
// = 1, f(n) = f(n-1) + f(n-1), an exponential recursive call tree.
func recursiveTree() []byte {
	return module(
		sec(SectionType, vec(functype([]byte{i32}, []byte{i32}))),
		sec(SectionFunction, vec(u(0))),
		sec(SectionExport, vec(cat(str("run"), []byte{0x00, 0x00}))),
		sec(SectionCode, vec(body(noLocals,
			0x20, 0x00, 0x45, // local.get 0, i32.eqz
			0x04, i32, 0x41, 0x01, // if (result i32) i32.const 1
			0x05,                                     // else
			0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x00, // f(n-1)
			0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x00, // f(n-1)
			0x6a,       // i32.add
			0x0b, 0x0b, // end end
		))),
	)
}

// callChain is depth distinct functions, each calling the next twice (the
// last returns 1): 2^depth calls with no cycle in the call graph. With
// start, the first is also the module's start function.
func callChain(depth int, start bool) []byte {
	var funcs, bodies [][]byte
	for i := range depth {
		funcs = append(funcs, u(0))
		if i == depth-1 {
			bodies = append(bodies, body(noLocals, 0x41, 0x01, 0x0b))
			continue
		}
		next := u(i + 1)
		bodies = append(bodies, body(noLocals, cat([]byte{0x10}, next, []byte{0x10}, next, []byte{0x6a, 0x0b})...))
	}
	secs := [][]byte{
		sec(SectionType, vec(functype(nil, []byte{i32}), functype(nil, nil))),
		sec(SectionFunction, vec(append(funcs, u(1))...)), // and a () -> () wrapper
		sec(SectionExport, vec(cat(str("run"), []byte{0x00, 0x00}))),
	}
	if start {
		secs = append(secs, sec(SectionStart, u(depth)))
	}
	wrapper := body(noLocals, 0x10, 0x00, 0x1a, 0x0b) // call 0, drop
	secs = append(secs, sec(SectionCode, vec(append(bodies, wrapper)...)))
	return module(secs...)
}

// indirectTree is like recursiveTree, but the recursion goes through
// call_indirect on a table holding f.
func indirectTree() []byte {
	return module(
		sec(SectionType, vec(functype([]byte{i32}, []byte{i32}))),
		sec(SectionFunction, vec(u(0))),
		sec(SectionTable, vec([]byte{funcref, 0x00, 0x01})),
		sec(SectionExport, vec(cat(str("run"), []byte{0x00, 0x00}))),
		sec(SectionElement, vec(cat([]byte{0x00, 0x41, 0x00, 0x0b}, vec(u(0))))),
		sec(SectionCode, vec(body(noLocals,
			0x20, 0x00, 0x45,
			0x04, i32, 0x41, 0x01,
			0x05,
			0x20, 0x00, 0x41, 0x01, 0x6b, 0x41, 0x00, 0x11, 0x00, 0x00, // f(n-1) through the table
			0x20, 0x00, 0x41, 0x01, 0x6b, 0x41, 0x00, 0x11, 0x00, 0x00,
			0x6a,
			0x0b, 0x0b,
		))),
	)
}

// TestInterruptLoopFreeCode runs call shapes without loops that would
// take years, and checks that a deadline stops each, while garbage
// collections run, as it stops a loop.
func TestInterruptLoopFreeCode(t *testing.T) {
	tests := []struct {
		name string
		wasm []byte
		args []uint64
	}{
		{"exponential recursion", recursiveTree(), []uint64{62}},
		{"call tree of distinct functions", callChain(62, false), nil},
		{"recursion through a table", indirectTree(), []uint64{62}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustCompile(t, tt.wasm)
			wasm := mustInstrument(t, tt.wasm)
			rt, y := newRuntime(t, context.Background(), wazero.NewRuntimeConfig())
			mod := instantiate(t, context.Background(), rt, wasm)
			run := mod.ExportedFunction("run")

			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := run.Call(ctx, tt.args...)
				done <- err
			}()
			for range 5 {
				runtime.GC()
			}
			select {
			case err := <-done:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("run: err = %v, want %v", err, context.DeadlineExceeded)
				}
			case <-time.After(30 * time.Second): // failure guard only
				t.Fatal("run still running 30s after its 200ms deadline")
			}
			if y.yields.Load() < 2 {
				t.Errorf("run yielded %d times", y.yields.Load())
			}
		})
	}
}

// TestInterruptStartFunction: a start function that would run for ages
// is stopped by the deadline of the instantiation that runs it.
func TestInterruptStartFunction(t *testing.T) {
	wasm := mustInstrument(t, callChain(62, true))
	rt, _ := newRuntime(t, context.Background(), wazero.NewRuntimeConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithName("start"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("instantiate: err = %v, want %v", err, context.DeadlineExceeded)
		}
	case <-time.After(30 * time.Second): // failure guard only
		t.Fatal("instantiation still running 30s after its 200ms deadline")
	}
}

// TestSegmentCostBound checks the bound Instrument promises on a call
// tree: small trees run with no check at all, and a large one passes a
// check at least every SegmentCost units of work, but not much more
// often.
func TestSegmentCostBound(t *testing.T) {
	for _, depth := range []int{2, 8, 14, 18} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			wasm := mustInstrument(t, callChain(depth, false))
			rt, y := newRuntime(t, context.Background(), wazero.NewRuntimeConfig())
			y.interval = 0 // every check yields: yields count checks
			mod := instantiate(t, context.Background(), rt, wasm)
			if _, err := mod.ExportedFunction("run").Call(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Each of the 2^depth-1 calls runs at least three
			// instructions and costs one more for the call.
			work := (uint64(1)<<depth - 1) * 4
			checks := uint64(y.yields.Load())
			if work <= SegmentCost/2 && checks != 0 {
				t.Errorf("%d checks for %d units of work: a small call tree needs none", checks, work)
			}
			if work > (checks+1)*SegmentCost*2 {
				t.Errorf("%d checks for %d units of work: more than %d between checks", checks, work, SegmentCost*2)
			}
			if checks > 4*work/SegmentCost+1 {
				t.Errorf("%d checks for %d units of work: far more than needed", checks, work)
			}
		})
	}
}

// TestTableLimits: tables live in the host's memory, outside the linear
// memory cap, so Instrument caps them: a declared minimum over the limit
// is refused, and table.grow past it fails as the specification says
// (returns -1) instead of allocating.
func TestTableLimits(t *testing.T) {
	grower := func(tables int) []byte {
		var decl [][]byte
		for range tables {
			decl = append(decl, []byte{funcref, 0x00, 0x00}) // no maximum
		}
		// (func (export "grow") (param i32) (result i32)
		//   (table.grow 0 (ref.null func) (local.get 0)))
		return module(
			sec(SectionType, vec(functype([]byte{i32}, []byte{i32}))),
			sec(SectionFunction, vec(u(0))),
			sec(SectionTable, vec(decl...)),
			sec(SectionExport, vec(cat(str("grow"), []byte{0x00, 0x00}))),
			sec(SectionCode, vec(body(noLocals, 0xd0, 0x70, 0x20, 0x00, 0xfc, 0x0f, 0x00, 0x0b))),
		)
	}
	for _, tables := range []int{1, 4} {
		t.Run(fmt.Sprint(tables, " tables"), func(t *testing.T) {
			in := grower(tables)
			mustCompile(t, in)
			wasm := mustInstrument(t, in)
			rt, _ := newRuntime(t, context.Background(), wazero.NewRuntimeConfig())
			mod := instantiate(t, context.Background(), rt, wasm)
			limit := uint64(MaxTableEntries / tables)
			if got := call(t, context.Background(), mod, "grow", 1<<27)[0]; uint32(got) != 0xffffffff {
				t.Errorf("grow(2^27) = %d, want -1", int32(got))
			}
			if got := call(t, context.Background(), mod, "grow", limit)[0]; got != 0 {
				t.Errorf("grow(%d) = %d, want 0 (the old size)", limit, int32(got))
			}
			if got := call(t, context.Background(), mod, "grow", 1)[0]; uint32(got) != 0xffffffff {
				t.Errorf("grow(1) past the limit = %d, want -1", int32(got))
			}
		})
	}
	t.Run("declared minimum", func(t *testing.T) {
		in := module(sec(SectionTable, vec([]byte{funcref, 0x00, 0x80, 0x80, 0x80, 0x01}))) // min 2^21
		_, err := Instrument(in)
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "minimum of 2097152 entries is more than the 1048576 allowed") {
			t.Fatalf("Instrument: %v, want ErrTooLarge naming the minimum and the limit", err)
		}
	})
}
