//go:build linux

package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
	"github.com/wasp-proxy/wasp/host/runtime/internal/wasmbin"
)

// shapeModule builds the module a shape spec names: a shape of package
// hostile and its parameters, comma-separated ("dispatch,2000,2000,100"),
// "copies,N,SHAPE..." for N functions of that shape, "funcs,N", "types,N"
// or "file,PATH".
func shapeModule(tb testing.TB, spec string) []byte {
	tb.Helper()
	f := strings.Split(spec, ",")
	switch f[0] {
	case "file":
		b, err := os.ReadFile(f[1])
		if err != nil {
			tb.Fatal(err)
		}
		return b
	case "funcs":
		return hostile.Module(0, hostile.Funcs(param(tb, f, 1))...)
	case "types":
		return hostile.Module(param(tb, f, 1))
	case "copies":
		body := shapeBody(tb, f[2:])
		return hostile.Module(0, slices.Repeat([][]byte{body}, param(tb, f, 1))...)
	}
	return hostile.Module(0, shapeBody(tb, f))
}

// shapeBody builds the function body of a shape and its parameters.
func shapeBody(tb testing.TB, f []string) []byte {
	tb.Helper()
	n := func(i int) int { return param(tb, f, i) }
	switch f[0] {
	case "dispatch":
		return hostile.Dispatch(n(1), n(2), n(3))
	case "nest":
		return hostile.Nest(n(1))
	case "brtable":
		return hostile.BrTable(n(1))
	case "locals":
		return hostile.Locals(n(1), n(2))
	case "straight":
		return hostile.Straight(n(1))
	}
	tb.Fatalf("unknown shape %q", strings.Join(f, ","))
	return nil
}

// param returns the integer parameter f[i] of a shape.
func param(tb testing.TB, f []string, i int) int {
	tb.Helper()
	if i >= len(f) {
		tb.Fatalf("shape %q: missing parameter %d", strings.Join(f, ","), i)
	}
	v, err := strconv.Atoi(f[i])
	if err != nil {
		tb.Fatalf("shape %q: %v", strings.Join(f, ","), err)
	}
	return v
}

// TestCompileCost measures what wazero's compiler takes for each shape of
// $WASP_COMPILE_SHAPES (space-separated specs of shapeModule), each in a
// child process of its own so that its peak RSS is its own, and prints it
// beside the estimate of the cost model (compileCost). It is how the
// numbers of docs/performance.md were taken:
//
//	WASP_COMPILE_SHAPES="nest,16000 brtable,40000" go test -run 'TestCompileCost$' -v -timeout 1h ./host/runtime/
//
// With WASP_COMPILE_ESTIMATE_ONLY=1 it prints the estimates and verdicts
// without compiling.
func TestCompileCost(t *testing.T) {
	shapes := os.Getenv("WASP_COMPILE_SHAPES")
	if shapes == "" {
		t.Skip("measures compile cost; set WASP_COMPILE_SHAPES")
	}
	for _, spec := range strings.Fields(shapes) {
		wasm := shapeModule(t, spec)
		shape, err := wasmbin.Shapes(wasm)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		est := time.Duration(nsPerType * shape.Types)
		var mem uint64
		for _, sh := range shape.Funcs {
			d, m := compileCost(sh)
			est, mem = est+d, max(mem, m)
		}
		verdict := "accepted"
		if _, err := checkCompileLimits(wasm, CompileLimits{}.withDefaults()); err != nil {
			verdict = "refused: " + err.Error()
		}
		if os.Getenv("WASP_COMPILE_ESTIMATE_ONLY") != "" {
			t.Logf("%-26s %9d bytes  estimate %8s, %4d MiB  %s", spec, len(wasm), est.Round(time.Millisecond), mem>>20, verdict)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCompileCostChild$")
		cmd.Env = append(os.Environ(), "WASP_COMPILE_SHAPE="+spec)
		out, err := cmd.Output()
		cancel()
		var rss int64
		if cmd.ProcessState != nil {
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				rss = ru.Maxrss >> 10 // KiB on Linux
			}
		}
		took := "?"
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, "COMPILED "); ok {
				took = v
			}
		}
		t.Logf("%-26s %9d bytes  took %-8s peak RSS %5d MiB  (estimate %8s, %4d MiB)  %v  %s",
			spec, len(wasm), took, rss, est.Round(time.Millisecond), mem>>20, err, verdict)
	}
}

// TestCompileCostChild is TestCompileCost's child: it compiles one shape
// with wazero's defaults, as wasp does, and prints the time taken.
func TestCompileCostChild(t *testing.T) {
	spec := os.Getenv("WASP_COMPILE_SHAPE")
	if spec == "" {
		t.Skip("child of TestCompileCost")
	}
	wasm := shapeModule(t, spec)
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	start := time.Now()
	if _, err := r.CompileModule(ctx, wasm); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("COMPILED %.2fs\n", time.Since(start).Seconds())
}
