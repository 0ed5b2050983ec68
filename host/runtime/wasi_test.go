package runtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
)

// TestWASIHostile: a stage of thousands of WASI calls in a row, without a
// loop, each asking the host for as much work as its memory allows. With
// wazero's own WASI each call ran to its end and the stage held its call
// for minutes past a 200 ms deadline; wasp's stops the call at its
// deadline (random_get, whose work must stay), or fails each call at
// once with the errno of its bound.
// wasiHostileCase is a WASI call a stage makes thousands of times.
type wasiHostileCase struct {
	name string
	fn   string
	args []int64
	end  int64 // the end of the memory the calls use
	// errno is what every call returns under wasp's bounds; the stage
	// traps if its last call returns another.
	errno int64
	want  Reason
}

// wasiHostileCalls is how many times each stage makes its call.
const wasiHostileCalls = 4096

func TestWASIHostile(t *testing.T) {
	const (
		iovecs = 4 << 20 // 32 MiB of empty iovecs
		subs   = 2 << 20 // 96 MiB of subscriptions, 64 MiB of events
		random = 128 << 20
		// base is where the calls' memory starts, past the stage's
		// input (at 1024: hostile.WASIGuest's wasp_buffer).
		base = 1 << 16
	)
	tests := []wasiHostileCase{
		{
			name: "random_get of 128 MiB",
			fn:   "random_get",
			args: []int64{base, random},
			end:  base + random,
			want: ReasonTimeout,
		},
		{
			name:  "fd_write of 4 Mi iovecs",
			fn:    "fd_write",
			args:  []int64{1, base, iovecs, base + iovecs*8},
			end:   base + iovecs*8 + 4,
			errno: errnoInval,
			want:  ReasonNoOutput,
		},
		{
			name:  "poll_oneoff of 2 Mi subscriptions",
			fn:    "poll_oneoff",
			args:  []int64{base, base + subs*48, subs, base + subs*(48+32)},
			end:   base + subs*(48+32) + 4,
			errno: errnoInval,
			want:  ReasonNoOutput,
		},
	}
	// checkDeadline stops the call in either mode, reported as a
	// timeout in both.
	for name, interrupt := range map[string]Interrupt{"instrument": InterruptInstrument, "close on context done": InterruptCloseOnContextDone} {
		t.Run(name, func(t *testing.T) { testWASIHostile(t, interrupt, tests) })
	}
}

func testWASIHostile(t *testing.T, interrupt Interrupt, tests []wasiHostileCase) {
	r, err := New(Config{Interrupt: interrupt})
	if err != nil {
		t.Fatal(err)
	}
	// A call still running when the test gives up must keep its memory.
	var hung bool
	t.Cleanup(func() {
		if !hung {
			_ = r.Close(context.Background())
		}
	})
	limits := Limits{MemoryBytes: 256 << 20, Timeout: 200 * time.Millisecond, Instances: 1}
	var enc abi.Encoder
	input, err := enc.Encode(nil, &abi.Batch{Stage: abi.StageTopology})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := hostile.WASIGuest{Pages: int(tc.end>>16) + 1, Imports: []string{tc.fn}}
			call := g.Call(0, tc.args...)
			g.Stage = slices.Concat(
				bytes.Repeat(slices.Concat(call, []byte{0x1a}), wasiHostileCalls), // call; drop
				call,
				// i32.const errno (under 64: one byte); i32.ne; if unreachable end
				[]byte{0x41, byte(tc.errno), 0x47, 0x04, 0x40, 0x00, 0x0b},
				[]byte{0x42, 0x00, 0x0b}, // i64.const 0: no output
			)
			m, err := r.Load(context.Background(), "wasi", g.Module(), limits)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			done := make(chan error, 1)
			go func() { _, err := m.Call(context.Background(), abi.StageTopology, input, nil); done <- err }()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second): // failure guard only
				hung = true
				t.Fatal("still running 30s after a 200ms deadline")
			}
			t.Logf("the call returned after %v: %v", time.Since(start).Round(time.Microsecond), err)
			var ce *CallError
			if !errors.As(err, &ce) || ce.Reason != tc.want {
				t.Fatalf("call: %v, want a CallError with reason %s", err, tc.want)
			}
		})
	}
}

// TestWASIBounds: within its bounds, each function replaced does what
// wazero's does (same errno, memory and output), at the bound too; past
// it, it fails with the errno of the bound and does nothing else.
func TestWASIBounds(t *testing.T) {
	const (
		pages  = 40      // 2.5 MiB
		data   = 1 << 16 // where iovecs point, and poll_oneoff's events
		result = 2 << 16 // where results go
		memEnd = pages << 16
	)
	// iovecsAt writes n iovecs of one byte each at 0, over "0123456789abcdef".
	iovecsAt := func(n int) func([]byte) {
		return func(mem []byte) {
			copy(mem[data:], "0123456789abcdef")
			for i := range n {
				binary.LittleEndian.PutUint32(mem[8*i:], uint32(data+i%16))
				binary.LittleEndian.PutUint32(mem[8*i+4:], 1)
			}
		}
	}
	type test struct {
		name  string
		setup func(mem []byte) // optional
		fn    string
		calls [][]uint64
		// errno is wasp's errno past a bound; 0: the calls must do
		// what wazero's do.
		errno uint32
	}
	var tests []test
	for _, n := range []int{maxIovecs, maxIovecs + 1} {
		var errno uint32
		if n > maxIovecs {
			errno = errnoInval
		}
		for _, c := range []struct {
			fn   string
			args []uint64
		}{
			{"fd_read", []uint64{0, 0, uint64(n), result}},
			{"fd_pread", []uint64{0, 0, uint64(n), 0, result}},
			{"fd_write", []uint64{1, 0, uint64(n), result}},
			{"fd_pwrite", []uint64{1, 0, uint64(n), 0, result}},
			{"sock_recv", []uint64{1, 0, uint64(n), 0, result, result + 4}},
			{"sock_send", []uint64{1, 0, uint64(n), 0, result}},
		} {
			tests = append(tests, test{name: c.fn + " of " + strconv.Itoa(n) + " iovecs", setup: iovecsAt(n), fn: c.fn, calls: [][]uint64{c.args}, errno: errno})
		}
	}
	for _, n := range []int{0, 1, maxSubscriptions, maxSubscriptions + 1} {
		var errno uint32
		if n > maxSubscriptions {
			errno = errnoInval
		}
		// Zero subscriptions: clocks with a relative timeout of 0.
		tests = append(tests, test{name: "poll_oneoff of " + strconv.Itoa(n) + " subscriptions", fn: "poll_oneoff", calls: [][]uint64{{0, data, uint64(n), result}}, errno: errno})
	}
	stock := wasiStock(t)
	for _, fn := range slices.Sorted(maps.Keys(wasiBounds)) {
		bound := wasiBounds[fn]
		if bound.errno != errnoNametoolong {
			continue
		}
		for _, n := range []int{0, 1, maxPathLen, maxPathLen + 1, memEnd} {
			var errno uint32
			if n > maxPathLen {
				errno = errnoNametoolong
			}
			// Every path is n bytes of "a" at 0 in fd 3, which is not
			// open; other lengths are 16.
			var args []uint64
			for _, p := range stock[fn].ParamNames() {
				switch {
				case slices.Contains(bound.params, p):
					args = append(args, uint64(n))
				case p == "fd" || p == "old_fd" || p == "new_fd":
					args = append(args, 3)
				case strings.HasSuffix(p, "_len"):
					args = append(args, 16)
				default:
					args = append(args, 0)
				}
			}
			setup := func(mem []byte) { copy(mem, bytes.Repeat([]byte("a"), maxPathLen+1)) }
			tests = append(tests, test{name: fn + " of " + strconv.Itoa(n) + " bytes", setup: setup, fn: fn, calls: [][]uint64{args}, errno: errno})
		}
	}
	for _, c := range []struct {
		name  string
		calls [][]uint64
	}{
		{"random_get of nothing", [][]uint64{{0, 0}}},
		{"random_get of nothing at the end of memory", [][]uint64{{memEnd, 0}}},
		{"random_get of nothing past memory", [][]uint64{{memEnd + 1, 0}}},
		{"random_get of 1 byte", [][]uint64{{0, 1}}},
		{"random_get of a part", [][]uint64{{0, randomChunk}}},
		{"random_get of a part and a byte", [][]uint64{{0, randomChunk + 1}}},
		{"random_get of parts, then a few bytes", [][]uint64{{3, 1<<20 + 3}, {memEnd - 5, 5}}},
		{"random_get across the end of memory", [][]uint64{{memEnd - randomChunk, randomChunk + 1}}},
	} {
		tests = append(tests, test{name: c.name, fn: "random_get", calls: c.calls})
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := hostile.WASIGuest{Pages: pages, Imports: []string{tc.fn}}
			errnos, before, after, out := wasiRun(t, instantiateWASI, g, tc.setup, tc.fn, tc.calls...)
			if tc.errno != 0 {
				// Past the bound: the errno, and nothing else.
				if len(errnos) != 1 || errnos[0] != uint64(tc.errno) {
					t.Errorf("errno %v, want [%d]", errnos, tc.errno)
				}
				if !bytes.Equal(after, before) || len(out) != 0 {
					t.Errorf("a call past the bound wrote memory or output (%d bytes)", len(out))
				}
				return
			}
			want, _, wantMem, wantOut := wasiRun(t, wasiStockInstantiate, g, tc.setup, tc.fn, tc.calls...)
			if !slices.Equal(errnos, want) {
				t.Errorf("errno %v, wazero's %v", errnos, want)
			}
			if !bytes.Equal(after, wantMem) {
				t.Errorf("memory differs from wazero's")
			}
			if !bytes.Equal(out, wantOut) {
				t.Errorf("output %q, wazero's %q", out, wantOut)
			}
		})
	}
}

// wasiStockInstantiate instantiates wazero's own wasi_snapshot_preview1.
func wasiStockInstantiate(ctx context.Context, e wazero.Runtime) error {
	_, err := wasi_snapshot_preview1.Instantiate(ctx, e)
	return err
}

// wasiRun instantiates g in a new wazero runtime with the WASI that wasi
// instantiates, calls setup on its memory, then makes the calls of its
// export call_fn. It returns their errnos, the memory before and after
// them, and the guest's output.
func wasiRun(t testing.TB, wasi func(context.Context, wazero.Runtime) error, g hostile.WASIGuest, setup func([]byte), fn string, calls ...[]uint64) (errnos []uint64, before, after, out []byte) {
	t.Helper()
	var stdout bytes.Buffer
	mod := wasiInstance(t, wasi, g, setup, &stdout)
	mem, _ := mod.Memory().Read(0, mod.Memory().Size())
	before = bytes.Clone(mem)
	for _, args := range calls {
		res, err := mod.ExportedFunction("call_"+fn).Call(context.Background(), args...)
		if err != nil {
			t.Fatal(err)
		}
		errnos = append(errnos, res[0])
	}
	return errnos, before, bytes.Clone(mem), stdout.Bytes()
}

// wasiInstance instantiates g, its output to stdout, in a new wazero
// runtime with the WASI that wasi instantiates, and calls setup on its
// memory. The runtime is closed when the test ends.
func wasiInstance(t testing.TB, wasi func(context.Context, wazero.Runtime) error, g hostile.WASIGuest, setup func([]byte), stdout io.Writer) api.Module {
	t.Helper()
	ctx := context.Background()
	e := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = e.Close(ctx) })
	if err := wasi(ctx, e); err != nil {
		t.Fatal(err)
	}
	mod, err := e.InstantiateWithConfig(ctx, g.Module(), wazero.NewModuleConfig().WithStdout(stdout).WithStderr(stdout))
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		mem, _ := mod.Memory().Read(0, mod.Memory().Size())
		setup(mem)
	}
	return mod
}

// wasiStock returns the definitions of wazero's wasi_snapshot_preview1
// functions.
func wasiStock(t testing.TB) map[string]api.FunctionDefinition {
	t.Helper()
	ctx := context.Background()
	e := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = e.Close(ctx) })
	defs, err := stockWASI(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

// TestWASIExports: wasp's wasi_snapshot_preview1 exports what wazero's
// does, under the same names and types, and wazero's is the one audited
// in wasi.go: a function added or renamed there needs auditing.
func TestWASIExports(t *testing.T) {
	audited := []string{
		"args_get", "args_sizes_get", "clock_res_get", "clock_time_get",
		"environ_get", "environ_sizes_get", "fd_advise", "fd_allocate",
		"fd_close", "fd_datasync", "fd_fdstat_get", "fd_fdstat_set_flags",
		"fd_fdstat_set_rights", "fd_filestat_get", "fd_filestat_set_size",
		"fd_filestat_set_times", "fd_pread", "fd_prestat_dir_name",
		"fd_prestat_get", "fd_pwrite", "fd_read", "fd_readdir",
		"fd_renumber", "fd_seek", "fd_sync", "fd_tell", "fd_write",
		"path_create_directory", "path_filestat_get",
		"path_filestat_set_times", "path_link", "path_open",
		"path_readlink", "path_remove_directory", "path_rename",
		"path_symlink", "path_unlink_file", "poll_oneoff", "proc_exit",
		"proc_raise", "random_get", "sched_yield", "sock_accept",
		"sock_recv", "sock_send", "sock_shutdown",
	}
	stock := wasiStock(t)
	names := slices.Sorted(maps.Keys(stock))
	if !slices.Equal(names, audited) {
		t.Errorf("wazero's wasi_snapshot_preview1 exports %v; the audit covers %v", names, audited)
	}

	ctx := context.Background()
	e := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = e.Close(ctx) })
	if err := instantiateWASI(ctx, e); err != nil {
		t.Fatal(err)
	}
	got := e.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions()
	if len(got) != len(stock) {
		t.Errorf("%d functions, wazero's has %d", len(got), len(stock))
	}
	for name, want := range stock {
		def, ok := got[name]
		switch {
		case !ok:
			t.Errorf("no %s", name)
		case !slices.Equal(def.ParamTypes(), want.ParamTypes()) || !slices.Equal(def.ResultTypes(), want.ResultTypes()):
			t.Errorf("%s is %v -> %v, wazero's %v -> %v", name, def.ParamTypes(), def.ResultTypes(), want.ParamTypes(), want.ResultTypes())
		case !slices.Equal(def.ParamNames(), want.ParamNames()) || def.Name() != want.Name():
			t.Errorf("%s is named %s%v, wazero's %s%v", name, def.Name(), def.ParamNames(), want.Name(), want.ParamNames())
		}
	}
}

// BenchmarkWASI: what a call of a replaced function costs at an ordinary
// size, that of a 128 MiB random_get, which stays whole, in parts, and
// those of TestWASIHostile past the bounds: wasp's against wazero's own,
// measured in the same run (ns/call each, and their ratio).
func BenchmarkWASI(b *testing.B) {
	const base = 1 << 16
	oneIovec := func(mem []byte) {
		binary.LittleEndian.PutUint32(mem[base:], base+64)
		binary.LittleEndian.PutUint32(mem[base+4:], 16)
	}
	path := func(mem []byte) { copy(mem[base:], "etc/hosts") }
	tests := []struct {
		name  string
		fn    string
		pages int
		setup func([]byte)
		args  []uint64
	}{
		{"fd_write of one iovec", "fd_write", 2, oneIovec, []uint64{1, base, 1, base + 128}},
		{"fd_read of one iovec", "fd_read", 2, oneIovec, []uint64{0, base, 1, base + 128}},
		{"poll_oneoff of one clock", "poll_oneoff", 2, nil, []uint64{base, base + 64, 1, base + 128}},
		{"path_open", "path_open", 2, path, []uint64{3, 0, base, 9, 0, 0, 0, 0, base + 128}},
		{"random_get of 32 bytes", "random_get", 2, nil, []uint64{base, 32}},
		{"random_get of 128 MiB", "random_get", 2049, nil, []uint64{base, 128 << 20}},
		// TestWASIHostile's calls, which wasp refuses.
		{"fd_write of 4 Mi iovecs", "fd_write", 514, nil, []uint64{1, base, 4 << 20, base + 32<<20}},
		{"poll_oneoff of 2 Mi subscriptions", "poll_oneoff", 2562, nil, []uint64{base, base + 96<<20, 2 << 20, base + 160<<20}},
	}
	for _, tc := range tests {
		b.Run(tc.name, func(b *testing.B) {
			g := hostile.WASIGuest{Pages: tc.pages, Imports: []string{tc.fn}}
			stock := wasiInstance(b, wasiStockInstantiate, g, tc.setup, io.Discard).ExportedFunction("call_" + tc.fn)
			wasp := wasiInstance(b, instantiateWASI, g, tc.setup, io.Discard).ExportedFunction("call_" + tc.fn)
			ctx := context.Background()
			stack := make([]uint64, len(tc.args))
			call := func(f api.Function) time.Duration {
				copy(stack, tc.args)
				start := time.Now()
				if err := f.CallWithStack(ctx, stack); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			var stockTime, waspTime time.Duration
			for b.Loop() {
				stockTime += call(stock)
				waspTime += call(wasp)
			}
			b.ReportMetric(float64(stockTime.Nanoseconds())/float64(b.N), "stock-ns/call")
			b.ReportMetric(float64(waspTime.Nanoseconds())/float64(b.N), "wasp-ns/call")
			b.ReportMetric(float64(waspTime)/float64(stockTime), "wasp/stock")
		})
	}
}
