package runtime_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
)

// TestCompileLimits is the corpus of hostile shapes: each module is either
// refused before it is compiled, with an error naming the function and the
// limit, or compiles (well within the limits: docs/performance.md has the
// times). Without the limits, the refused ones compile for seconds to
// minutes each.
func TestCompileLimits(t *testing.T) {
	padded := hostile.Module(0)
	// A custom section of 32 MiB + 4 bytes: no name and 32 MiB + 3 zeros.
	padded = append(padded, 0x00, 0x84, 0x80, 0x80, 0x10, 0x00)
	padded = append(padded, make([]byte, 32<<20+3)...)
	tests := []struct {
		name string
		wasm []byte
		cfg  runtime.CompileLimits
		want string // "": accepted
	}{
		// Larger than the largest of their kind in the Go compiler built
		// for wasip1 (docs/performance.md), and still cheap.
		{name: "go resume dispatch", wasm: hostile.Module(0, hostile.Dispatch(8000, 8000, 20))},
		{name: "nesting", wasm: hostile.Module(0, hostile.Nest(8000))},
		{name: "br_table", wasm: hostile.Module(0, hostile.BrTable(10000))},
		{name: "locals", wasm: hostile.Module(0, hostile.Locals(1000, 20))},
		{name: "functions", wasm: hostile.Module(0, hostile.Funcs(5000)...)},
		{name: "types", wasm: hostile.Module(20000)},

		{
			name: "module size",
			wasm: padded,
			want: `invalid module: module of 33554631 bytes exceeds the compile limit of 33554432 bytes`,
		},
		{
			name: "body size",
			wasm: hostile.Module(0, hostile.Straight(400000)),
			want: `invalid module: function 3: body of 1200004 bytes exceeds the compile limit of 1048576 bytes`,
		},
		{
			name: "nesting too deep",
			wasm: hostile.Module(0, hostile.Nest(20000)),
			want: `invalid module: function 3: blocks nested 20000 deep exceed the compile limit of 16384`,
		},
		{
			name: "br_table to one block",
			wasm: hostile.Module(0, hostile.BrTable(40000)),
			want: `invalid module: function 3: 40001 branches to one block (largest br_table: 40001 targets, inside blocks nested 1 deep) exceed the compile limit of 32768`,
		},
		{
			name: "br_table inside nested blocks",
			wasm: hostile.Module(0, hostile.Dispatch(70000, 2, 0)),
			want: `invalid module: function 3: 35001 branches to one block (largest br_table: 70001 targets, inside blocks nested 2 deep) exceed the compile limit of 32768`,
		},
		{
			name: "locals joined at blocks",
			wasm: hostile.Module(0, hostile.Dispatch(2000, 2000, 1000)),
			want: `invalid module: function 3: 2000 blocks × 1001 locals = 2002000 exceed the compile limit of 1048576`,
		},
		{
			name: "function memory",
			wasm: hostile.Module(0, hostile.Straight(200000)),
			cfg:  runtime.CompileLimits{FunctionMemory: 64 << 20},
			want: `invalid module: function 3: estimated compile memory of 205 MiB (600004 bytes, blocks nested 0 deep, 0 branches to one block, 0 blocks × 1 locals) exceeds the compile limit of 64 MiB`,
		},
		{
			name: "module budget",
			wasm: hostile.Module(0, slices.Repeat([][]byte{hostile.Nest(8000)}, 15)...),
			want: `invalid module: estimated compile time 40.38s of 3 types and 18 functions exceeds the compile budget of 30s (function 3, 24004 bytes, blocks nested 8000 deep, 0 branches to one block, 8000 blocks × 1 locals, is estimated at 2.692s)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRuntime(t, runtime.Config{Compile: tt.cfg})
			m, err := r.Load(context.Background(), "hostile", tt.wasm, runtime.Limits{})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				m.Close()
				return
			}
			if err == nil {
				m.Close()
				t.Fatalf("Load succeeded, want an error containing %q", tt.want)
			}
			if !errors.Is(err, runtime.ErrInvalidModule) || !errors.Is(err, runtime.ErrCompile) {
				t.Errorf("Load error %v is not ErrInvalidModule and ErrCompile", err)
			}
			if want := `module "hostile": ` + tt.want; err.Error() != want {
				t.Errorf("Load error\n got %s\nwant %s", err, want)
			}
		})
	}
}

// TestCompileTimeout checks the limit on the time a compilation may take
// when its shape passed the limits: Load gives up waiting with ErrCompile,
// refuses to start a compilation while two it gave up on still run, and
// compiles again once they have ended.
func TestCompileTimeout(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, runtime.Config{Compile: runtime.CompileLimits{Timeout: time.Nanosecond}})
	for i, want := range []string{
		"compilation did not finish within 1ns",
		"compilation did not finish within 1ns",
		"2 compilations that ran past their time limit are still running; not starting another",
	} {
		// A different module each time, each compiling for a second or so.
		wasm := hostile.Module(i, hostile.BrTable(30000))
		_, err := r.Load(ctx, "slow", wasm, runtime.Limits{})
		if !errors.Is(err, runtime.ErrCompile) || !strings.Contains(err.Error(), want) {
			t.Fatalf("Load %d: error %v, want ErrCompile containing %q", i, err, want)
		}
	}
	// The compilations given up on end, and free their slots.
	deadline := time.Now().Add(5 * time.Minute) // a guard, not a measurement
	for runtime.AbandonedCompiles(r) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the compilations given up on did not end")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := r.Load(ctx, "small", hostile.Module(0), runtime.Limits{}); err != nil && !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("Load after the abandoned compilations ended: %v", err)
	}
}

// TestCompileAbandonedThenClosed: a compilation given up on that runs
// after its Runtime was closed ends without taking the process down (the
// closed engine made wazero's compiler panic on its own goroutine).
func TestCompileAbandonedThenClosed(t *testing.T) {
	for i := range 5 {
		r, err := runtime.New(runtime.Config{Compile: runtime.CompileLimits{Timeout: time.Nanosecond}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Load(context.Background(), "small", hostile.Module(i), runtime.Limits{}); err != nil && !strings.Contains(err.Error(), "did not finish") {
			t.Fatalf("Load: %v", err)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute) // a guard, not a measurement
		for runtime.AbandonedCompiles(r) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the compilation given up on did not end")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestIsolatedCompile checks compiling in a child process: the machine
// code reaches the parent through the compilation cache, and a child past
// its time or memory limit is killed, leaving nothing running.
func TestIsolatedCompile(t *testing.T) {
	ctx := context.Background()
	slow := hostile.Module(0, hostile.BrTable(32000)) // within the limits, and a second or more to compile
	tests := []struct {
		name string
		wasm []byte
		cfg  runtime.CompileLimits
		want string // "": loads
	}{
		{name: "compiles", wasm: hostile.Module(0, hostile.Dispatch(2000, 2000, 8))},
		{name: "timeout", wasm: slow, cfg: runtime.CompileLimits{Timeout: 100 * time.Millisecond}, want: "compile: compilation did not finish within 100ms"},
		{name: "memory", wasm: slow, cfg: runtime.CompileLimits{ChildMemory: 40 << 20}, want: "compile: compilation took more than 40 MiB of memory"},
		{name: "invalid", wasm: hostile.Module(0, hostile.Body(nil, 0x42, 0x00, 0x0b)), want: "compile: invalid function[3]: cannot use i64 as result[0] type i32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var compiled []bool
			r := newRuntime(t, runtime.Config{CacheDir: dir, IsolateCompile: true, Compile: tt.cfg, Compiled: func(cached bool) { compiled = append(compiled, cached) }})
			m, err := r.Load(ctx, "isolated", tt.wasm, runtime.Limits{})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				m.Close()
				if !slices.Equal(compiled, []bool{false}) {
					t.Errorf("Compiled told %v, want [false]", compiled)
				}
				if n := runtime.ChildCompiles(r); n != 1 {
					t.Errorf("%d compile children started, want 1", n)
				}
				// The child's machine code is what this process would
				// compile: a runtime finds it cached, and starts no child
				// for a module compiled in one before.
				var again []bool
				r2 := newRuntime(t, runtime.Config{CacheDir: dir, IsolateCompile: true, Compiled: func(cached bool) { again = append(again, cached) }})
				m, err := r2.Load(ctx, "isolated", tt.wasm, runtime.Limits{})
				if err != nil {
					t.Fatalf("Load again: %v", err)
				}
				m.Close()
				if !slices.Equal(again, []bool{true}) {
					t.Errorf("Compiled told %v loading again, want [true]", again)
				}
				if n := runtime.ChildCompiles(r2); n != 0 {
					t.Errorf("%d compile children started loading again, want 0", n)
				}
				return
			}
			if err == nil {
				m.Close()
				t.Fatalf("Load succeeded, want an error containing %q", tt.want)
			}
			if !errors.Is(err, runtime.ErrCompile) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load error %v, want ErrCompile containing %q", err, tt.want)
			}
			if n := runtime.AbandonedCompiles(r); n != 0 {
				t.Errorf("%d compilations left running, want 0", n)
			}
		})
	}
}

// TestIsolatedCompileNoCacheDir checks that a runtime without a CacheDir
// compiles in a child through a temporary cache of its own.
func TestIsolatedCompileNoCacheDir(t *testing.T) {
	r := newRuntime(t, runtime.Config{IsolateCompile: true, Compile: runtime.CompileLimits{ChildMemory: 40 << 20}})
	_, err := r.Load(context.Background(), "isolated", hostile.Module(0, hostile.BrTable(32000)), runtime.Limits{})
	if want := "compilation took more than 40 MiB of memory"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load error %v, want one containing %q (compiled in a child)", err, want)
	}
	m, err := r.Load(context.Background(), "isolated", hostile.Module(0, hostile.Dispatch(2000, 2000, 8)), runtime.Limits{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	m.Close()
}
