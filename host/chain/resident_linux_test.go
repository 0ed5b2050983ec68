package chain_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/modules/builds"
)

// Budgets of what loading a chain may add to a process's resident
// anonymous memory, in bytes, set from the measurement in
// docs/performance.md ("Where wasp's memory goes"). The default chain as
// wasp run loads it runs natively: it measured 0.5 MiB, and must cost next
// to nothing (its three Go modules compiled and instantiated cost 58 MiB
// in wasp). One Go module, loaded as a vendor's is, measured 21.1 to 21.2
// MiB: 10.3 of machine code, 1.7 of linear memory (one instance), the
// rest wazero's decoded module and the compiler's leftovers in the Go
// heap. Its budget leaves room for noise, not for a second compiled copy
// or a second instance: a vendor's Go module must not cost more. The same
// module built from Rust (modules/selection/lib.rs) measured 1.8 to 1.9
// MiB: 0.2 of machine code, 0.1 of linear memory.
//
// The three embedded modules loaded as Wasm (wasp explain, wasp module
// bench) are their Rust build: 3.3 to 3.5 MiB, 0.5 of machine code and 0.2
// of linear memory. Their Go build, which wasp embedded before, measured
// 57.9 to 58.4 MiB (31.1 of machine code): the budget fails it.
const (
	defaultChainBudget = 2 << 20
	defaultWasmBudget  = 5 << 20
	goModuleBudget     = 24 << 20
	rustModuleBudget   = 3 << 20
)

// residentChild names the chain a child process of TestResidentCost loads.
const residentChild = "WASP_RESIDENT_CHILD"

// resident is what a child measured: the growth of its resident
// anonymous memory (RssAnon) over the load, of it the anonymous
// executable mappings (wazero's machine code), and the modules' linear
// memory.
type resident struct {
	Anon, Code, Linear int64
}

// TestResidentCost loads the default chain as wasp run does, and one Go
// module and one Rust module as a vendor's, each in a fresh child
// process, and fails if the resident memory the load adds passes its
// budget. A child process, so that nothing of another test (compiled
// modules, heap) is counted; the memory is read from /proc/self, after
// the garbage collector returned what it could, not timed.
func TestResidentCost(t *testing.T) {
	if which := os.Getenv(residentChild); which != "" {
		residentChildMain(which)
		return
	}
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	tests := []struct {
		name   string
		budget int64
	}{
		{"default", defaultChainBudget},
		{"default-wasm", defaultWasmBudget},
		{"go-module", goModuleBudget},
		{"rust-module", rustModuleBudget},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestResidentCost$")
			cmd.Env = append(os.Environ(), residentChild+"="+tc.name)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			var r resident // the child prints it alone, and exits
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("child output %q: %v", out, err)
			}
			t.Logf("%s: +%.1f MiB resident anonymous memory, of it %.1f MiB machine code, %.1f MiB linear memory (budget %.1f MiB)",
				tc.name, mib(r.Anon), mib(r.Code), mib(r.Linear), mib(tc.budget))
			if r.Anon > tc.budget {
				t.Errorf("loading the %s chain added %.1f MiB of resident memory, past its budget of %.1f MiB (machine code %.1f, linear memory %.1f)",
					tc.name, mib(r.Anon), mib(tc.budget), mib(r.Code), mib(r.Linear))
			}
		})
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// residentChildMain is the child of TestResidentCost: it loads a chain
// and prints what that added as one line of JSON.
func residentChildMain(which string) {
	fail := func(err error) {
		fmt.Println(err)
		os.Exit(1)
	}
	ctx := context.Background()
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		fail(err)
	}
	before, err := readResident()
	if err != nil {
		fail(err)
	}
	var specs []chain.Spec
	// default-wasm: the three embedded modules as Wasm, as wasp explain
	// and wasp module bench load them.
	l := chain.Loader{Runtime: rt, NativeBuiltins: which != "default-wasm"}
	if build, ok := strings.CutSuffix(which, "-module"); ok {
		// The selection module's Go or Rust build given by file, as a
		// vendor's: Wasm whatever NativeBuiltins says.
		wasm, err := builds.Wasm(builds.Build(build), "selection")
		if err != nil {
			fail(err)
		}
		dir, err := os.MkdirTemp("", "wasp-resident-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
		path := dir + "/selection.wasm"
		if err := os.WriteFile(path, wasm, 0o644); err != nil {
			fail(err)
		}
		specs = []chain.Spec{{Stage: abi.StageEndpointSelection, Source: "file://" + path}}
	}
	c, err := l.Load(ctx, specs)
	if err != nil {
		fail(err)
	}
	after, err := readResident()
	if err != nil {
		fail(err)
	}
	b, _ := json.Marshal(resident{Anon: after.Anon - before.Anon, Code: after.Code - before.Code, Linear: after.Linear - before.Linear})
	fmt.Println(string(b))
	c.Close()
	_ = rt.Close(ctx)
	os.Exit(0)
}

// readResident returns the process's resident anonymous memory, after a
// collection that returns free heap to the kernel, with the part in
// anonymous executable mappings (wazero's machine code) and in linear
// memories (the anonymous mappings host/runtime/memory_linux.go reserves
// with MAP_NORESERVE, "nr" in VmFlags: the kernel may merge one with a
// neighbour of the same flags, so its size does not tell it).
func readResident() (resident, error) {
	debug.FreeOSMemory()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return resident{}, err
	}
	defer f.Close()
	var (
		r          resident
		anon, exec bool  // the mapping at hand
		bytes      int64 // its Anonymous
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0:
		case !strings.HasSuffix(fields[0], ":"):
			// A mapping's header: start-end perms offset dev inode [path].
			anon = len(fields) < 6
			exec = anon && strings.Contains(fields[1], "x")
		case fields[0] == "Anonymous:" && len(fields) > 1:
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return resident{}, fmt.Errorf("smaps: %q: %w", sc.Text(), err)
			}
			bytes = kb << 10
			r.Anon += bytes
			if exec {
				r.Code += bytes
			}
		case fields[0] == "VmFlags:":
			// The mapping's last line.
			if anon && slices.Contains(fields[1:], "nr") {
				r.Linear += bytes
			}
			bytes = 0
		}
	}
	return r, sc.Err()
}
