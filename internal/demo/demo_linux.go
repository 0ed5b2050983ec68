//go:build linux

package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wasp-proxy/wasp/examples/demo"
	"github.com/wasp-proxy/wasp/host/objects"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// teardownTimeout bounds the teardown, which runs also after an interrupt.
const teardownTimeout = 30 * time.Second

// Run runs the demo. It needs root; without it, it fails at once.
func Run(ctx context.Context, opts Opts) (err error) {
	if opts.Wasp == "" || opts.Out == nil {
		return errors.New("demo: wasp and out: required")
	}
	if opts.Requests <= 0 {
		opts.Requests = DefaultRequests
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if os.Geteuid() != 0 {
		return errors.New("demo: needs root, to create network namespaces and program their dataplane: run make build && sudo bin/wasp demo")
	}
	if err := netlab.Probe(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return fmt.Errorf("demo: nsenter (util-linux) runs wasp inside the lab: %w", err)
	}
	out := opts.Out

	tmp, err := os.MkdirTemp("", "wasp-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	source := filepath.Join(tmp, "cluster.yaml")
	if err := os.WriteFile(source, demo.Cluster, 0o644); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("demo: %w", err)
	}

	fmt.Fprintln(out, "Building the lab: node-a (pods web-1, web-2), node-b (pod web-3) and a client, each in its own network namespace")
	lab, err := netlab.New()
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("demo: %w", err)
	}
	var proc *proxyProc
	defer func() {
		// Whatever happened, and even if ctx is done: leave nothing.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
		defer cancel()
		fmt.Fprintln(out, "\nTearing down: stopping wasp, wasp cleanup in node-a, deleting the namespaces")
		if terr := teardown(tctx, opts, lab, proc, tmp); terr != nil {
			err = errors.Join(err, terr)
			return
		}
		fmt.Fprintln(out, "Done: no process, rule, namespace or file of the demo is left.")
	}()
	c, err := netlab.BuildCluster(lab, netlab.ClusterSpec{
		Nodes: []netlab.NodeSpec{
			{Name: proxyNode, Pods: []string{"web-1", "web-2"}},
			{Name: "node-b", Pods: []string{"web-3"}},
		},
		EchoPorts: []uint16{echoPort},
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	node := c.Node(proxyNode)

	args := []string{"run", "--source", source, "--hostname-override", proxyNode,
		"--cluster-cidr", clusterCIDR, "--healthz-bind-address", "127.0.0.1:10256",
		// The conntrack table's size is the host's, not the lab's: leave it.
		"--conntrack-max-per-core", "0"}
	for _, m := range opts.Modules {
		args = append(args, "--module", m)
	}
	dataplane := "dataplane"
	if opts.ProxyMode != "" {
		args = append(args, "--proxy-mode", opts.ProxyMode)
		dataplane = opts.ProxyMode
	}
	fmt.Fprintf(out, "Starting wasp in node-a over the bundled cluster (examples/demo/cluster.yaml):\n  wasp %s\n", strings.Join(args, " "))
	start := time.Now()
	proc, err = startProxy(node.NS, opts, args)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, c, proc, opts.ReadyTimeout, func(string) bool { return true }); err != nil {
		return err
	}
	fmt.Fprintf(out, "wasp programmed node-a's %s in %.1fs\n\n", dataplane, time.Since(start).Seconds())

	ts := targets()
	tallies := make([]tally, len(ts))
	for i, t := range ts {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if tallies[i], err = ask(ctx, out, c, t, opts.Requests); err != nil {
			return err
		}
	}

	// Edit the snapshot: the dataplane follows, through the same watch.
	fmt.Fprintln(out, "\nEditing the snapshot: web's EndpointSlice now lists web-3 only")
	if err := editSnapshot(source); err != nil {
		return err
	}
	if err := proc.waitLog(ctx, "Snapshot changed", opts.ReadyTimeout); err != nil {
		return err
	}
	onlyWeb3 := func(pod string) bool { return pod == "web-3" }
	if err := waitReady(ctx, c, proc, opts.ReadyTimeout, onlyWeb3); err != nil {
		return err
	}
	edited := target{"client", "ClusterIP, edited", "tcp", "10.96.0.10:80", []string{"web-3"}, "web-3 only (after the edit)"}
	tl, err := ask(ctx, out, c, edited, opts.Requests/2)
	if err != nil {
		return err
	}
	ts, tallies = append(ts, edited), append(tallies, tl)
	return summary(out, ts, tallies)
}

// ask sends n requests to t, printing one line per answer.
func ask(ctx context.Context, out io.Writer, c *netlab.Cluster, t target, n int) (tally, error) {
	from := c.Client.NS
	if t.from == proxyNode {
		from = c.Node(proxyNode).NS
	}
	tl := tally{byPod: map[string]int{}}
	for range n {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		pod, err := from.Ask(actx, t.network, t.addr)
		cancel()
		if ctx.Err() != nil {
			return tl, fmt.Errorf("demo: interrupted: %w", ctx.Err())
		}
		if err != nil {
			tl.failed++
			fmt.Fprintf(out, "from %-6s %s -> no response: %v\n", t.from, t, err)
			continue
		}
		tl.byPod[pod]++
		fmt.Fprintf(out, "from %-6s %s -> response from pod %s\n", t.from, t, pod)
	}
	return tl, nil
}

// waitReady waits until the ClusterIP answers the client six times in a
// row from pods ok accepts: the proxy has programmed (or reprogrammed) the
// dataplane.
func waitReady(ctx context.Context, c *netlab.Cluster, p *proxyProc, timeout time.Duration, ok func(pod string) bool) error {
	deadline := time.Now().Add(timeout)
	var last error
	for good := 0; good < 6; {
		if err := p.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: the ClusterIP 10.96.0.10:80 was not programmed within %v (last: %v); the proxy's log ends with:\n%s",
				timeout, last, p.tail(30))
		}
		actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		pod, err := c.Client.NS.Ask(actx, "tcp", "10.96.0.10:80")
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("demo: interrupted: %w", ctx.Err())
		}
		switch {
		case err != nil:
			good, last = 0, err
		case !ok(pod):
			good, last = 0, fmt.Errorf("answered by %s", pod)
		default:
			good++
			continue
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// editSnapshot rewrites the snapshot with web's EndpointSlice reduced to
// web-3, atomically so the proxy never reads half a file.
func editSnapshot(path string) error {
	objs, err := objects.Decode(bytes.NewReader(demo.Cluster), "examples/demo/cluster.yaml")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	for _, s := range objs.EndpointSlices {
		if s.Name != "web-abcde" {
			continue
		}
		eps := s.Endpoints[:0]
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Name == "web-3" {
				eps = append(eps, e)
			}
		}
		s.Endpoints = eps
	}
	// objects.Decode reads concatenated JSON objects.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, o := range objs.Nodes {
		o.APIVersion, o.Kind = "v1", "Node"
		if err := enc.Encode(o); err != nil {
			return err
		}
	}
	for _, o := range objs.Services {
		o.APIVersion, o.Kind = "v1", "Service"
		if err := enc.Encode(o); err != nil {
			return err
		}
	}
	for _, o := range objs.EndpointSlices {
		o.APIVersion, o.Kind = "discovery.k8s.io/v1", "EndpointSlice"
		if err := enc.Encode(o); err != nil {
			return err
		}
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// teardown stops the proxy, removes its tables, closes the lab and
// removes tmp, trying each whatever the others did.
func teardown(ctx context.Context, opts Opts, lab *netlab.Lab, p *proxyProc, tmp string) error {
	var errs []error
	if p != nil {
		if err := p.stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
		// The namespace's deletion would take the tables with it; wasp
		// cleanup shows that they can also be removed from a live node.
		if outp, err := p.ns.Command(ctx, opts.Wasp, "cleanup").CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("demo: wasp cleanup in node-a: %w: %s", err, outp))
		}
	}
	if err := lab.Close(); err != nil {
		errs = append(errs, fmt.Errorf("demo: %w", err))
	}
	if err := os.RemoveAll(tmp); err != nil {
		errs = append(errs, fmt.Errorf("demo: %w", err))
	}
	return errors.Join(errs...)
}

// proxyProc is `wasp run` running inside a namespace.
type proxyProc struct {
	ns   *netlab.NS
	cmd  *exec.Cmd
	log  *logBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

// startProxy starts wasp with args inside ns.
func startProxy(ns *netlab.NS, opts Opts, args []string) (*proxyProc, error) {
	p := &proxyProc{ns: ns, log: &logBuffer{copy: opts.ProxyLog}, done: make(chan struct{})}
	// Not CommandContext: an interrupt stops the proxy through stop, with
	// SIGTERM, as a kubelet would.
	p.cmd = ns.Command(context.Background(), opts.Wasp, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	// If the demo dies without its teardown, the proxy dies too.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child ends,
		// not the process: keep this thread until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- fmt.Errorf("demo: start wasp in node-a: %w", err)
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// exited returns an error with the end of the log if the proxy has exited.
func (p *proxyProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("demo: wasp exited (%v); its log ends with:\n%s", p.err, p.tail(30))
	default:
		return nil
	}
}

// waitLog waits until the proxy's log has s.
func (p *proxyProc) waitLog(ctx context.Context, s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !p.log.contains(s) {
		if err := p.exited(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("demo: interrupted: %w", ctx.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: the proxy did not log %q within %v; its log ends with:\n%s", s, timeout, p.tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// stop sends SIGTERM and waits for the proxy to exit, killing it after
// timeout.
func (p *proxyProc) stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("demo: wasp did not stop within %v of SIGTERM; killed", timeout)
	}
}

// tail returns the last n lines of the proxy's log.
func (p *proxyProc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// logBuffer keeps a process's output, safe for concurrent use, and copies
// it to copy if set.
type logBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	copy io.Writer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.copy != nil {
		_, _ = b.copy.Write(p)
	}
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Contains(b.buf.Bytes(), []byte(s))
}
