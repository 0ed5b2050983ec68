package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// proc is one worker process: a start of the module's worker, until it
// exits.
type proc struct {
	cmd    *exec.Cmd
	pid    int
	w      frameWriter // requests, to reqW
	reqW   *os.File
	r      *bufio.Reader
	rf     *os.File // replies
	stderr limitedBuffer
	limits *limits
	slots  *slots

	mu      sync.Mutex
	pending map[uint64]*pending // nil once the process exited
	// retired are the slots of the calls given up that the worker has
	// not answered yet, by call id: it may still write to them.
	retired map[uint64]*slot
	// cause is why this process killed the worker, and causeID the
	// call it killed it for.
	cause   cause
	causeID uint64

	// started: the goroutines that read its answers, reap it and watch
	// its memory run (after the load).
	started    bool
	readerDone chan struct{}
	dead       chan struct{} // closed when it exited and its calls failed
}

// cause is why a worker was killed.
type cause uint8

const (
	causeNone     cause = iota // it died by itself
	causeTimeout               // a call ran past its bounds
	causeMemory                // its resident memory grew past its limit
	causeClosed                // the Module was closed
	causeProtocol              // it broke the protocol
)

// pending is a call waiting for its answer.
type pending struct {
	dst, out []byte
	slot     *slot // the call's slot, nil if none
	err      error
	// shared: the output is in the slot, n bytes at off.
	shared bool
	off, n uint32
	done   chan struct{} // cap 1
	timer  *time.Timer
}

var pendings = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pending{done: make(chan struct{}, 1), timer: t}
}}

// start starts a worker and loads the module in it.
func (m *Module) start(ctx context.Context) (*proc, *loadReply, error) {
	req, err := json.Marshal(loadRequest{
		Name: m.opts.Name, Wasm: m.opts.Wasm, Config: m.opts.Config, Limits: m.opts.Limits,
		CacheDir: m.opts.Runtime.CacheDir, Interrupt: m.opts.Runtime.Interrupt, Compile: m.opts.Runtime.Compile,
		IsolateCompile: m.opts.Runtime.IsolateCompile, DataLimit: m.limits.data, Slots: m.limits.slots,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("module %q: %w", m.Name, err)
	}
	p, err := spawn(&m.limits)
	if err != nil {
		return nil, nil, fmt.Errorf("module %q: worker: %w", m.Name, err)
	}
	// Bound the load: ctx, the compilation's limit and loadTimeout.
	compile := m.opts.Runtime.Compile.Timeout
	if compile == 0 {
		compile = 30 * time.Second // runtime.CompileLimits' default
	}
	timer := time.AfterFunc(compile+m.limits.InitTimeout+loadTimeout, func() { p.kill(causeTimeout, 0) })
	stop := context.AfterFunc(ctx, func() { p.kill(causeClosed, 0) })
	reply, err := p.load(req)
	timer.Stop()
	stop()
	if err != nil || reply.Err != nil {
		p.stop(0)
		if err == nil {
			return nil, nil, reply.Err.error()
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("module %q: %w", m.Name, p.deathError(err))
	}
	if m.compiled != nil {
		for _, c := range reply.Compiled {
			m.compiled(!c)
		}
	}
	p.pending, p.retired, p.started = map[uint64]*pending{}, map[uint64]*slot{}, true
	go p.read()
	go p.wait(m)
	go p.watchMemory()
	return p, reply, nil
}

// error is the load error, classified as the worker found it.
func (e *wireLoadError) error() error {
	err := errors.New(e.Message)
	var classes []error
	if e.Invalid {
		classes = append(classes, runtime.ErrInvalidModule)
	}
	if e.ConfigRejected {
		classes = append(classes, runtime.ErrConfigRejected)
	}
	if e.Compile {
		classes = append(classes, runtime.ErrCompile)
	}
	if len(classes) == 0 {
		return err
	}
	return classified{err, classes}
}

// classified is err, which errors.Is also finds to be each of classes.
type classified struct {
	err     error
	classes []error
}

func (c classified) Error() string   { return c.err.Error() }
func (c classified) Unwrap() []error { return append([]error{c.err}, c.classes...) }

// The workers are started by one goroutine, on a thread of its own that
// never ends: a worker gets SIGKILL when the thread that started it ends
// (childAttr), which must then be when this process does.
var (
	spawnOnce sync.Once
	spawns    chan func()
)

// spawn starts a worker process.
func spawn(l *limits) (*proc, error) {
	spawnOnce.Do(func() {
		spawns = make(chan func())
		go func() {
			goruntime.LockOSThread() // and never unlocked
			for f := range spawns {
				f()
			}
		}()
	})
	var (
		p   *proc
		err error
	)
	done := make(chan struct{})
	spawns <- func() {
		defer close(done)
		p, err = startProcess(l)
	}
	<-done
	return p, err
}

// startProcess starts a worker process, on the calling thread.
func startProcess(l *limits) (*proc, error) {
	exe, err := selfExecutable()
	if err != nil {
		return nil, err
	}
	ss, err := newSlots(l.slots)
	if err != nil {
		return nil, err
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		ss.close()
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		ss.close()
		return nil, err
	}
	// A batch of pipeline.Options.MaxChunk ports, and its output, in
	// one go rather than in 64 KiB pieces, each a wake-up of the reader.
	growPipe(reqW)
	growPipe(repW)
	p := &proc{w: frameWriter{w: reqW}, reqW: reqW, rf: repR, r: bufio.NewReaderSize(repR, 64<<10), limits: l, slots: ss, readerDone: make(chan struct{}), dead: make(chan struct{})}
	cmd := exec.Command(exe)
	cmd.Args = []string{filepath.Base(os.Args[0]) + "-worker"} // what ps shows
	cmd.Env = append(os.Environ(), childEnv+"="+childProtocol)
	cmd.ExtraFiles = append([]*os.File{reqR, repW}, ss.files...) // requestFD, replyFD, slotFD...
	cmd.Stderr = &p.stderr
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = childAttr()
	err = cmd.Start()
	// The worker's ends: the parent's copies would keep the pipes open
	// after the worker exits.
	reqR.Close()
	repW.Close()
	if err != nil {
		reqW.Close()
		repR.Close()
		ss.close()
		return nil, err
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	return p, nil
}

// load sends the load request and reads the reply, before the reading
// goroutine starts.
func (p *proc) load(req []byte) (*loadReply, error) {
	if err := p.send(header{kind: kindLoad}, req); err != nil {
		return nil, err
	}
	var hb [headerSize]byte
	h, err := readHeader(p.r, hb[:])
	if err != nil {
		return nil, err
	}
	if h.kind != kindLoaded {
		return nil, fmt.Errorf("worker answered the load with a frame of kind %d", h.kind)
	}
	b, err := readPayload(p.r, nil, h.size)
	if err != nil {
		return nil, err
	}
	var reply loadReply
	if err := json.Unmarshal(b, &reply); err != nil {
		return nil, fmt.Errorf("worker's load reply: %w", err)
	}
	return &reply, nil
}

// send writes a frame to the worker.
func (p *proc) send(h header, payload []byte) error { return p.w.write(h, payload) }

// request sends a call or shrink request and waits for its answer, the
// worker's death, its watchdog or ctx. A call's input goes in a slot if
// one is free (slots.go).
func (p *proc) request(ctx context.Context, m *Module, k kind, stage abi.Stage, input, dst []byte) ([]byte, error) {
	h := header{kind: k, stage: stage, id: m.ids.Add(1), slot: noSlot}
	payload := input
	var sl *slot
	if k == kindCall {
		// Without a free slot, or one that holds the input, the input
		// goes in the pipe.
		if sl = p.slots.take(); sl != nil {
			if length, size, err := sl.put(input); err == nil {
				h.slot, h.length, h.slotSize, payload = sl.index, length, size, nil
			} else {
				p.slots.release(sl)
				sl = nil
			}
		}
	}
	pc := pendings.Get().(*pending)
	pc.dst, pc.slot = dst, sl
	p.mu.Lock()
	if p.pending == nil {
		p.mu.Unlock()
		p.done(pc)
		return dst, &runtime.CallError{Module: m.Name, Stage: stage, Reason: runtime.ReasonInstantiate, Err: fmt.Errorf("%w just before the call", ErrWorkerDied)}
	}
	p.pending[h.id] = pc
	p.mu.Unlock()
	if err := p.send(h, payload); err != nil {
		// It is gone, or going: its death answers the call.
		p.kill(causeNone, 0)
	}
	pc.timer.Reset(p.limits.watchdog)
	select {
	case <-pc.done:
	case <-pc.timer.C:
		p.kill(causeTimeout, h.id)
		<-pc.done
	case <-ctx.Done():
		p.mu.Lock()
		_, waiting := p.pending[h.id]
		if waiting {
			delete(p.pending, h.id)
			if sl != nil {
				// The worker may write to the slot until it answers.
				p.retired[h.id] = sl
				pc.slot = nil
			}
		}
		p.mu.Unlock()
		if !waiting {
			<-pc.done // being answered
			break
		}
		pc.timer.Stop()
		p.done(pc)
		_ = p.send(header{kind: kindCancel, id: h.id}, nil)
		return dst, &runtime.CallError{Module: m.Name, Stage: stage, Reason: runtime.ReasonTimeout, Err: ctx.Err()}
	}
	pc.timer.Stop()
	out, err := pc.out, pc.err
	if err == nil && pc.shared {
		// Copied once: the worker may change the slot's bytes after.
		if out, err = sl.output(pc.off, pc.n, dst); err != nil {
			p.kill(causeProtocol, 0)
			err = &runtime.CallError{Reason: runtime.ReasonInvalidOutput, Err: fmt.Errorf("worker broke the protocol: %w", err)}
		}
	}
	p.done(pc)
	if err != nil {
		if ce, ok := err.(*runtime.CallError); ok {
			ce.Module, ce.Stage = m.Name, stage
		}
		return dst, err
	}
	return out, nil
}

// done frees the slot of a call that ended and puts pc back in the pool.
func (p *proc) done(pc *pending) {
	if pc.slot != nil {
		p.slots.release(pc.slot)
	}
	*pc = pending{done: pc.done, timer: pc.timer}
	pendings.Put(pc)
}

// read reads the worker's answers and hands them to their calls, until
// the worker's end of the pipe closes.
func (p *proc) read() {
	defer close(p.readerDone)
	var hb [headerSize]byte
	var scratch []byte
	for {
		h, err := readHeader(p.r, hb[:])
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.kill(causeProtocol, 0)
			}
			return
		}
		p.mu.Lock()
		pc := p.pending[h.id]
		delete(p.pending, h.id)
		var retired *slot
		if pc == nil {
			retired = p.retired[h.id]
			delete(p.retired, h.id)
		}
		p.mu.Unlock()
		if pc == nil {
			// A call given up (ctx): its answer goes nowhere, and the
			// worker is done with its slot.
			if retired != nil {
				p.slots.release(retired)
			}
			if _, err := p.r.Discard(int(h.size)); err != nil {
				return
			}
			continue
		}
		switch h.kind {
		case kindOutput:
			pc.out, err = readPayload(p.r, pc.dst, h.size)
		case kindOutputShared:
			pc.shared, pc.off, pc.n = true, h.off, h.length
			_, err = p.r.Discard(int(h.size))
		case kindFailed, kindShrunk:
			scratch, err = readPayload(p.r, scratch[:0], h.size)
			if err == nil {
				pc.err = answerError(h.kind, scratch)
			}
		default:
			err = fmt.Errorf("frame of kind %d", h.kind)
			p.kill(causeProtocol, 0)
		}
		if err != nil {
			// Cut off: its death answers the call.
			p.mu.Lock()
			if p.pending != nil {
				pc.shared = false
				p.pending[h.id] = pc
			}
			p.mu.Unlock()
			p.kill(causeNone, 0)
			return
		}
		pc.done <- struct{}{}
	}
}

// answerError is the error of a kindFailed or kindShrunk payload.
func answerError(k kind, payload []byte) error {
	if k == kindShrunk {
		if len(payload) == 0 {
			return nil
		}
		return errors.New(string(payload))
	}
	var w wireError
	if err := json.Unmarshal(payload, &w); err != nil {
		return &runtime.CallError{Reason: runtime.ReasonTrap, Err: fmt.Errorf("worker's error: %w", err)}
	}
	ce := &runtime.CallError{Reason: w.Reason, Stderr: w.Stderr}
	if w.Message != "" {
		ce.Err = errors.New(w.Message)
	}
	return ce
}

// kill kills the worker, for c (and call id); the first cause is kept.
func (p *proc) kill(c cause, id uint64) {
	p.mu.Lock()
	if p.cause == causeNone {
		p.cause, p.causeID = c, id
	}
	p.mu.Unlock()
	_ = p.cmd.Process.Kill() // an error: it exited already
}

// stop closes the worker's requests, which makes it exit once its calls
// are answered, and kills it if it has not exited within grace; it
// returns when the worker is reaped.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	if p.cause == causeNone {
		p.cause = causeClosed
	}
	p.mu.Unlock()
	p.closeRequests()
	if !p.started { // nobody waits for it
		p.kill(causeClosed, 0)
		_ = p.cmd.Wait()
		p.rf.Close()
		p.slots.close()
		return
	}
	select {
	case <-p.dead:
	case <-time.After(grace):
		p.kill(causeClosed, 0)
		<-p.dead
	}
}

// closeRequests closes the worker's requests, once no frame is being
// written; a second time only fails.
func (p *proc) closeRequests() {
	p.w.mu.Lock()
	p.reqW.Close()
	p.w.mu.Unlock()
}

// wait reaps the worker, fails the calls it did not answer and tells m.
func (p *proc) wait(m *Module) {
	err := p.cmd.Wait()
	<-p.readerDone
	p.mu.Lock()
	calls, retired := p.pending, p.retired
	p.pending, p.retired = nil, nil
	c, id := p.cause, p.causeID
	p.mu.Unlock()
	p.closeRequests()
	p.rf.Close()
	// The worker's mappings are gone: this process's go as the slots
	// come back.
	p.slots.close()
	for _, s := range retired {
		s.close()
	}
	death := p.deathError(err)
	// m first: a call that fails here and is made again at once starts
	// a new worker, rather than finding this one.
	if c != causeClosed {
		m.died(p, death)
	}
	for cid, pc := range calls {
		pc.err = p.callError(death, c, cid == id)
		pc.done <- struct{}{}
	}
	close(p.dead)
}

// callError is the error of a call the worker did not answer: it died
// of death, killed for c, for this call if own.
func (p *proc) callError(death error, c cause, own bool) error {
	switch c {
	case causeTimeout:
		if own {
			return &runtime.CallError{Reason: runtime.ReasonTimeout, Err: fmt.Errorf("no answer within %s: %w", p.limits.watchdog, death)}
		}
		return &runtime.CallError{Reason: runtime.ReasonInstantiate, Err: fmt.Errorf("%w: killed for another call past its deadline", death)}
	case causeMemory:
		return &runtime.CallError{Reason: runtime.ReasonMemory, Err: death}
	case causeClosed:
		return &runtime.CallError{Reason: runtime.ReasonInstantiate, Err: fmt.Errorf("module closed: %w", death)}
	}
	return &runtime.CallError{Reason: runtime.ReasonTrap, Err: death}
}

// deathError says how the worker ended, wrapping ErrWorkerDied.
func (p *proc) deathError(err error) error {
	p.mu.Lock()
	c := p.cause
	p.mu.Unlock()
	why := ""
	switch c {
	case causeTimeout:
		why = "killed: no answer in time"
	case causeMemory:
		why = fmt.Sprintf("killed: resident memory past %d MiB", p.limits.resident>>20)
	case causeClosed:
		why = "stopped"
	case causeProtocol:
		why = "killed: it broke the protocol"
	default:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if st, ok := exit.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
				why = "killed by SIGKILL (out of memory?)"
			}
		}
	}
	msg := fmt.Sprintf("pid %d", p.pid)
	if err != nil {
		msg += ": " + err.Error()
	} else {
		msg += ": exited"
	}
	if why != "" {
		msg += ", " + why
	}
	if line := p.stderr.firstLine(); line != "" {
		msg += " (stderr: " + line + ")"
	}
	return fmt.Errorf("%w: %s", ErrWorkerDied, msg)
}

// watchMemory kills the worker if its resident memory grows past its
// limit while it has calls in flight (an idle worker does not grow). It
// returns when the worker is dead.
func (p *proc) watchMemory() {
	t := time.NewTicker(memoryPollInterval)
	defer t.Stop()
	for {
		select {
		case <-p.dead:
			return
		case <-t.C:
		}
		p.mu.Lock()
		busy := len(p.pending) > 0
		p.mu.Unlock()
		if !busy {
			continue
		}
		if rss, _, ok := residentMemory(p.pid); ok && rss > p.limits.resident {
			p.kill(causeMemory, 0)
		}
	}
}

// limitedBuffer keeps the first 4 KiB written to it. It is safe for
// concurrent use: exec writes to it while errors read it.
type limitedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 4096 - b.b.Len(); room > 0 {
		b.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// firstLine is the first line written, "" if none.
func (b *limitedBuffer) firstLine() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	first, _, _ := strings.Cut(strings.TrimSpace(b.b.String()), "\n")
	return first
}
