//go:build linux

package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/wasp-proxy/wasp/internal/netlab"
	"github.com/wasp-proxy/wasp/test/controlplane"
)

// ProxyNode is the node wasp runs on; OtherNode runs no proxy, only pods.
const (
	ProxyNode = "node-a"
	OtherNode = "node-b"
	ZoneA     = "zone-a"
	ZoneB     = "zone-b"
	// APIPort is where the apiserver forwarder listens on 127.0.0.1 inside
	// the proxy node's namespace.
	APIPort = 6443
)

// Pods of the lab, by node. Their names are also their echo identities and
// their Kubernetes pod names.
var (
	PodsA = []string{"a-1", "a-2", "a-3"}
	PodsB = []string{"b-1", "b-2"}
)

// ClusterCIDRs are the pod ranges of the lab (netlab's address plan).
const ClusterCIDRs = "10.244.0.0/16,fd00:10:244::/48"

// Env is a running end-to-end environment.
type Env struct {
	CP      *controlplane.ControlPlane
	Client  kubernetes.Interface
	Lab     *netlab.Lab
	Cluster *netlab.Cluster
	// WaspBin is the wasp binary built from this checkout.
	WaspBin string
	// Kubeconfig is the system:kube-proxy kubeconfig as seen from inside
	// the proxy node's namespace.
	Kubeconfig string
	Dir        string

	dataplane Dataplane // UseDataplane's choice; zero: wasp's default
}

// Skip skips t unless end-to-end tests can run here, with the reason.
func Skip(t testing.TB) {
	t.Helper()
	if !controlplane.Enabled() {
		t.Skip("end-to-end test: set WASP_E2E=1 to run it")
	}
	if err := netlab.Probe(); err != nil {
		t.Skipf("end-to-end test needs network namespaces: %v", err)
	}
}

// Options change what SetupWith builds. The zero value is what Setup does.
type Options struct {
	// NoWasp skips building wasp, for tests that run other proxies only;
	// WaspBin stays empty. Optional.
	NoWasp bool
}

// Setup builds the environment; t.Cleanup tears it down.
func Setup(ctx context.Context, t testing.TB) *Env {
	t.Helper()
	return SetupWith(ctx, t, Options{})
}

// SetupWith is Setup with options.
func SetupWith(ctx context.Context, t testing.TB, o Options) *Env {
	t.Helper()
	Skip(t)
	e := &Env{Dir: t.TempDir()}

	var buildErr error
	var wg sync.WaitGroup
	if !o.NoWasp {
		wg.Add(1)
		go func() { // compile wasp while the control plane starts
			defer wg.Done()
			e.WaspBin, buildErr = BuildWasp(ctx, e.Dir)
		}()
	}
	e.CP = controlplane.Start(ctx, t)
	wg.Wait()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	var err error
	if e.Client, err = kubernetes.NewForConfig(e.CP.RESTConfig); err != nil {
		t.Fatal(err)
	}

	if e.Lab, err = netlab.New(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Lab.Close(); err != nil {
			t.Error(err)
		}
	})
	e.Cluster, err = netlab.BuildCluster(e.Lab, netlab.ClusterSpec{
		Nodes: []netlab.NodeSpec{{Name: ProxyNode, Pods: PodsA}, {Name: OtherNode, Pods: PodsB}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range e.Cluster.Nodes {
		zone := ZoneA
		if n.Name == OtherNode {
			zone = ZoneB
		}
		if err := e.createNode(ctx, n, zone); err != nil {
			t.Fatal(err)
		}
	}
	if e.Kubeconfig, err = e.ForwardAPIServer(t, ProxyNode); err != nil {
		t.Fatal(err)
	}
	return e
}

// BulkClient returns an administrator client without client-go's default
// client-side rate limit (5 requests a second, bursts of 10), for tests
// that write hundreds of objects.
func (e *Env) BulkClient() (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(e.CP.RESTConfig)
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("bulk client: %w", err)
	}
	return c, nil
}

// BuildWasp compiles cmd/wasp of this checkout into dir.
func BuildWasp(ctx context.Context, dir string) (string, error) {
	_, file, _, _ := goruntime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(dir, "wasp")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "grpcnotrace", "-o", bin, "./cmd/wasp")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build wasp: %v\n%s", err, out)
	}
	return bin, nil
}

// ProxyNS is the namespace of the node wasp runs on.
func (e *Env) ProxyNS() *netlab.NS { return e.Cluster.Node(ProxyNode).NS }

func (e *Env) createNode(ctx context.Context, n *netlab.Node, zone string) error {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
		v1.LabelTopologyZone:   zone,
		v1.LabelTopologyRegion: "region-1",
		v1.LabelHostname:       n.Name,
	}}}
	created, err := e.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	created.Status.Addresses = []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: n.IPv4.String()},
		{Type: v1.NodeInternalIP, Address: n.IPv6.String()},
		{Type: v1.NodeHostName, Address: n.Name},
	}
	if _, err := e.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", n.Name, err)
	}
	return nil
}

// ForwardAPIServer listens on 127.0.0.1:APIPort inside node's namespace
// and forwards every connection to the apiserver on the host's loopback, as
// long as t runs. It returns the path of a system:kube-proxy kubeconfig
// pointing there. Setup does this for ProxyNode; a test running a second
// proxy on another node calls it for that node.
func (e *Env) ForwardAPIServer(t testing.TB, node string) (string, error) {
	n := e.Cluster.Node(node)
	if n == nil {
		return "", fmt.Errorf("apiserver forwarder: no node %q in the lab", node)
	}
	target := strings.TrimPrefix(e.CP.Host, "https://")
	var ln net.Listener
	err := n.NS.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", APIPort))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("apiserver forwarder in %s: %w", node, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, u); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()

	cfg, err := clientcmd.LoadFromFile(e.CP.ProxyKubeconfig)
	if err != nil {
		return "", err
	}
	for _, c := range cfg.Clusters {
		c.Server = fmt.Sprintf("https://127.0.0.1:%d", APIPort)
	}
	path := filepath.Join(e.Dir, node+".kubeconfig")
	if node == ProxyNode {
		path = filepath.Join(e.Dir, "wasp.kubeconfig")
	}
	return path, clientcmd.WriteToFile(*cfg, path)
}

// Process is a process the Env started in a namespace, with its combined
// output in LogPath.
type Process struct {
	cmd     *exec.Cmd
	LogPath string
	// Started is the time just before the process was started.
	Started time.Time
	done    chan struct{}
	err     error
}

// Wasp is a running wasp process.
type Wasp = Process

// DefaultArgs are the flags every test run of wasp gets, before its own.
func (e *Env) DefaultArgs() []string {
	args := []string{
		"run",
		"--kubeconfig", e.Kubeconfig,
		"--hostname-override", ProxyNode,
		"--cluster-cidr", ClusterCIDRs,
		"--min-sync-period", "100ms",
		// The conntrack table's size is the machine's, not the node
		// namespace's: leave it (the timeouts are per namespace).
		"--conntrack-max-per-core", "0",
		"-v", "2",
	}
	if e.dataplane.Name != "" {
		args = append(args, e.dataplane.Args()...)
	}
	return args
}

// StartWasp runs wasp in the proxy node's namespace with DefaultArgs and
// extra. t.Cleanup stops it (and logs its output if t failed).
func (e *Env) StartWasp(t testing.TB, extra ...string) *Wasp {
	t.Helper()
	args := append(e.DefaultArgs(), extra...)
	return e.startWaspArgs(t, args...)
}

func (e *Env) startWaspArgs(t testing.TB, args ...string) *Wasp {
	t.Helper()
	return e.StartProcess(t, e.ProxyNS(), e.WaspBin, args...)
}

// StartProcess runs bin with args in ns (through nsenter, which execs bin:
// the process's PID is bin's own). t.Cleanup stops it (and logs the end of
// its output if t failed); Stop may end it earlier.
func (e *Env) StartProcess(t testing.TB, ns *netlab.NS, bin string, args ...string) *Process {
	t.Helper()
	name := filepath.Base(bin)
	f, err := os.CreateTemp(e.Dir, name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &Process{cmd: cmd, LogPath: f.Name(), done: make(chan struct{})}
	p.Started = time.Now()
	// Pdeathsig follows the thread that starts the process: see StartPinned.
	if err := controlplane.StartPinned(cmd, func(err error) { p.err = err; f.Close(); close(p.done) }); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", name, p.LogPath, tail(p.LogPath, 60))
		}
	})
	return p
}

// RunWasp runs wasp with args to completion in the proxy node's namespace
// and returns its combined output.
func (e *Env) RunWasp(ctx context.Context, args ...string) (string, error) {
	out, err := e.ProxyNS().Command(ctx, e.WaspBin, args...).CombinedOutput()
	return string(out), err
}

// Pid returns the process's PID.
func (w *Process) Pid() int { return w.cmd.Process.Pid }

// Stop ends the process with SIGTERM (SIGKILL after 10 s) and waits for it.
func (w *Process) Stop() {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// Exited reports whether the process has exited, and its error.
func (w *Process) Exited() (bool, error) {
	select {
	case <-w.done:
		return true, w.err
	default:
		return false, nil
	}
}

// Log returns the process's output so far.
func (w *Process) Log() string {
	b, _ := os.ReadFile(w.LogPath)
	return string(b)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Eventually calls f until it returns nil or timeout passes, and fails t
// with f's last error then.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ask sends one echo request from ns to addr:port over network, waiting at
// most timeout, and returns the identity that answered.
func Ask(ns *netlab.NS, network string, addr netip.Addr, port uint16, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return ns.Ask(ctx, network, netip.AddrPortFrom(addr, port).String())
}

// IsRefused reports whether err is a connection refused (an ICMP reject
// for UDP, a TCP RST or ICMP port-unreachable for TCP).
func IsRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// IsTimeout reports whether err is a timeout: the packets were dropped.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
