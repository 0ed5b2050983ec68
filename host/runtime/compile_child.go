package runtime

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
)

// childEnv, set in its environment, makes a process that links this
// package a compile child (serveCompile) before its main function runs.
// The value is the version of the protocol between parent and child.
const childEnv = "WASP_INTERNAL_COMPILE_CHILD"

const childProtocol = "1"

func init() {
	if v, ok := os.LookupEnv(childEnv); ok {
		if v != childProtocol {
			fmt.Fprintf(os.Stderr, "compile child: protocol %q, want %q\n", v, childProtocol)
			os.Exit(2)
		}
		yieldToParent()
		os.Exit(serveCompile(os.Stdin, os.Stderr))
	}
}

// childRequest is the first line a compile child reads from its standard
// input; the module binary follows.
type childRequest struct {
	// CacheDir is the compilation cache to compile into.
	CacheDir string `json:"cacheDir"`
	// CloseOnContextDone is the engine's setting, which is part of the
	// cache key.
	CloseOnContextDone bool `json:"closeOnContextDone"`
	// Size is the length of the binary.
	Size int `json:"size"`
	// Timeout and Memory are the limits the parent enforces; the child
	// enforces them too (a little later), in case the parent is gone.
	Timeout time.Duration `json:"timeout"`
	Memory  uint64        `json:"memory"`
}

// memoryPollInterval is how often a compile child's resident memory is
// read.
const memoryPollInterval = 20 * time.Millisecond

// A compile child stops itself childSlack past its time limit, or at a
// quarter more than its memory limit, so that its parent, if there is
// one, normally stops it first.
const childSlack = time.Second

// Exit codes of a compile child besides 0: 1 the module does not compile,
// 2 a broken request, and these.
const (
	exitTime   = 3
	exitMemory = 4
)

// limitSelf ends the compile child when it runs past its time limit or
// its resident memory past its memory limit (if it can read it), with a
// margin.
func limitSelf(timeout time.Duration, memory uint64) {
	deadline := time.Now().Add(timeout + childSlack)
	t := time.NewTicker(memoryPollInterval)
	for range t.C {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "compile child: past its time limit of %s\n", timeout)
			os.Exit(exitTime)
		}
		if rss, ok := residentBytes(os.Getpid()); ok && memory > 0 && rss > memory+memory/4 {
			fmt.Fprintf(os.Stderr, "compile child: past its memory limit of %d MiB\n", memory>>20)
			os.Exit(exitMemory)
		}
	}
}

// serveCompile is the compile child: it reads a request and a binary
// from in, compiles the binary into the request's compilation cache and
// returns the process's exit code, having written why to errOut if that
// is not 0.
func serveCompile(in io.Reader, errOut io.Writer) int {
	fail := func(code int, err error) int {
		fmt.Fprintln(errOut, err)
		return code
	}
	br := bufio.NewReader(in)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fail(2, fmt.Errorf("compile child: request: %w", err))
	}
	var req childRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return fail(2, fmt.Errorf("compile child: request: %w", err))
	}
	if req.CacheDir == "" || req.Size < 0 || req.Size > 1<<30 {
		return fail(2, fmt.Errorf("compile child: bad request %s", bytes.TrimSpace(line)))
	}
	go limitSelf(req.Timeout, req.Memory)
	wasm := make([]byte, req.Size)
	if _, err := io.ReadFull(br, wasm); err != nil {
		return fail(2, fmt.Errorf("compile child: module: %w", err))
	}
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(req.CacheDir)
	if err != nil {
		return fail(2, fmt.Errorf("compile child: compilation cache %q: %w", req.CacheDir, err))
	}
	cfg := wazero.NewRuntimeConfig().WithCompilationCache(cache).WithCloseOnContextDone(req.CloseOnContextDone)
	e := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := e.CompileModule(ctx, wasm); err != nil {
		return fail(1, err)
	}
	if err := e.Close(ctx); err != nil {
		return fail(2, fmt.Errorf("compile child: %w", err))
	}
	return 0
}

// compileInChild compiles bin in a child process (the running executable,
// started again as a compile child) into the runtime's compilation cache,
// so that compiling it in this process then only loads it from there. The
// child is killed if it runs past timeout or its resident memory grows
// past Compile.ChildMemory: unlike a compilation in this process, one in a
// child can be stopped, and what it takes is given back.
//
// A module that compiled in a child once is not compiled in one again:
// a file under the cache directory, named after the binary and the
// engine setting of the cache key, records it.
func (r *Runtime) compileInChild(ctx context.Context, bin []byte, timeout time.Duration) error {
	closeOnDone := r.cfg.Interrupt == InterruptCloseOnContextDone
	sum := sha256.Sum256(bin)
	checked := filepath.Join(r.cacheDir, "checked", fmt.Sprintf("%x-%t", sum, closeOnDone))
	if _, err := os.Stat(checked); err == nil {
		return nil
	}
	if err := r.runChild(ctx, bin, closeOnDone, timeout); err != nil {
		return err
	}
	// Only an optimisation: a module not recorded compiles in a child
	// again next time.
	if err := os.MkdirAll(filepath.Dir(checked), 0o700); err == nil {
		_ = os.WriteFile(checked, nil, 0o600)
	}
	return nil
}

// runChild compiles bin in a compile child, as compileInChild says.
func (r *Runtime) runChild(ctx context.Context, bin []byte, closeOnDone bool, timeout time.Duration) error {
	r.children.Add(1)
	req, err := json.Marshal(childRequest{CacheDir: r.cacheDir, CloseOnContextDone: closeOnDone, Size: len(bin), Timeout: timeout, Memory: r.cfg.Compile.ChildMemory})
	if err != nil {
		return err
	}
	exe, err := selfExecutable()
	if err != nil {
		return fmt.Errorf("compile child: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Args = []string{filepath.Base(os.Args[0]) + "-compile"} // what ps shows
	cmd.Env = append(os.Environ(), childEnv+"="+childProtocol)
	cmd.Stdin = io.MultiReader(bytes.NewReader(append(req, '\n')), bytes.NewReader(bin))
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = childAttr()
	// The child dies with the thread that started it (childAttr): keep
	// that thread until the child is waited for.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("compile child: %w", err)
	}
	// From here on, an expired ctx kills the child.
	overMemory := make(chan struct{})
	stopWatch := watchMemory(cmd.Process, r.cfg.Compile.ChildMemory, overMemory)
	err = cmd.Wait()
	stopWatch()
	if err == nil {
		return nil
	}
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	}
	select {
	case <-overMemory:
		code = exitMemory
	default:
	}
	switch {
	case code == exitMemory:
		return fmt.Errorf("compilation took more than %d MiB of memory", r.cfg.Compile.ChildMemory>>20)
	case code == exitTime || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("compilation did not finish within %s", timeout)
	case ctx.Err() != nil:
		return fmt.Errorf("compilation stopped: %w", ctx.Err())
	case code == 1:
		return errors.New(stderr.firstLine())
	}
	if errors.As(err, &exit) && exit.ExitCode() == -1 {
		// Killed by a signal not of this process's: most likely the
		// kernel, out of memory in the container or on the node.
		return fmt.Errorf("compile child: %w (out of memory?)", err)
	}
	return fmt.Errorf("compile child: %w: %s", err, stderr.firstLine())
}

// watchMemory kills p, and closes over, if its resident memory grows past
// limit (where it can be read). The returned function stops watching.
func watchMemory(p *os.Process, limit uint64, over chan<- struct{}) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(memoryPollInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			rss, ok := residentBytes(p.Pid)
			if ok && rss > limit {
				close(over)
				_ = p.Kill()
				return
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := 4096 - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// firstLine is the first line written, or a placeholder.
func (b *limitedBuffer) firstLine() string {
	first, _, _ := strings.Cut(strings.TrimSpace(b.String()), "\n")
	if first == "" {
		return "(no message)"
	}
	return first
}
