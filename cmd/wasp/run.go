package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/conntrack"
	"github.com/wasp-proxy/wasp/backends/nftables"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/healthcheck"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/proxy"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/snapshot"
	"github.com/wasp-proxy/wasp/host/state"
)

// env is what wasp run and wasp cleanup touch outside the process: the
// kernel's dataplane, the node's addresses, the apiserver's patience.
// Tests replace it.
type env struct {
	// dataplane returns family's nftables backend, which cleanup uses.
	dataplane func(f backends.Family) (backends.Backend, error)
	// backend returns family's backend for run: the dataplane wrapped in
	// the conntrack cleaner.
	backend func(f backends.Family) (backends.Backend, error)
	// interfaceAddrs lists the addresses of this network namespace.
	interfaceAddrs func() ([]netip.Addr, error)
	// nodeWait is how long run waits for its Node object to appear in
	// the apiserver.
	nodeWait time.Duration
}

func defaultEnv() env {
	dataplane := func(f backends.Family) (backends.Backend, error) {
		return nftables.New(nftables.Opts{Family: f})
	}
	return env{
		dataplane: dataplane,
		backend: func(f backends.Family) (backends.Backend, error) {
			nft, err := dataplane(f)
			if err != nil {
				return nil, err
			}
			ct, err := conntrack.New(nft, conntrack.Opts{Family: f})
			if err != nil {
				nft.Close()
				return nil, err
			}
			return ct, nil
		},
		interfaceAddrs: interfaceAddrs,
		nodeWait:       30 * time.Second,
	}
}

func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}

// The proxy modes kube-proxy has; wasp implements nftables.
const modeNFTables = "nftables"

var kubeProxyModes = []string{"iptables", "ipvs", "kernelspace"}

// runFlags are wasp run's flags as given.
type runFlags struct {
	kubeconfig, master, hostname string
	source                       string
	sourcePoll                   time.Duration
	clusterCIDR                  string
	nodePortAddresses            []string
	masqueradeAll                bool
	minSyncPeriod                time.Duration
	healthzBindAddress           string
	profilingBindAddress         string
	ipFamilies                   []string
	modules                      []string
	cacheDir                     string
	proxyMode                    string
	cleanup                      bool
}

// add defines the flags on cmd.
func (f *runFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path to a kubeconfig file (default: the in-cluster configuration)")
	fs.StringVar(&f.master, "master", "", "the apiserver's address, overriding the kubeconfig's")
	fs.StringVar(&f.hostname, "hostname-override", "", "this node's name (default: the host name)")
	fs.StringVar(&f.source, "source", "", "read Nodes, Services and EndpointSlices from this YAML or JSON file, or directory of them, instead of a cluster")
	fs.DurationVar(&f.sourcePoll, "source-poll-interval", snapshot.DefaultPollInterval, "how often --source is checked for changes (0: read once)")
	fs.StringVar(&f.clusterCIDR, "cluster-cidr", "", "the pod ranges, comma-separated, for local-traffic detection (traffic from outside them to a ClusterIP is masqueraded)")
	fs.StringSliceVar(&f.nodePortAddresses, "nodeport-addresses", []string{"primary"}, `where NodePorts answer: "primary" (the Node object's primary IP of each family) or CIDRs, comma-separated (0.0.0.0/0 and ::/0: every local address)`)
	fs.BoolVar(&f.masqueradeAll, "masquerade-all", false, "masquerade all traffic sent to ClusterIPs")
	fs.DurationVar(&f.minSyncPeriod, "min-sync-period", proxy.DefaultMinSyncPeriod, "the least time between two syncs after a burst of 2")
	fs.StringVar(&f.healthzBindAddress, "healthz-bind-address", healthcheck.DefaultBindAddress, `IP:port of the /healthz and /livez server ("": none)`)
	fs.StringVar(&f.profilingBindAddress, "profiling-bind-address", "", `IP:port where Go's profiles are served under /debug/pprof/ ("": off; keep it on 127.0.0.1)`)
	fs.StringSliceVar(&f.ipFamilies, "ip-families", nil, "the IP families to proxy: ipv4, ipv6 or both (default: those of the Node object's addresses)")
	fs.StringArrayVar(&f.modules, "module", nil, "STAGE=SOURCE: run a module instead of the builtin one (repeatable); SOURCE is builtin:NAME, file:///PATH or a path")
	fs.StringVar(&f.cacheDir, "cache-dir", defaultCacheDir(), `where compiled modules are cached across runs ("": no cache)`)
	fs.StringVar(&f.proxyMode, "proxy-mode", modeNFTables, "the dataplane; wasp implements nftables only")
	fs.BoolVar(&f.cleanup, "cleanup", false, "remove everything wasp programmed and exit, as wasp cleanup")
}

// runConfig is runFlags checked and parsed.
type runConfig struct {
	kubeconfig, master   string
	source               string
	sourcePoll           time.Duration
	nodeName             string
	clusterCIDRs         []netip.Prefix
	nodePortPrimary      bool           // --nodeport-addresses primary
	nodePortCIDRs        []netip.Prefix // otherwise
	masqueradeAll        bool
	minSyncPeriod        time.Duration
	healthzBindAddress   string            // "": none
	profilingBindAddress string            // "": none
	families             []backends.Family // nil: from the Node
	specs                []chain.Spec
	cacheDir             string
	cleanup              bool
}

// config checks every flag and returns every problem, each naming its
// flag. hostname is the default of --hostname-override.
func (f *runFlags) config(hostname func() (string, error)) (*runConfig, error) {
	c := &runConfig{
		kubeconfig: f.kubeconfig, master: f.master, source: f.source, sourcePoll: f.sourcePoll,
		masqueradeAll: f.masqueradeAll, minSyncPeriod: f.minSyncPeriod,
		healthzBindAddress: f.healthzBindAddress, profilingBindAddress: f.profilingBindAddress,
		cacheDir: f.cacheDir, cleanup: f.cleanup,
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch mode := f.proxyMode; {
	case mode == modeNFTables:
	case slices.Contains(kubeProxyModes, mode):
		bad("--proxy-mode %q: not implemented by wasp; use nftables", mode)
	default:
		bad("--proxy-mode %q: unknown mode; wasp implements nftables", mode)
	}

	if f.source != "" {
		for name, v := range map[string]string{"--kubeconfig": f.kubeconfig, "--master": f.master} {
			if v != "" {
				bad("--source and %s: give one or the other", name)
			}
		}
	}
	if f.sourcePoll < 0 {
		bad("--source-poll-interval %v: negative", f.sourcePoll)
	}

	c.nodeName = strings.ToLower(strings.TrimSpace(f.hostname))
	if c.nodeName == "" {
		h, err := hostname()
		if err != nil {
			bad("--hostname-override: not given, and the host name is unknown: %v", err)
		}
		c.nodeName = strings.ToLower(strings.TrimSpace(h))
	}
	if c.nodeName == "" && len(errs) == 0 {
		bad("--hostname-override: empty")
	}

	if s := strings.TrimSpace(f.clusterCIDR); s != "" {
		for _, part := range strings.Split(s, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(part))
			if err != nil {
				bad("--cluster-cidr %q: not a CIDR", strings.TrimSpace(part))
				continue
			}
			c.clusterCIDRs = append(c.clusterCIDRs, p.Masked())
		}
	}

	switch {
	case len(f.nodePortAddresses) == 1 && f.nodePortAddresses[0] == "primary":
		c.nodePortPrimary = true
	case len(f.nodePortAddresses) == 0:
		bad(`--nodeport-addresses: empty; want "primary" or CIDRs`)
	default:
		for _, s := range f.nodePortAddresses {
			if s == "primary" {
				bad(`--nodeport-addresses: "primary" cannot be combined with CIDRs`)
				continue
			}
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				bad(`--nodeport-addresses %q: not a CIDR or "primary"`, s)
				continue
			}
			c.nodePortCIDRs = append(c.nodePortCIDRs, p.Masked())
		}
	}

	if f.minSyncPeriod < 0 {
		bad("--min-sync-period %v: negative", f.minSyncPeriod)
	}

	for _, fa := range [...][2]string{{"--healthz-bind-address", f.healthzBindAddress}, {"--profiling-bind-address", f.profilingBindAddress}} {
		flag, a := fa[0], fa[1]
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			bad("%s %q: want IP:port", flag, a)
			continue
		}
		if _, err := netip.ParseAddr(host); host != "" && err != nil {
			bad("%s %q: %q is not an IP address", flag, a, host)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			bad("%s %q: port %q: want 0 to 65535", flag, a, port)
		}
	}

	fams, err := parseIPFamilies(f.ipFamilies)
	if err != nil {
		errs = append(errs, err)
	}
	c.families = fams

	for _, m := range f.modules {
		s, err := chain.ParseSpec(m)
		if err != nil {
			bad("--module: %w", err)
			continue
		}
		c.specs = append(c.specs, s)
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// parseIPFamilies parses --ip-families, sorted, without duplicates.
func parseIPFamilies(vals []string) ([]backends.Family, error) {
	var (
		out  []backends.Family
		errs []error
	)
	for _, s := range vals {
		var fam backends.Family
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "ipv4":
			fam = backends.IPv4
		case "ipv6":
			fam = backends.IPv6
		default:
			errs = append(errs, fmt.Errorf("--ip-families %q: want ipv4 or ipv6", s))
			continue
		}
		if !slices.Contains(out, fam) {
			out = append(out, fam)
		}
	}
	slices.Sort(out)
	return out, errors.Join(errs...)
}

func newRunCommand(e env) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the proxy: program this node's dataplane from a cluster or a snapshot",
		Long: `run is wasp's main job, kube-proxy's replacement. It watches Services,
EndpointSlices, ServiceCIDRs and its Node, runs the module chain over every
service port, and programs nftables (table "wasp", one per IP family) until
SIGTERM or SIGINT. On exit the dataplane stays in place, so that traffic keeps
flowing while wasp restarts; wasp cleanup removes it.

The cluster is the apiserver of --kubeconfig or --master, or the in-cluster
configuration when neither is given. With --source, the objects are read from
files instead and served to the same informers through an in-memory client:
edit a Service in the file and the dataplane follows.`,
		Example: `  wasp run --kubeconfig /etc/kubernetes/proxy.conf --cluster-cidr 10.244.0.0/16
  wasp run --source cluster.yaml --hostname-override node-a --cluster-cidr 10.244.0.0/16
  wasp run --module endpoint-selection=/etc/wasp/zone-spillover.wasm
  wasp run --cleanup`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.config(os.Hostname)
			if err != nil {
				return err
			}
			if c.cleanup {
				return cleanup(cmd.Context(), e, c.families)
			}
			return runProxy(cmd.Context(), e, c)
		},
	}
	f.add(cmd)
	return cmd
}

// runProxy runs the proxy until ctx is done.
func runProxy(ctx context.Context, e env, c *runConfig) error {
	logger := klog.FromContext(ctx).WithValues("node", c.nodeName)
	ctx = klog.NewContext(ctx, logger)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: every goroutine below stops with ctx
	goRun := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}

	mem := setMemoryPolicy(os.Getenv, cgroupMemoryLimit)
	logger.V(2).Info("Memory policy", "gcPercent", mem.gcPercent, "gcPercentFromGOGC", mem.gcFromEnv,
		"memoryLimitMiB", mem.limit>>20, "memoryLimitFrom", mem.limitSource)
	if c.profilingBindAddress != "" {
		goRun(func() { serveProfiling(ctx, c.profilingBindAddress) })
	}

	client, src, err := newClient(c)
	if err != nil {
		return err
	}
	wait := e.nodeWait
	if src != nil {
		wait = 0 // the snapshot has it or not
	}
	node, err := getNode(ctx, client, c.nodeName, wait)
	if err != nil {
		return err
	}
	families, err := nodeFamilies(c, node)
	if err != nil {
		return err
	}
	npAddrs, err := nodePortAddresses(c, node, families, e.interfaceAddrs)
	if err != nil {
		return err
	}

	rt, err := runtime.New(runtime.Config{CacheDir: c.cacheDir})
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))
	ch, err := chain.Load(ctx, rt, c.specs)
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM while modules were compiling or instantiating: the
			// interrupted load is no module error.
			klog.FromContext(ctx).Info("Stopped during start-up; nothing was programmed")
			return nil
		}
		return err
	}
	defer ch.Close()

	bes := map[backends.Family]backends.Backend{}
	defer func() {
		for f, b := range bes {
			if err := b.Close(); err != nil {
				logger.Error(err, "Closing the backend failed", "ipFamily", familyName(f))
			}
		}
	}()
	for _, f := range families {
		b, err := e.backend(f)
		if err != nil {
			return fmt.Errorf("%s: %w", familyName(f), err)
		}
		bes[f] = b
	}

	opts := proxy.Opts{
		NodeName: c.nodeName,
		Client:   client,
		Pipeline: pipeline.New(pipeline.Options{Modules: ch.PipelineModules()}),
		Backends: bes,
		State: state.Options{
			NodePortAddresses: npAddrs,
			ClusterCIDRs:      c.clusterCIDRs,
			MasqueradeAll:     c.masqueradeAll,
		},
		MinSyncPeriod: c.minSyncPeriod,
		AfterFullSync: func() { freeOSMemory(ctx) },
	}
	// The health tracker always runs: the Services' health check node
	// ports need it even when /healthz is not served.
	hs, err := healthcheck.NewProxyServer(healthcheck.ProxyOpts{
		// Upstream: twice the sync period (30 s), which is wasp's retry
		// period.
		HealthTimeout: 2 * proxy.DefaultRetryPeriod,
		BindAddress:   c.healthzBindAddress,
	})
	if err != nil {
		return err
	}
	// Upstream marks every family updated when its loop starts.
	for _, f := range families {
		kf, _ := state.KubernetesFamily(f)
		hs.Updated(kf)
	}
	opts.Health = proxyHealth{hs}
	if c.healthzBindAddress != "" {
		goRun(func() { serveHealthz(ctx, hs) })
	}
	ss, err := healthcheck.NewServiceServer(healthcheck.ServiceOpts{Proxy: hs, Addresses: npAddrs})
	if err != nil {
		return err
	}
	defer ss.Close(context.WithoutCancel(ctx))
	opts.ServiceHealth = serviceHealth{ctx: ctx, s: ss}
	p, err := proxy.New(opts)
	if err != nil {
		return err
	}
	if src != nil {
		goRun(func() { src.Run(ctx) })
	}

	var names []string
	for _, f := range families {
		names = append(names, familyName(f))
	}
	logger.Info("Starting wasp", "version", version, "ipFamilies", names, "nodePortAddresses", npAddrs,
		"clusterCIDRs", c.clusterCIDRs, "modules", ch.Sources[1:])
	p.Run(ctx)
	logger.Info("Stopped; the dataplane stays in place (wasp cleanup removes it)")
	return nil
}

// newClient returns the clientset of the cluster, or of the snapshot
// source with the Source itself.
func newClient(c *runConfig) (kubernetes.Interface, *snapshot.Source, error) {
	if c.source != "" {
		src, err := snapshot.New(snapshot.Opts{Path: c.source, PollInterval: c.sourcePoll})
		if err != nil {
			return nil, nil, fmt.Errorf("--source: %w", err)
		}
		return src.Client(), src, nil
	}
	var (
		cfg *rest.Config
		err error
	)
	if c.master == "" && c.kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, nil, fmt.Errorf("no cluster: give --kubeconfig, --master or --source (in-cluster configuration: %w)", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags(c.master, c.kubeconfig); err != nil {
		return nil, nil, fmt.Errorf("--kubeconfig %q --master %q: %w", c.kubeconfig, c.master, err)
	}
	cfg.UserAgent = "wasp/" + version
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("apiserver client: %w", err)
	}
	return client, nil, nil
}

// getNode returns the Node called name, waiting up to wait for it to
// appear; nil if it does not.
func getNode(ctx context.Context, client kubernetes.Interface, name string, wait time.Duration) (*v1.Node, error) {
	logger := klog.FromContext(ctx)
	deadline := time.Now().Add(wait)
	for {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return node, nil
		}
		if !time.Now().Before(deadline) {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("get node %q: %w", name, err)
		}
		logger.Info("Waiting for the Node object", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// nodeIPs returns the Node's primary IP of each family, as upstream: the
// first InternalIP of the family, else the first ExternalIP.
func nodeIPs(node *v1.Node) map[backends.Family]netip.Addr {
	out := map[backends.Family]netip.Addr{}
	if node == nil {
		return out
	}
	for _, typ := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if a.Type != typ || err != nil {
				continue
			}
			f := backends.IPv6
			if ip.Unmap().Is4() {
				f, ip = backends.IPv4, ip.Unmap()
			}
			if _, ok := out[f]; !ok {
				out[f] = ip
			}
		}
	}
	return out
}

// nodeFamilies returns the families to proxy: --ip-families, or those of
// the Node's primary IPs.
func nodeFamilies(c *runConfig, node *v1.Node) ([]backends.Family, error) {
	if len(c.families) > 0 {
		return c.families, nil
	}
	var fams []backends.Family
	for f := range nodeIPs(node) {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	if len(fams) == 0 {
		if node == nil {
			return nil, fmt.Errorf("node %q not found, so its IP families are unknown: set --ip-families (or --hostname-override to the right name)", c.nodeName)
		}
		return nil, fmt.Errorf("node %q has no InternalIP or ExternalIP address, so its IP families are unknown: set --ip-families", c.nodeName)
	}
	return fams, nil
}

// nodePortAddresses resolves --nodeport-addresses to the addresses of
// state.Options (none for a family means every local address).
func nodePortAddresses(c *runConfig, node *v1.Node, families []backends.Family, ifAddrs func() ([]netip.Addr, error)) ([]netip.Addr, error) {
	var out []netip.Addr
	if c.nodePortPrimary {
		ips := nodeIPs(node)
		for _, f := range families {
			ip, ok := ips[f]
			if !ok {
				what := "has no " + familyName(f) + " address"
				if node == nil {
					what = "does not exist"
				}
				return nil, fmt.Errorf("--nodeport-addresses primary: node %q %s: give CIDRs instead", c.nodeName, what)
			}
			out = append(out, ip)
		}
		return out, nil
	}
	local, err := ifAddrs()
	if err != nil {
		return nil, fmt.Errorf("--nodeport-addresses: list local addresses: %w", err)
	}
	for _, f := range families {
		var cidrs []netip.Prefix
		all := false
		for _, p := range c.nodePortCIDRs {
			if is6 := p.Addr().Is6(); is6 == (f == backends.IPv6) {
				cidrs = append(cidrs, p)
				all = all || p.Bits() == 0
			}
		}
		switch {
		case all:
			continue // no address of f: every local one
		case len(cidrs) == 0:
			// The State cannot say "no NodePort for this family".
			return nil, fmt.Errorf("--nodeport-addresses: no %s CIDR, but %s is proxied: add one (%s for every address)",
				familyName(f), familyName(f), map[bool]string{false: "0.0.0.0/0", true: "::/0"}[f == backends.IPv6])
		}
		n := len(out)
		for _, a := range local {
			for _, p := range cidrs {
				if p.Contains(a.Unmap()) || p.Contains(a) {
					out = append(out, a.Unmap())
					break
				}
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("--nodeport-addresses: no local address in %v", cidrs)
		}
	}
	return out, nil
}

// serveHealthz serves /healthz and /livez until ctx is done, retrying
// every 5 s when it cannot listen, as upstream.
func serveHealthz(ctx context.Context, hs *healthcheck.ProxyServer) {
	logger := klog.FromContext(ctx)
	for {
		if err := hs.Run(ctx); err != nil {
			logger.Error(err, "Health server failed; retrying in 5s")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// proxyHealth adapts a healthcheck.ProxyServer to proxy.Health.
type proxyHealth struct{ s *healthcheck.ProxyServer }

func (h proxyHealth) QueuedUpdate(f backends.Family) {
	if kf, ok := state.KubernetesFamily(f); ok {
		h.s.QueuedUpdate(kf)
	}
}

func (h proxyHealth) Updated(f backends.Family) {
	if kf, ok := state.KubernetesFamily(f); ok {
		h.s.Updated(kf)
	}
}

func (h proxyHealth) SyncNode(n *v1.Node) { h.s.SyncNode(n) }

// serviceHealth adapts a healthcheck.ServiceServer to proxy.ServiceHealth,
// logging the ports it could not open (it retries them next sync).
type serviceHealth struct {
	ctx context.Context
	s   *healthcheck.ServiceServer
}

func (h serviceHealth) SyncServices(ports map[types.NamespacedName]uint16) {
	if err := h.s.SyncServices(h.ctx, ports); err != nil {
		klog.FromContext(h.ctx).Error(err, "Opening health check node ports failed; retrying on the next sync")
	}
}

func (h serviceHealth) SyncEndpoints(local map[types.NamespacedName]int) { h.s.SyncEndpoints(local) }

func familyName(f backends.Family) string {
	if kf, ok := state.KubernetesFamily(f); ok {
		return string(kf)
	}
	return fmt.Sprintf("family %d", f)
}
