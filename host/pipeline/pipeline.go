package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/reference"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// Module is what the pipeline needs of a stage's module; *runtime.Module
// implements it.
type Module interface {
	// Call runs stage over an encoded batch and appends the raw output to
	// dst. It must not modify input: the next stage reuses its encoding.
	Call(ctx context.Context, stage abi.Stage, input, dst []byte) ([]byte, error)
	// Instances is how many calls may run at once.
	Instances() int
}

var _ Module = (*runtime.Module)(nil)

// shrinker is a Module that can give back the memory a large batch left in
// its instances; *runtime.Module is one.
type shrinker interface {
	Shrink(ctx context.Context) error
}

var _ shrinker = (*runtime.Module)(nil)

// Source says where a port's final decision came from.
type Source uint8

const (
	// SourceModules: every stage's module produced it.
	SourceModules Source = iota
	// SourceLastGood: a stage failed; the port kept its last good
	// decision, less the endpoints that left the port or stopped serving.
	SourceLastGood
	// SourceBuiltin: a stage failed and the port had no last good
	// decision, or the stage's failure policy is Builtin, so the native
	// reference semantics decided.
	SourceBuiltin
)

func (s Source) String() string {
	return [...]string{"modules", "last-good", "builtin"}[s]
}

// FailurePolicy is what a port gets, for the evaluation at hand, when a
// stage's module fails for it.
type FailurePolicy uint8

const (
	// KeepLastGood: the port keeps its last good decision
	// (SourceLastGood), less the endpoints that left the port or stopped
	// serving; it gets the native reference semantics (SourceBuiltin) if
	// it never had one, or if none is left of a set it programmed
	// endpoints for. The default.
	KeepLastGood FailurePolicy = iota
	// Builtin: the port gets the native reference semantics
	// (SourceBuiltin), whether or not it had a last good decision.
	Builtin
)

func (f FailurePolicy) String() string {
	return [...]string{"KeepLastGood", "Builtin"}[f]
}

// Port is one service port to evaluate.
type Port struct {
	// Key identifies the port across syncs, for its last good decision.
	Key string
	abi.ServicePort
}

// Result is a port's final decision.
type Result struct {
	abi.Decision
	// Endpoints are the endpoints the Decision's indices refer to: the
	// port's current ones, a last good decision's included (its indices
	// are carried over to them).
	Endpoints []abi.Endpoint
	Source    Source
	// Err is the failure that made Source not SourceModules.
	Err error
}

// Options configure a Pipeline.
type Options struct {
	// Modules holds the module of each stage, indexed by abi.Stage. A nil
	// entry runs the native reference implementation. Optional.
	Modules [len(abi.Stages) + 1]Module
	// Policies holds the failure policy of each stage, indexed by
	// abi.Stage: that of the stage's module. Optional; default
	// KeepLastGood.
	Policies [len(abi.Stages) + 1]FailurePolicy
	// MinChunk is the fewest ports worth a call of their own when a batch
	// is split across instances. Optional; default 512.
	MinChunk int
	// MaxChunk is the most ports of one call: a larger batch is split
	// into more calls than there are instances, which take them in turn,
	// so that what an instance's linear memory grows to for a full
	// recompute depends on MaxChunk, not on the cluster's size.
	// Optional; default 1024.
	MaxChunk int
	// BisectBudget bounds, per stage and Run, the module time spent in
	// calls that failed as a whole (the batch's own included): once they
	// add up to it, no call is started to isolate the ports that cause
	// the failures, and the ports not isolated get the failure policy's
	// fallback with ErrNotIsolated, and are evaluated alone the next time.
	// Calls that succeed are not counted, so that a machine that runs
	// them slowly does not spend it. Optional; default 10 s.
	BisectBudget time.Duration
	// QuarantineRetry is how long a port that made its stage's module
	// fail alone is not called again with the same input and module: its
	// failure is applied without a call (ErrQuarantined). The wait doubles
	// with each failure in a row, up to 32 times. A port in quarantine is
	// never in a call with other ports. Optional; default 30 s.
	QuarantineRetry time.Duration
	// Observer is told about every module call. Optional.
	Observer Observer
}

// Observer receives the pipeline's events, for metrics and Kubernetes
// Events. Its methods are called from Run's goroutines (Call from several
// at once) and from Forget, and must be quick and never block. module is
// the name of the stage's module (runtime.Module.Name).
type Observer interface {
	// Call reports one module call: its module and stage, how many ports
	// it carried, how long it took, and its error (nil on success; else
	// usually a *runtime.CallError). The calls of a bisection are
	// reported each.
	Call(module string, stage abi.Stage, ports int, d time.Duration, err error)
	// PortFailed reports a port whose stage failed, with the failure and
	// the fallback used.
	PortFailed(module string, stage abi.Stage, key string, src Source, err error)
	// Fallbacks reports how many of the ports evaluated so far (and not
	// forgotten) are served by a fallback because their last evaluation
	// failed: n[stage][SourceLastGood] and n[stage][SourceBuiltin], by the
	// stage that failed. It is called after every Run, and after a Forget
	// that changed it.
	Fallbacks(n *Fallbacks)
}

// Fallbacks counts ports served by a fallback, by failed stage and source;
// the SourceModules column stays 0.
type Fallbacks [len(abi.Stages) + 1][SourceBuiltin + 1]int

// Observers returns an Observer that tells each of obs in turn; nil ones
// are skipped.
func Observers(obs ...Observer) Observer {
	var out observers
	for _, o := range obs {
		if o != nil {
			out = append(out, o)
		}
	}
	return out
}

type observers []Observer

func (os observers) Call(module string, stage abi.Stage, ports int, d time.Duration, err error) {
	for _, o := range os {
		o.Call(module, stage, ports, d, err)
	}
}

func (os observers) PortFailed(module string, stage abi.Stage, key string, src Source, err error) {
	for _, o := range os {
		o.PortFailed(module, stage, key, src, err)
	}
}

func (os observers) Fallbacks(n *Fallbacks) {
	for _, o := range os {
		o.Fallbacks(n)
	}
}

// Pipeline evaluates service ports. Run must not be called concurrently.
type Pipeline struct {
	opts     Options
	lastGood map[string]*Result
	// fallback holds the stage that failed, and the source used, of every
	// port whose last evaluation failed; counts counts them.
	fallback map[string]fallbackOf
	counts   Fallbacks

	// quarantine holds, per stage, the ports its module last failed for
	// alone or that a failed call left unresolved (see quarantine.go);
	// gen counts each stage's module swaps.
	quarantine [len(abi.Stages) + 1]map[string]*suspect
	gen        [len(abi.Stages) + 1]uint64
	hasher     inputHasher
	now        func() time.Time

	workers []worker
	// chunks holds the encoded input of each chunk of the last stage run,
	// for the next stage to rewrite only its decisions; runs counts Runs,
	// to tell which Run an encoding is of.
	chunks []chunkInput
	runs   uint64
	// scratch is the stages' bookkeeping, kept from one stage and Run to
	// the next with the buffers.
	scratch stageScratch
	// grown: a batch split across instances grew the workers' buffers
	// and the modules' instances, and Release has not run since.
	grown bool
}

// worker holds per-goroutine scratch buffers.
type worker struct {
	enc     abi.Encoder
	in, out []byte
	// flags are the endpoints' flags of in, for the guardrails.
	flags []byte
	res   []abi.Result
}

// stageScratch holds what a stage's evaluation needs besides the
// workers' buffers; every field is rebuilt by each stage.
type stageScratch struct {
	live     []int
	outcomes []outcome
	tasks    []task
	iso      isolation
	// The Run's per-port state, which its Results copy: kept for the
	// next Run, and emptied of references at the end of each.
	decisions []abi.Decision
	failed    []bool
	errs      []error
	sps       []abi.ServicePort
}

// reuse returns s resized to n zero elements, in its own array if it has
// the capacity.
func reuse[T any](s []T, n int) []T {
	s = slices.Grow(s[:0], n)[:n]
	clear(s)
	return s
}

// chunkInput is the encoded input of a batch chunk: the ports
// sps[lo:lo+n] of Run number run, for the stage before, if ok. The next
// stage's call for the same chunk rewrites only its stage and decisions
// (abi.RewriteDecisions) instead of encoding the ports again.
type chunkInput struct {
	in, flags []byte // as worker's
	run       uint64
	lo, n     int
	ok        bool
}

// New returns a Pipeline.
func New(opts Options) *Pipeline {
	if opts.MinChunk <= 0 {
		opts.MinChunk = 512
	}
	if opts.MaxChunk <= 0 {
		opts.MaxChunk = 1024
	}
	opts.MaxChunk = max(opts.MaxChunk, opts.MinChunk)
	if opts.BisectBudget <= 0 {
		opts.BisectBudget = 10 * time.Second
	}
	if opts.QuarantineRetry <= 0 {
		opts.QuarantineRetry = 30 * time.Second
	}
	p := &Pipeline{
		opts: opts, lastGood: map[string]*Result{}, fallback: map[string]fallbackOf{},
		hasher: newInputHasher(), now: time.Now, workers: make([]worker, workers(opts.Modules)),
	}
	for _, stage := range abi.Stages {
		p.quarantine[stage] = map[string]*suspect{}
	}
	return p
}

// workers is how many calls the pipeline runs at once: the largest
// instance pool.
func workers(mods [len(abi.Stages) + 1]Module) int {
	n := 1
	for _, m := range mods {
		if m != nil {
			n = max(n, m.Instances())
		}
	}
	return n
}

// SetModules replaces the stages' modules and their failure policies (hot
// reload). The last good decision of every port is kept: a port the new
// modules fail for under KeepLastGood keeps the decision the old ones
// made, as for any failure. A port in a stage's quarantine stays there,
// but a new module of the stage is called for it (alone) at once. It must
// not be called while Run runs; the caller closes the old modules.
func (p *Pipeline) SetModules(mods [len(abi.Stages) + 1]Module, policies [len(abi.Stages) + 1]FailurePolicy) {
	for _, stage := range abi.Stages {
		if !sameModule(mods[stage], p.opts.Modules[stage]) {
			p.gen[stage]++
		}
	}
	p.opts.Modules, p.opts.Policies = mods, policies
	p.workers = make([]worker, workers(mods))
	p.grown = false // the old modules are the caller's to close
}

// fallbackOf is why a port is served by a fallback.
type fallbackOf struct {
	stage abi.Stage
	src   Source
}

// Forget drops the last good decision, and the quarantine, of ports that
// no longer exist.
func (p *Pipeline) Forget(key string) {
	delete(p.lastGood, key)
	for _, q := range p.quarantine {
		delete(q, key)
	}
	if p.setFallback(key, nil) {
		p.reportFallbacks()
	}
}

// setFallback records why key is served by a fallback (nil: it is not)
// and reports whether that changed anything.
func (p *Pipeline) setFallback(key string, f *fallbackOf) bool {
	if f == nil && len(p.fallback) == 0 {
		return false // the usual case: no port is on a fallback
	}
	old, had := p.fallback[key]
	if had {
		if f != nil && *f == old {
			return false
		}
		p.counts[old.stage][old.src]--
		delete(p.fallback, key)
	}
	if f != nil {
		p.counts[f.stage][f.src]++
		p.fallback[key] = *f
	}
	return had || f != nil
}

// reportFallbacks tells the Observer the counts.
func (p *Pipeline) reportFallbacks() {
	if o := p.opts.Observer; o != nil {
		n := p.counts
		o.Fallbacks(&n)
	}
}

// Run evaluates ports for node and returns one Result per port, in order.
//
// A batch large enough to be split across instances (a full recompute)
// leaves every instance's linear memory and every worker's buffers sized
// for its share. Run keeps them for the next batch, which is often as
// large (the other IP family of the same sync, or the next full
// recompute), and gives that memory back at the first batch that is not
// split, or when Release is called: the buffers are dropped and the
// modules shrink their pools to one fresh instance each
// (runtime.Module.Shrink). See RATIONALE.md, "Why keep the buffers of a
// full recompute until the next small batch?".
func (p *Pipeline) Run(ctx context.Context, node abi.Node, ports []Port) []Result {
	results, split := p.run(ctx, node, ports)
	switch {
	case split:
		p.grown = true
	case p.grown:
		p.Release(ctx)
	}
	p.reportFallbacks()
	return results
}

// Release drops the workers' scratch buffers and shrinks the modules'
// instance pools to one fresh instance each, if a batch split across
// instances grew them. A caller that is done with large batches for a
// while (the end of a full sync) calls it to give that memory back at
// once; otherwise the next batch that is not split does. It must not be
// called while Run runs.
func (p *Pipeline) Release(ctx context.Context) {
	if !p.grown {
		return
	}
	p.grown = false
	clear(p.workers)
	p.chunks = nil
	p.scratch = stageScratch{}
	for _, stage := range abi.Stages {
		m, ok := p.opts.Modules[stage].(shrinker)
		if !ok {
			continue
		}
		if err := m.Shrink(ctx); err != nil {
			// The pool starts an instance on the next call instead.
			klog.FromContext(ctx).V(2).Info("Starting a fresh module instance failed", "stage", stage.String(), "err", err)
		}
	}
}

// run is Run without the release of memory; split reports whether a stage was split
// across instances.
func (p *Pipeline) run(ctx context.Context, node abi.Node, ports []Port) (_ []Result, split bool) {
	p.runs++
	n := len(ports)
	results := make([]Result, n)
	sc := &p.scratch
	sc.decisions, sc.failed, sc.errs = reuse(sc.decisions, n), reuse(sc.failed, n), reuse(sc.errs, n)
	sc.sps = slices.Grow(sc.sps[:0], n)[:n]
	decisions, failed, errs, sps := sc.decisions, sc.failed, sc.errs, sc.sps
	defer func() {
		// Nothing of the ports or results stays reachable from here.
		clear(decisions)
		clear(errs)
		clear(sps)
	}()
	for i := range ports {
		sps[i] = ports[i].ServicePort
	}

	for _, stage := range abi.Stages {
		// Ports that failed an earlier stage are settled; run the rest.
		live := p.scratch.live[:0]
		for i := range n {
			if !failed[i] {
				live = append(live, i)
			}
		}
		p.scratch.live = live
		if len(live) == 0 {
			break
		}
		clear(errs)
		chunks := p.runStage(ctx, stage, node, ports, sps, live, decisions, errs)
		split = split || chunks > 1
		nfailed, first := 0, -1
		for _, i := range live {
			err := errs[i]
			if err == nil {
				continue
			}
			failed[i] = true
			results[i] = p.fallbackResult(node, ports[i], p.opts.Policies[stage], err)
			p.setFallback(ports[i].Key, &fallbackOf{stage, results[i].Source})
			if o := p.opts.Observer; o != nil {
				o.PortFailed(nameOf(p.opts.Modules[stage]), stage, ports[i].Key, results[i].Source, err)
			}
			if errors.Is(err, ErrQuarantined) {
				continue // logged when it was quarantined
			}
			if nfailed++; first < 0 {
				first = i
			}
		}
		if nfailed > 0 {
			// One line per stage and sync, however many ports failed.
			klog.FromContext(ctx).Info("Module failed for service ports; they keep their last good decision or get the builtin semantics, as the failure policy says",
				"stage", stage.String(), "failurePolicy", p.opts.Policies[stage].String(), "ports", nfailed, "reason", runtime.ReasonOf(results[first].Err),
				"servicePort", ports[first].Key, "err", results[first].Err)
		}
	}
	for i := range n {
		if failed[i] {
			continue
		}
		results[i] = Result{Decision: decisions[i], Endpoints: ports[i].Endpoints, Source: SourceModules}
		p.lastGood[ports[i].Key] = &results[i]
		p.setFallback(ports[i].Key, nil)
	}
	return results, split
}

// fallbackResult decides for a port whose stage, of failure policy
// policy, failed. A last good decision keeps only the endpoints still in
// the port and serving (keepLastGood); if that leaves a set it programmed
// without any, the builtin semantics decide.
func (p *Pipeline) fallbackResult(node abi.Node, port Port, policy FailurePolicy, err error) Result {
	if last, ok := p.lastGood[port.Key]; ok && policy == KeepLastGood {
		if d, ok := keepLastGood(last, port.Endpoints); ok {
			return Result{Decision: d, Endpoints: port.Endpoints, Source: SourceLastGood, Err: err}
		}
	}
	return Result{
		Decision:  reference.Categorize(&node, &port.ServicePort),
		Endpoints: port.Endpoints,
		Source:    SourceBuiltin,
		Err:       err,
	}
}

// runStage runs stage for the ports live (indices into ports, sps and
// decisions), updating decisions in place and setting errs[i] for each
// port it fails for, and returns how many calls it split the batch into
// (0: native, or only ports in quarantine).
//
// The ports in the stage's quarantine are not in the batch: a port whose
// input and module are those of its last failure, and whose retry is not
// due, gets that failure without a call; the others are called alone,
// after the batch. The batch is split across the instances when it is
// large; a call that fails as a whole is split further (isolate.go).
func (p *Pipeline) runStage(ctx context.Context, stage abi.Stage, node abi.Node, ports []Port, sps []abi.ServicePort, live []int, decisions []abi.Decision, errs []error) int {
	mod := p.opts.Modules[stage]
	if mod == nil {
		for _, i := range live {
			decisions[i] = native(stage, &node, &sps[i], decisions[i])
		}
		return 0
	}
	q := p.quarantine[stage]
	sc := &p.scratch
	outcomes := slices.Grow(sc.outcomes[:0], len(sps))[:len(sps)]
	clear(outcomes) // outCalled
	sc.outcomes = outcomes
	batch, alone := live, []task(nil)
	if len(q) > 0 {
		batch = make([]int, 0, len(live))
		now := p.now()
		for _, i := range live {
			s, ok := q[ports[i].Key]
			switch {
			case !ok:
				batch = append(batch, i)
			case s.skip(p.hasher.hash(stage, node, sps, decisions, i), p.gen[stage], now):
				errs[i], outcomes[i] = s.skipped(), outSkipped
			default:
				alone = append(alone, task{idx: []int{i}, isolating: true, known: s})
			}
		}
	}
	chunks := 0
	tasks := sc.tasks[:0]
	if len(batch) > 0 {
		chunks = max(1, min(mod.Instances(), len(batch)/p.opts.MinChunk), (len(batch)+p.opts.MaxChunk-1)/p.opts.MaxChunk)
		size := (len(batch) + chunks - 1) / chunks
		if len(p.chunks) < chunks {
			p.chunks = append(p.chunks, make([]chunkInput, chunks-len(p.chunks))...)
		}
		for k, lo := 0, 0; lo < len(batch); k, lo = k+1, lo+size {
			tasks = append(tasks, task{idx: batch[lo:min(lo+size, len(batch))], chunk: &p.chunks[k]})
		}
	}
	sc.tasks = tasks
	// The isolation of the stage before is over: run returned after its
	// last goroutine was done with it.
	is := &sc.iso
	*is = isolation{
		p: p, ctx: ctx, stage: stage, node: node, mod: mod, sps: sps, decisions: decisions, errs: errs, outcomes: outcomes,
		workers: p.workers[:max(1, min(mod.Instances(), len(p.workers)))],
	}
	is.run(tasks, alone)
	// Nothing of the Run is kept past it: the next stage or Run sets
	// every field again.
	*is = isolation{}
	clear(tasks[:cap(tasks)])
	p.settle(ctx, stage, node, ports, sps, decisions, live, errs, outcomes)
	return chunks
}

// call runs one batch. On success it sets the ports' decisions, or their
// errs for the error records; it returns the error of a call that failed
// as a whole, and the call's duration. chunk, if not nil, keeps the
// batch's encoding for the next stage.
func (p *Pipeline) call(ctx context.Context, w *worker, mod Module, stage abi.Stage, node abi.Node,
	sps []abi.ServicePort, idx []int, decisions []abi.Decision, errs []error, chunk *chunkInput) (time.Duration, error) {
	b := abi.Batch{Stage: stage, Node: node}
	lo, hi := idx[0], idx[len(idx)-1]+1
	contiguous := hi-lo == len(idx)
	if contiguous {
		// The usual case, no port settled by an earlier failure: the
		// chunk is a contiguous run and needs no copy.
		b.Ports, b.Decisions = sps[lo:hi], decisions[lo:hi]
	} else {
		b.Ports, b.Decisions = make([]abi.ServicePort, len(idx)), make([]abi.Decision, len(idx))
		for k, i := range idx {
			b.Ports[k], b.Decisions[k] = sps[i], decisions[i]
		}
	}
	var err error
	start := time.Since(epoch)
	in, flags := &w.in, &w.flags
	if chunk != nil {
		in, flags = &chunk.in, &chunk.flags
	}
	if chunk != nil && chunk.ok && contiguous && chunk.run == p.runs && chunk.lo == lo && chunk.n == len(idx) {
		// The same ports of the same Run as the stage before: only the
		// decisions differ.
		*in, err = abi.RewriteDecisions(*in, stage, b.Decisions)
	} else {
		*in, *flags, err = w.enc.EncodeFlags((*in)[:0], (*flags)[:0], &b)
	}
	if chunk != nil {
		chunk.ok, chunk.run, chunk.lo, chunk.n = err == nil && contiguous, p.runs, lo, len(idx)
	}
	if err == nil {
		w.out, err = mod.Call(ctx, stage, *in, w.out[:0])
	}
	if err == nil {
		w.res, err = abi.DecodeOutput(w.out, &b, w.res)
		if err != nil {
			err = &runtime.CallError{Module: nameOf(mod), Stage: stage, Reason: runtime.ReasonInvalidOutput, Err: err}
		}
	}
	d := time.Since(epoch) - start
	if o := p.opts.Observer; o != nil {
		o.Call(nameOf(mod), stage, len(idx), d, err)
	}
	if err != nil {
		return d, err
	}
	g := guardrailsOf(mod)
	off := 0 // of port i's endpoints in flags
	for k, i := range idx {
		r := &w.res[k]
		nep := len(sps[i].Endpoints)
		epFlags := (*flags)[off : off+nep]
		off += nep
		if r.Err != "" {
			kind := "module error"
			if r.Invalid {
				kind = "invalid output"
			}
			errs[i] = &runtime.CallError{Module: nameOf(mod), Stage: stage, Reason: reasonOf(r), Err: fmt.Errorf("%s: %s", kind, r.Err)}
			continue
		}
		if err := g.check(stage, &sps[i], &r.Decision, epFlags); err != nil {
			errs[i] = &runtime.CallError{Module: nameOf(mod), Stage: stage, Reason: runtime.ReasonInvalidOutput, Err: fmt.Errorf("invalid output: %w", err)}
			continue
		}
		// DecodeOutput gives each call fresh index arrays, so the
		// decision can be kept as it is.
		decisions[i] = r.Decision
	}
	return d, nil
}

// epoch is the origin of the calls' clock: time.Since(epoch) reads only
// the monotonic clock, where time.Now reads the wall clock too.
var epoch = time.Now()

func reasonOf(r *abi.Result) runtime.Reason {
	if r.Invalid {
		return runtime.ReasonInvalidOutput
	}
	return runtime.ReasonModuleError
}

// nameOf names a module in errors.
func nameOf(m Module) string {
	if s, ok := m.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", m)
}

func native(stage abi.Stage, node *abi.Node, sp *abi.ServicePort, prev abi.Decision) abi.Decision {
	switch stage {
	case abi.StageTopology:
		return reference.Topology(node, sp)
	case abi.StageTrafficPolicy:
		return reference.TrafficPolicy(node, sp, prev)
	default:
		return reference.EndpointSelection(node, sp, prev)
	}
}
