package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime/internal/wasmbin"
)

// CompileLimits bound what compiling one module may cost. wazero's
// compiler takes time quadratic in some shapes of code (a block with tens
// of thousands of branches to it, blocks nested tens of thousands deep,
// thousands of blocks that each join the values of thousands of locals),
// and memory proportional to the largest function; a module of a
// megabyte can keep it busy for minutes and take gigabytes. Load measures
// every function body before compiling (wasmbin.Shapes) and refuses a
// module past any of these limits, naming the function and the limit
// (docs/abi.md §5.1; the measurements behind the defaults are in
// docs/performance.md). Zero fields take the defaults.
type CompileLimits struct {
	// ModuleBytes caps the size of the binary. Default 32 MiB
	// (abi.MaxModuleSize, the most wasp reads of a module).
	ModuleBytes int
	// BodyBytes caps the size of one function body. Default 1 MiB.
	BodyBytes int
	// Depth caps how deep blocks nest in one function. Default 16384.
	Depth int
	// Edges caps the branches to one block of one function (each entry
	// of a br_table naming it counts). Default 32768.
	Edges int
	// BlockLocals caps, for one function, its blocks times its locals
	// (parameters included). Default 1,048,576.
	BlockLocals uint64
	// FunctionMemory caps the memory the compiler is estimated to need
	// for one function. Default 384 MiB.
	FunctionMemory uint64
	// Budget caps the estimated compile time of the whole module on the
	// reference machine of docs/performance.md. Default 30 s.
	Budget time.Duration
	// Timeout is how long Load waits for a compilation that passed the
	// limits above, should the estimate be wrong: past it, Load fails
	// with ErrCompile and leaves the compilation behind, which goes on
	// using a CPU and memory until it ends, as wazero cannot stop one.
	// Default 30 s.
	Timeout time.Duration
	// InstanceBytes caps what every instance of the module is estimated
	// to keep in the host's memory besides its linear memory and tables:
	// wazero's objects for its globals, data segments and element
	// segment entries (instanceBytes), which a module of a few megabytes
	// can make hundreds of megabytes per instance. The estimate is also
	// reserved in the module's memory pool with each instance. Default
	// 32 MiB; wasp's Go modules need about 1 MiB.
	InstanceBytes uint64
	// ChildMemory caps the resident memory of a compile child process
	// (Config.IsolateCompile), which is killed past it. Default 512 MiB:
	// above what FunctionMemory lets one function take, and below what
	// would, beside wasp's own, pass the DaemonSet's memory limit. The
	// child is also the first process the kernel kills when memory runs
	// out.
	ChildMemory uint64
}

// Defaults for CompileLimits.
const (
	DefaultModuleBytes    = abi.MaxModuleSize
	DefaultBodyBytes      = 1 << 20
	DefaultDepth          = 16384
	DefaultEdges          = 32768
	DefaultBlockLocals    = 1 << 20
	DefaultFunctionMemory = 384 << 20
	DefaultCompileBudget  = 30 * time.Second
	DefaultCompileTimeout = 30 * time.Second
	DefaultChildMemory    = 512 << 20
	DefaultInstanceBytes  = 32 << 20
)

func (l CompileLimits) withDefaults() CompileLimits {
	if l.ModuleBytes <= 0 {
		l.ModuleBytes = DefaultModuleBytes
	}
	if l.BodyBytes <= 0 {
		l.BodyBytes = DefaultBodyBytes
	}
	if l.Depth <= 0 {
		l.Depth = DefaultDepth
	}
	if l.Edges <= 0 {
		l.Edges = DefaultEdges
	}
	if l.BlockLocals == 0 {
		l.BlockLocals = DefaultBlockLocals
	}
	if l.FunctionMemory == 0 {
		l.FunctionMemory = DefaultFunctionMemory
	}
	if l.Budget <= 0 {
		l.Budget = DefaultCompileBudget
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultCompileTimeout
	}
	if l.ChildMemory == 0 {
		l.ChildMemory = DefaultChildMemory
	}
	if l.InstanceBytes == 0 {
		l.InstanceBytes = DefaultInstanceBytes
	}
	return l
}

// The cost model: what wazero v1.12's compiler (amd64) was measured to
// take per unit of each quantity, on the reference machine
// (docs/performance.md, "Compiling hostile modules"). Each is about the
// largest ratio measured over the shapes that stress it, on that machine
// under load, so the estimate is high for ordinary code.
const (
	nsPerType        = 20000 // function types: linear
	nsPerBodyByte    = 4500  // every instruction: linear
	nsPerDepth2      = 40    // × depth²: nesting
	nsPerEdge2       = 5     // × Σ edges²: predecessors of each block
	nsPerBlockLocal  = 3000  // × blocks × locals: values joined at blocks
	bytesPerBodyByte = 360
	bytesPerEdge     = 2500
	bytesPerDepth    = 2600
	bytesPerBlockLoc = 240
)

// What wazero v1.12 keeps per instance, in the host's heap, for each
// global, data segment and element segment entry of a module, rounded up
// from measurements (4 million of each, four instances; docs/abi.md §5.1).
const (
	bytesPerGlobal      = 96
	bytesPerDataSegment = 32
	bytesPerElemEntry   = 48
)

// instanceBytes is the estimated host memory every instance of a module
// of shape sh keeps besides its linear memory and tables.
func instanceBytes(sh *wasmbin.ModuleShape) uint64 {
	return bytesPerGlobal*sh.Globals + bytesPerDataSegment*sh.DataSegments + bytesPerElemEntry*sh.ElemEntries
}

// compileCost is the estimated time and memory wazero takes to compile a
// function of shape sh.
func compileCost(sh wasmbin.FuncShape) (time.Duration, uint64) {
	body, depth, edges := uint64(sh.BodyBytes), uint64(sh.Depth), uint64(sh.Edges)
	joins := uint64(sh.Blocks) * sh.Locals
	ns := nsPerBodyByte*body + nsPerDepth2*depth*depth + nsPerEdge2*sh.EdgesSquared + nsPerBlockLocal*joins
	mem := bytesPerBodyByte*body + bytesPerEdge*edges + bytesPerDepth*depth + bytesPerBlockLoc*joins
	return time.Duration(min(ns, 1<<62)), mem
}

// checkCompileLimits refuses a module binary whose compilation would cost
// more than l allows, or each of whose instances would keep more than
// l.InstanceBytes in the host's memory besides its linear memory, which
// it returns. The error names the function (by its index in the module's
// function index space, imports first) and the limit.
func checkCompileLimits(wasm []byte, l CompileLimits) (uint64, error) {
	if len(wasm) > l.ModuleBytes {
		return 0, fmt.Errorf("module of %d bytes exceeds the compile limit of %d bytes", len(wasm), l.ModuleBytes)
	}
	shape, err := wasmbin.Shapes(wasm)
	if err != nil {
		return 0, err
	}
	host := instanceBytes(shape)
	if host > l.InstanceBytes {
		return 0, fmt.Errorf("every instance would keep an estimated %d MiB in the host for its %d globals, %d data segments and %d element segment entries, over the limit of %d MiB",
			host>>20, shape.Globals, shape.DataSegments, shape.ElemEntries, l.InstanceBytes>>20)
	}
	total := time.Duration(nsPerType * shape.Types)
	var worst wasmbin.FuncShape
	var worstCost time.Duration
	for _, sh := range shape.Funcs {
		if err := checkFunction(sh, l); err != nil {
			return 0, fmt.Errorf("function %d: %w", sh.Index, err)
		}
		cost, _ := compileCost(sh)
		total += cost
		if cost > worstCost {
			worst, worstCost = sh, cost
		}
	}
	if total > l.Budget {
		return 0, fmt.Errorf("estimated compile time %s of %d types and %d functions exceeds the compile budget of %s (function %d, %s, is estimated at %s)",
			total.Round(time.Millisecond), shape.Types, len(shape.Funcs), l.Budget, worst.Index, describe(worst), worstCost.Round(time.Millisecond))
	}
	return host, nil
}

// checkFunction checks one function's shape against the per-function
// limits.
func checkFunction(sh wasmbin.FuncShape, l CompileLimits) error {
	joins := uint64(sh.Blocks) * sh.Locals
	switch {
	case sh.BodyBytes > l.BodyBytes:
		return fmt.Errorf("body of %d bytes exceeds the compile limit of %d bytes", sh.BodyBytes, l.BodyBytes)
	case sh.Depth > l.Depth:
		return fmt.Errorf("blocks nested %d deep exceed the compile limit of %d", sh.Depth, l.Depth)
	case sh.Edges > l.Edges:
		return fmt.Errorf("%d branches to one block (largest br_table: %d targets, inside blocks nested %d deep) exceed the compile limit of %d",
			sh.Edges, sh.BrTable, sh.Depth, l.Edges)
	case joins > l.BlockLocals:
		return fmt.Errorf("%d blocks × %d locals = %d exceed the compile limit of %d", sh.Blocks, sh.Locals, joins, l.BlockLocals)
	}
	if _, mem := compileCost(sh); mem > l.FunctionMemory {
		return fmt.Errorf("estimated compile memory of %d MiB (%s) exceeds the compile limit of %d MiB", mem>>20, describe(sh), l.FunctionMemory>>20)
	}
	return nil
}

// describe summarises a function's shape.
func describe(sh wasmbin.FuncShape) string {
	return fmt.Sprintf("%d bytes, blocks nested %d deep, %d branches to one block, %d blocks × %d locals", sh.BodyBytes, sh.Depth, sh.Edges, sh.Blocks, sh.Locals)
}

// compileWithin compiles bin on e, giving up after timeout. wazero cannot
// stop a compilation: one given up on goes on in the background, and its
// result, if it ever comes, is closed. At most maxAbandoned of them may
// run at once; while they do, compileWithin refuses to start another, so
// that a module that is retried cannot pile up compilations that each
// hold a CPU and memory.
func (r *Runtime) compileWithin(ctx context.Context, e wazero.Runtime, bin []byte, timeout time.Duration) (wazero.CompiledModule, error) {
	if !r.abandoned.tryStart() {
		return nil, fmt.Errorf("%d compilations that ran past their time limit are still running; not starting another", maxAbandoned)
	}
	if r.isolate {
		if err := r.compileInChild(ctx, bin, timeout); err != nil {
			return nil, err
		}
	}
	type result struct {
		c   wazero.CompiledModule
		err error
	}
	done := make(chan result, 1)
	var mu sync.Mutex
	gaveUp := false
	go func() {
		c, err := compileRecovered(ctx, e, bin)
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			r.abandoned.end()
			if c != nil {
				_ = c.Close(context.Background())
			}
			return
		}
		done <- result{c, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case res := <-done:
		return res.c, res.err
	case <-timer.C:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case res := <-done: // it finished as the wait ended
		return res.c, res.err
	default:
	}
	gaveUp = true
	r.abandoned.abandon()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("compilation stopped waiting: %w", err)
	}
	return nil, fmt.Errorf("compilation did not finish within %s", timeout)
}

// compileRecovered compiles bin on e, and returns a panic of the compiler
// as an error. It runs on a goroutine of its own, where Load's recover does
// not reach: a compiler that panics on a hostile module, or on an engine
// that Close closed while a compilation given up on still ran (wazero
// clears the engine's tables), would otherwise take the process down.
func compileRecovered(ctx context.Context, e wazero.Runtime, bin []byte) (c wazero.CompiledModule, err error) {
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("the compiler panicked: %v", p)
		}
	}()
	return e.CompileModule(ctx, bin)
}

// maxAbandoned is how many compilations given up on may run at once.
const maxAbandoned = 2

// compilations counts the compilations given up on that still run.
type compilations struct {
	mu        sync.Mutex
	abandoned int
}

// tryStart reports whether a compilation may start.
func (c *compilations) tryStart() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.abandoned < maxAbandoned
}

// abandon records that a compilation was given up on.
func (c *compilations) abandon() {
	c.mu.Lock()
	c.abandoned++
	c.mu.Unlock()
}

// end records that a compilation given up on has ended.
func (c *compilations) end() {
	c.mu.Lock()
	c.abandoned--
	c.mu.Unlock()
}

// running returns how many compilations given up on are still running.
func (c *compilations) running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.abandoned
}
