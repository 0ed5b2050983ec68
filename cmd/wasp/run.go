package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/host/catalog"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/events"
	"github.com/wasp-proxy/wasp/host/healthcheck"
	"github.com/wasp-proxy/wasp/host/metrics"
	"github.com/wasp-proxy/wasp/host/node"
	"github.com/wasp-proxy/wasp/host/nodesetup"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/proxy"
	"github.com/wasp-proxy/wasp/host/reload"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/host/snapshot"
	"github.com/wasp-proxy/wasp/host/state"
	"github.com/wasp-proxy/wasp/internal/dataplane"
)

// env is what wasp run and wasp cleanup touch outside the process: the
// kernel's dataplane, the node's addresses, the apiserver's patience.
// Tests replace it.
type env struct {
	// modes is the table of proxy modes (internal/dataplane): run builds
	// its backends with the configured mode's row, cleanup runs every
	// row's cleanup.
	modes []dataplane.Mode
	// interfaceAddrs lists the addresses of this network namespace.
	interfaceAddrs func() ([]netip.Addr, error)
	// nodeWait is how long run waits for its Node object to appear in
	// the apiserver.
	nodeWait time.Duration
	// setupNode is the privileged node setup (sysctls such as conntrack's
	// limits and timeouts, oom_score_adj, the probe of mode), run before
	// the proxy starts and alone by --init-only. nil: there is none yet.
	setupNode func(ctx context.Context, c *v1alpha1.WaspConfiguration, mode dataplane.Mode) error
	// configRejected tells the cluster that wasp refuses its
	// configuration, err, before it exits. Best effort. nil: nobody.
	configRejected func(ctx context.Context, f *runFlags, err error)
}

func defaultEnv() env {
	return env{
		modes:          dataplane.Modes,
		interfaceAddrs: node.InterfaceAddrs,
		nodeWait:       30 * time.Second,
		setupNode:      setupNodeKernel,
		configRejected: sendConfigRejected,
	}
}

// mode returns the row of e.modes of name.
func (e env) mode(name v1alpha1.ProxyMode) (dataplane.Mode, error) {
	for _, m := range e.modes {
		if m.Name == name {
			return m, nil
		}
	}
	return dataplane.Mode{}, fmt.Errorf("proxy mode %q: not built into wasp", name)
}

// runFlags are wasp run's flags as given.
type runFlags struct {
	configFile, writeConfigTo    string
	kubeconfig, master, hostname string
	bindAddress                  string
	source                       string
	sourcePoll                   time.Duration
	clusterCIDR                  string
	nodePortAddresses            []string
	masqueradeAll                bool
	iptablesMasqueradeBit        int32
	iptablesLocalhostNodePorts   bool
	syncPeriod, minSyncPeriod    time.Duration
	configSyncPeriod             time.Duration
	healthzBindAddress           string
	metricsBindAddress           string
	profilingBindAddress         string
	ipFamilies                   []string
	modules                      []string
	moduleKeys                   []string // --module-public-key
	moduleTrustedRoot            string
	moduleFileDirs               []string // --module-file-directory
	moduleIdentity, moduleIssuer string
	cacheDir                     string
	moduleExecution              string
	proxyMode                    string
	oomScoreAdj                  int32
	conntrackMaxPerCore          int32
	conntrackMin                 int32
	conntrackTCPEstablished      time.Duration
	conntrackTCPCloseWait        time.Duration
	conntrackTCPBeLiberal        bool
	conntrackUDPTimeout          time.Duration
	conntrackUDPStreamTimeout    time.Duration
	cleanup, initOnly            bool
}

// add defines the flags on cmd. Their defaults are the configuration's
// (package v1alpha1); a flag only sets its field when it is given.
func (f *runFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.configFile, "config", "", "a WaspConfiguration or kube-proxy's KubeProxyConfiguration file (docs/config.md); most flags are then ignored")
	fs.StringVar(&f.writeConfigTo, "write-config-to", "", "write the configuration (converted and defaulted) to this file as YAML, and exit")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path to a kubeconfig file (default: the in-cluster configuration)")
	fs.StringVar(&f.master, "master", "", "the apiserver's address, overriding the kubeconfig's")
	fs.StringVar(&f.hostname, "hostname-override", "", "this node's name (default: the host name); wins over --config's")
	fs.StringVar(&f.bindAddress, "bind-address", "0.0.0.0", "this node's primary IP, instead of its Node object's (0.0.0.0 or ::: no override); no socket is bound to it")
	fs.StringVar(&f.source, "source", "", "read Nodes, Services and EndpointSlices from this YAML or JSON file, or directory of them, instead of a cluster")
	fs.DurationVar(&f.sourcePoll, "source-poll-interval", snapshot.DefaultPollInterval, "how often --source is checked for changes (0: read once)")
	fs.StringVar(&f.clusterCIDR, "cluster-cidr", "", "the pod ranges, comma-separated, for local-traffic detection (traffic from outside them to a ClusterIP is masqueraded)")
	fs.StringSliceVar(&f.nodePortAddresses, "nodeport-addresses", []string{v1alpha1.NodePortAddressesPrimary}, `where NodePorts answer: "primary" (the Node object's primary IP of each family) or CIDRs, comma-separated (0.0.0.0/0 and ::/0: every local address)`)
	fs.BoolVar(&f.masqueradeAll, "masquerade-all", false, "masquerade all traffic sent to ClusterIPs")
	fs.Int32Var(&f.iptablesMasqueradeBit, "iptables-masquerade-bit", backends.DefaultMasqueradeBit, "iptables mode: the bit of the packet mark that asks for masquerading, 1 to 31")
	fs.BoolVar(&f.iptablesLocalhostNodePorts, "iptables-localhost-nodeports", false, "iptables mode: IPv4 NodePorts answer on 127.0.0.0/8 too (sets route_localnet), when --nodeport-addresses allow it (default false, KEP-784's; kube-proxy's flag defaults to true)")
	fs.DurationVar(&f.syncPeriod, "sync-period", v1alpha1.DefaultSyncPeriod, "how long after a failed sync it is retried, and how often the dataplane is checked for objects changed behind wasp's back; /healthz fails after twice this without a sync")
	fs.DurationVar(&f.minSyncPeriod, "min-sync-period", v1alpha1.DefaultMinSyncPeriod, "the least time between two syncs after a burst of 2 (0: sync on every change)")
	fs.DurationVar(&f.configSyncPeriod, "config-sync-period", v1alpha1.DefaultConfigSyncPeriod, "how often the informers resync from their cache")
	fs.StringVar(&f.healthzBindAddress, "healthz-bind-address", v1alpha1.DefaultHealthzBindAddress, `IP:port of the /healthz and /livez server ("": none)`)
	fs.StringVar(&f.metricsBindAddress, "metrics-bind-address", v1alpha1.DefaultMetricsBindAddress, `IP:port of the /metrics server ("": none)`)
	fs.StringVar(&f.profilingBindAddress, "profiling-bind-address", "", `IP:port where Go's profiles are served under /debug/pprof/ ("": off; keep it on 127.0.0.1)`)
	fs.StringSliceVar(&f.ipFamilies, "ip-families", nil, "the IP families to proxy: ipv4, ipv6 or both (default: as ipFamilyPolicy says, from the node's primary IPs); also with --config")
	fs.StringArrayVar(&f.modules, "module", nil, "STAGE=SOURCE: run a module instead of the builtin one (repeatable); SOURCE is builtin:NAME, file:///PATH, oci://REPO@sha256:DIGEST or a path")
	fs.StringArrayVar(&f.moduleKeys, "module-public-key", nil, "PEM public key file: every oci:// module must carry a signature by one of these keys, or a keyless one --module-certificate-identity trusts (repeatable)")
	fs.StringArrayVar(&f.moduleFileDirs, "module-file-directory", nil, "directory of the node whose files ServiceProxyModules may name (file:// sources, key and trusted root files); none: they may name no file (repeatable)")
	fs.StringVar(&f.moduleTrustedRoot, "module-trusted-root", "", "Sigstore trusted root (trusted_root.json) for keyless module signatures")
	fs.StringVar(&f.moduleIdentity, "module-certificate-identity", "", "keyless: the identity (email or URI) whose signature every oci:// module must carry; with --module-certificate-oidc-issuer and --module-trusted-root")
	fs.StringVar(&f.moduleIssuer, "module-certificate-oidc-issuer", "", "keyless: that identity's OIDC issuer")
	fs.StringVar(&f.cacheDir, "cache-dir", defaultCacheDir(), `where compiled modules are cached across runs ("": no cache)`)
	fs.StringVar(&f.moduleExecution, "module-execution", moduleExecutionWorker, `where modules that are not builtin run: "worker", a process of each module's own, which nothing the module does can stall or crash wasp through; or "in-process", faster and without that guarantee (docs/reliability.md)`)
	fs.StringVar(&f.proxyMode, "proxy-mode", string(v1alpha1.DefaultMode), "the dataplane: nftables or iptables (with --config, the file's mode)")
	fs.Int32Var(&f.oomScoreAdj, "oom-score-adj", v1alpha1.DefaultOOMScoreAdj, "the oom_score_adj of the wasp process, in [-1000, 1000]")
	fs.Int32Var(&f.conntrackMaxPerCore, "conntrack-max-per-core", v1alpha1.DefaultConntrackMaxPerCore, "nf_conntrack_max per CPU core (0: leave the limit as it is, and ignore --conntrack-min)")
	fs.Int32Var(&f.conntrackMin, "conntrack-min", v1alpha1.DefaultConntrackMin, "the least nf_conntrack_max, whatever --conntrack-max-per-core gives")
	fs.DurationVar(&f.conntrackTCPEstablished, "conntrack-tcp-timeout-established", v1alpha1.DefaultTCPEstablishedTimeout, "idle timeout of established TCP connections (0: leave as it is)")
	fs.DurationVar(&f.conntrackTCPCloseWait, "conntrack-tcp-timeout-close-wait", v1alpha1.DefaultTCPCloseWaitTimeout, "timeout of TCP connections in CLOSE_WAIT (0: leave as it is)")
	fs.BoolVar(&f.conntrackTCPBeLiberal, "conntrack-tcp-be-liberal", false, "set nf_conntrack_tcp_be_liberal: out-of-window TCP packets are not marked INVALID")
	fs.DurationVar(&f.conntrackUDPTimeout, "conntrack-udp-timeout", 0, "idle timeout of UNREPLIED UDP connections (0: leave as it is)")
	fs.DurationVar(&f.conntrackUDPStreamTimeout, "conntrack-udp-timeout-stream", 0, "idle timeout of ASSURED UDP connections (0: leave as it is)")
	fs.BoolVar(&f.cleanup, "cleanup", false, "remove everything wasp programmed and exit, as wasp cleanup")
	fs.BoolVar(&f.initOnly, "init-only", false, "do the privileged node setup (sysctls, oom_score_adj) and exit")
}

// runConfig is what wasp run needs: the valid configuration, parsed, and
// the flags that are not part of it.
type runConfig struct {
	// config is the whole configuration, for the node setup.
	config               *v1alpha1.WaspConfiguration
	kubeconfig, master   string
	qps                  float32
	burst                int
	contentType          string
	source               string
	sourcePoll           time.Duration
	nodeName             string
	nodeIPs              []netip.Addr // nodeIPOverride; nil: the Node's
	ipFamilyPolicy       v1alpha1.IPFamilyPolicy
	clusterCIDRs         []netip.Prefix
	nodePortPrimary      bool           // nodePortAddresses [primary]
	nodePortCIDRs        []netip.Prefix // otherwise
	mode                 v1alpha1.ProxyMode
	masqueradeAll        bool
	masqueradeBit        int  // of the mode's section
	localhostNodePorts   bool // iptables
	tcpBeLiberal         bool // the node sets nf_conntrack_tcp_be_liberal
	syncPeriod           time.Duration
	minSyncPeriod        time.Duration
	configSyncPeriod     time.Duration     // not applied yet: the informers do not resync
	healthzBindAddress   string            // "": none
	metricsBindAddress   string            // "": none; served by host/metrics once wired here
	enableProfiling      bool              // /debug/pprof/ on the metrics server, once wired
	profilingBindAddress string            // "": none
	families             []backends.Family // --ip-families; nil: by ipFamilyPolicy
	specs                []chain.Spec
	moduleSignatures     []oci.SignaturePolicy // node-wide, for every oci:// module
	cacheDir             string
	// modulesInProcess: --module-execution=in-process.
	modulesInProcess  bool
	cleanup, initOnly bool
}

// The values of --module-execution.
const (
	moduleExecutionWorker    = "worker"
	moduleExecutionInProcess = "in-process"
)

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

// nodeConfig says how run resolves the node's addresses.
func (c *runConfig) nodeConfig() *node.Config {
	return &node.Config{Name: c.nodeName, Override: c.nodeIPs, Policy: c.ipFamilyPolicy, IPFamilies: c.families,
		NodePortPrimary: c.nodePortPrimary, NodePortCIDRs: c.nodePortCIDRs}
}

func newRunCommand(e env) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the proxy: program this node's dataplane from a cluster or a snapshot",
		Long: `run is wasp's main job, kube-proxy's replacement. It watches Services,
EndpointSlices, ServiceCIDRs and its Node, runs the module chain over every
service port, and programs the dataplane of the configured mode until
SIGTERM or SIGINT: nftables (table "wasp", one per IP family; wasp's
default) or iptables (WASP- chains, kube-proxy's default mode, and what a
kube-proxy configuration without a mode runs). On exit the dataplane stays in place, so that traffic keeps
flowing while wasp restarts; wasp cleanup removes it.

The configuration is the file of --config (wasp's WaspConfiguration, or
kube-proxy's KubeProxyConfiguration as it is), or else the flags, which take
kube-proxy's names; with --config, the flags that set a field of it are
ignored, but for --hostname-override (docs/config.md). wasp exits with an
error when that file changes, to be restarted with it.

The cluster is the apiserver of --kubeconfig or --master, or the in-cluster
configuration when neither is given. With --source, the objects are read from
files instead and served to the same informers through an in-memory client:
edit a Service in the file and the dataplane follows.`,
		Example: `  wasp run --config /var/lib/kube-proxy/config.conf --hostname-override "$NODE_NAME"
  wasp run --kubeconfig /etc/kubernetes/proxy.conf --cluster-cidr 10.244.0.0/16
  wasp run --source cluster.yaml --hostname-override node-a --cluster-cidr 10.244.0.0/16
  wasp run --module endpoint-selection=/etc/wasp/zone-spillover.wasm
  wasp run --config kube-proxy.yaml --write-config-to wasp.yaml
  wasp run --cleanup`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, e) },
	}
	f.add(cmd)
	return cmd
}

// actAsRun makes root run the proxy as run does when it is given flags,
// as kube-proxy is run (kube-proxy --config FILE ...); without flags it
// prints its help.
func actAsRun(root *cobra.Command, e env) {
	var f runFlags
	f.add(root)
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		given := false // but for -v
		cmd.LocalNonPersistentFlags().VisitAll(func(fl *pflag.Flag) { given = given || fl.Changed })
		if !given {
			return cmd.Help()
		}
		return f.run(cmd, e)
	}
}

// run is wasp run: the configuration, then --write-config-to, --cleanup,
// --init-only or the proxy.
func (f *runFlags) run(cmd *cobra.Command, e env) error {
	ctx := cmd.Context()
	warn := func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), "wasp: warning:", s) }
	cfg, err := f.waspConfig(cmd.Flags(), warn)
	if err != nil {
		if e.configRejected != nil && f.writeConfigTo == "" {
			e.configRejected(ctx, f, err)
		}
		return err
	}
	if f.writeConfigTo != "" {
		return writeConfig(cfg, f.writeConfigTo)
	}
	c, err := newRunConfig(cfg, f, os.Hostname)
	if err != nil {
		return err
	}
	if c.cleanup {
		return cleanup(ctx, cmd.OutOrStdout(), e, c.families)
	}
	m, err := e.mode(c.mode)
	if err != nil {
		return err
	}
	if err := setupNode(ctx, e, cfg, m); err != nil || c.initOnly {
		return err
	}
	if f.configFile == "" {
		return runProxy(ctx, e, c, m)
	}

	wait, err := watchConfigFile(f.configFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan error, 1)
	go func() {
		err := wait(ctx)
		changed <- err
		if err != nil {
			cancel()
		}
	}()
	err = runProxy(ctx, e, c, m)
	cancel()
	if werr := <-changed; werr != nil {
		return werr
	}
	return err
}

// sendConfigRejected sends the ConfigRejected Event about this node to
// the cluster of the command line's --kubeconfig or --master, or the
// in-cluster one (the file's own clientConnection is not trusted: it is
// part of what was rejected), within a few seconds, so that a pod that
// crash-loops on a bad ConfigMap says why where operators look.
func sendConfigRejected(ctx context.Context, f *runFlags, rejected error) {
	logger := klog.FromContext(ctx)
	if f.source != "" {
		return
	}
	node := strings.ToLower(strings.TrimSpace(f.hostname))
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return
		}
		node = strings.ToLower(h)
	}
	client, _, err := newClient(&runConfig{kubeconfig: f.kubeconfig, master: f.master})
	if err != nil {
		logger.V(2).Info("No Event for the rejected configuration", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := events.SendConfigRejected(ctx, client, node, rejected); err != nil {
		logger.V(2).Info("No Event for the rejected configuration", "err", err)
	}
}

// setupNodeKernel is the node setup of a real node: kube-proxy's
// conntrack sysctls and the kernel probes of mode and conntrack
// (host/nodesetup), then the process's oom_score_adj. The report goes to
// the log (and, with --init-only, that is all wasp does).
func setupNodeKernel(ctx context.Context, c *v1alpha1.WaspConfiguration, mode dataplane.Mode) error {
	logger := klog.FromContext(ctx)
	r, err := nodesetup.Run(ctx, nodeSetupConfig(c, mode))
	logger.Info("Node setup\n" + r.String())
	if err != nil {
		return err
	}
	if c.Linux.OOMScoreAdj != nil {
		// As upstream: a failure (no CAP_SYS_RESOURCE to lower it) is
		// logged, not fatal.
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(int(*c.Linux.OOMScoreAdj))), 0); err != nil {
			logger.Info("Warning: oom_score_adj not set", "value", *c.Linux.OOMScoreAdj, "err", err)
		}
	}
	return nil
}

// nodeSetupConfig is the node setup of c: its conntrack settings, the
// probes of mode only (an iptables node need not pass nftables' probes),
// and route_localnet for the iptables mode's localhost NodePorts, which a
// proxy without a writable /proc/sys could not set.
func nodeSetupConfig(c *v1alpha1.WaspConfiguration, mode dataplane.Mode) nodesetup.Config {
	return nodesetup.Config{
		Conntrack:     conntrackSettings(&c.Linux.Conntrack),
		Dataplane:     func(ctx context.Context) []nodesetup.ProbeResult { return mode.Probe(ctx, "") },
		RouteLocalnet: localhostNodePorts(c),
	}
}

// localhostNodePorts reports whether c has IPv4 NodePorts answer on
// 127.0.0.0/8: the iptables mode with iptables.localhostNodePorts, when
// nodePortAddresses allow an IPv4 loopback address, as upstream.
func localhostNodePorts(c *v1alpha1.WaspConfiguration) bool {
	if c.Mode != v1alpha1.ProxyModeIPTables || c.IPTables.LocalhostNodePorts == nil || !*c.IPTables.LocalhostNodePorts {
		return false
	}
	for _, s := range c.NodePortAddresses {
		if p, err := netip.ParsePrefix(s); err == nil && p.Contains(netip.MustParseAddr("127.0.0.1")) {
			return true
		}
	}
	return false
}

// conntrackSettings converts the config's conntrack section; unset means
// unchanged (0).
func conntrackSettings(c *v1alpha1.ConntrackConfiguration) nodesetup.Conntrack {
	ct := nodesetup.Conntrack{
		TCPBeLiberal:     c.TCPBeLiberal,
		UDPTimeout:       c.UDPTimeout.Duration,
		UDPStreamTimeout: c.UDPStreamTimeout.Duration,
	}
	if c.MaxPerCore != nil {
		ct.MaxPerCore = int(*c.MaxPerCore)
	}
	if c.Min != nil {
		ct.Min = int(*c.Min)
	}
	if c.TCPEstablishedTimeout != nil {
		ct.TCPEstablishedTimeout = c.TCPEstablishedTimeout.Duration
	}
	if c.TCPCloseWaitTimeout != nil {
		ct.TCPCloseWaitTimeout = c.TCPCloseWaitTimeout.Duration
	}
	return ct
}

// setupNode runs e's node setup for mode, if there is one.
func setupNode(ctx context.Context, e env, c *v1alpha1.WaspConfiguration, mode dataplane.Mode) error {
	if e.setupNode == nil {
		klog.FromContext(ctx).V(2).Info("No node setup to do (sysctls, oom_score_adj are left as they are)")
		return nil
	}
	if err := e.setupNode(ctx, c, mode); err != nil {
		return fmt.Errorf("node setup: %w", err)
	}
	return nil
}

// runProxy runs the proxy of mode until ctx is done.
func runProxy(ctx context.Context, e env, c *runConfig, mode dataplane.Mode) error {
	logger := klog.FromContext(ctx).WithValues("node", c.nodeName, "mode", mode.Name)
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
	n, err := node.Get(ctx, client, c.nodeName, wait)
	if err != nil {
		return err
	}
	nc := c.nodeConfig()
	families, err := nc.Families(n)
	if err != nil {
		return err
	}
	npAddrs, err := nc.NodePortAddresses(n, families, e.interfaceAddrs)
	if err != nil {
		return err
	}
	nodeAddrs := nc.PrimaryIPs(n, families)

	mx, err := metrics.NewWith(metrics.Options{Mode: mode.Metrics, Families: families})
	if err != nil {
		return err
	}
	rtConfig := runtime.Config{CacheDir: c.cacheDir, Compiled: mx.ModuleCompiled, IsolateCompile: true}
	rt, err := runtime.New(rtConfig)
	if err != nil && c.cacheDir != "" {
		// A cache that cannot be used (it is not private to wasp, or not
		// writable) costs compile time, not the node's Services.
		klog.FromContext(ctx).Error(err, "Not caching compiled modules", "cacheDir", c.cacheDir)
		rtConfig.CacheDir = ""
		rt, err = runtime.New(rtConfig)
	}
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))
	// The stages left to their builtin module run it natively: the same
	// decisions without its machine code and instances (RATIONALE.md).
	// The others run in worker processes, unless told otherwise
	// (docs/reliability.md, "Where module code runs").
	loader := chain.Loader{Runtime: rt, Observer: mx.Modules(), NativeBuiltins: true}
	if !c.modulesInProcess {
		loader.Workers = &rtConfig
	}
	ch, err := reload.LoadStart(ctx, loader, c.config, c.specs)
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM while modules were compiling or instantiating: the
			// interrupted load is no module error.
			klog.FromContext(ctx).Info("Stopped during start-up; nothing was programmed")
			return nil
		}
		return err
	}
	rl := reload.New(rt, c.specs, ch)
	rl.Signatures, rl.FileDirs, rl.NativeBuiltins, rl.Workers = c.moduleSignatures, c.config.ModuleFileDirectories, true, loader.Workers
	defer rl.Close()

	mx.SetChain(ch)
	if c.metricsBindAddress != "" {
		goRun(func() { mx.Serve(ctx, c.metricsBindAddress) })
	}
	ev := events.New(client, c.nodeName)
	defer ev.Close()

	bes := map[backends.Family]backends.Backend{}
	defer func() {
		for f, b := range bes {
			if err := b.Close(); err != nil {
				logger.Error(err, "Closing the backend failed", "ipFamily", familyName(f))
			}
		}
	}()
	cleanupOtherModes(ctx, e, mode)
	for _, f := range families {
		b, err := mode.New(ctx, dataplane.Opts{Family: f, MasqueradeBit: c.masqueradeBit, LocalhostNodePorts: c.localhostNodePorts,
			TCPBeLiberal: c.tcpBeLiberal, Conntrack: mx.Conntrack()})
		if err != nil {
			return fmt.Errorf("%s: %w", familyName(f), err)
		}
		bes[f] = b
	}

	minSync := c.minSyncPeriod
	if minSync == 0 {
		// proxy.Opts takes 0 for its default; 1ns is "sync on every
		// change".
		minSync = time.Nanosecond
	}
	opts := proxy.Opts{
		NodeName: c.nodeName,
		Client:   client,
		Pipeline: pipeline.New(pipeline.Options{
			Modules:  ch.PipelineModules(),
			Policies: ch.Policies,
			Observer: pipeline.Observers(mx.Pipeline(), ev.Pipeline()),
		}),
		Backends: bes,
		State: state.Options{
			NodePortAddresses: npAddrs,
			NodeIPs:           nodeAddrs,
			ClusterCIDRs:      c.clusterCIDRs,
			MasqueradeAll:     c.masqueradeAll,
		},
		MinSyncPeriod: minSync,
		RetryPeriod:   c.syncPeriod,
		// Upstream resyncs every sync period and repairs drift with a
		// full resync hourly; wasp checks for drift every sync period.
		DriftCheckPeriod: c.syncPeriod,
		AfterFullSync:    func() { freeOSMemory(ctx) },
		Metrics:          mx.Proxy(),
	}
	if nc.ReadsLocalAddresses() {
		// Upstream resolves them at every sync, periodic ones included.
		opts.AddressCheckPeriod = c.syncPeriod
	}
	// The health tracker always runs: the Services' health check node
	// ports need it even when /healthz is not served.
	hs, err := healthcheck.NewProxyServer(healthcheck.ProxyOpts{
		// Upstream: twice the sync period, which is wasp's retry period.
		HealthTimeout: 2 * c.syncPeriod,
		BindAddress:   c.healthzBindAddress,
		Observer:      mx.Health(),
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
	// The Node's addresses, and the local ones CIDRs select, are resolved
	// again when they change, not only now; the health check node ports
	// move with the NodePorts.
	resolve := nc.Resolver(families, e.interfaceAddrs)
	opts.NodeAddresses = func(n *v1.Node) ([]netip.Addr, []netip.Addr, error) {
		ips, nps, err := resolve(n)
		if err == nil {
			ss.SetAddresses(ctx, nps)
		}
		return ips, nps, err
	}
	p, err := proxy.New(opts)
	if err != nil {
		return err
	}
	if src != nil {
		goRun(func() { src.Run(ctx) })
	}
	goRun(func() { releaseWhenIdle(ctx, func() uint64 { return p.Stats().Syncs }) })
	rl.Swap, rl.Loaded = p.SetModules, mx.SetChain
	rl.Reloaded, rl.LoadFailed = mx.ModuleReload, ev.ModuleLoadFailed
	rl.Observer = mx.Modules()
	goRun(func() { rl.Run(ctx, reload.Period) })
	if src == nil {
		goRun(func() { watchCatalog(ctx, c, client, rl, ev) })
	}

	var names []string
	for _, f := range families {
		names = append(names, familyName(f))
	}
	logger.Info("Starting wasp", "version", version, "ipFamilies", names, "nodeIPs", nodeAddrs, "nodePortAddresses", npAddrs,
		"clusterCIDRs", c.clusterCIDRs, "modules", ch.Sources[1:])
	p.Run(ctx)
	logger.Info("Stopped; the dataplane stays in place (wasp cleanup removes it)")
	return nil
}

// cleanupOtherModes removes what wasp left behind in every mode but mode,
// of both families, as upstream does when it starts: a node moved from one
// mode to the other must not keep the old mode's rules, which would still
// catch its traffic. Only wasp's own objects are touched; failures are
// logged, not fatal.
func cleanupOtherModes(ctx context.Context, e env, mode dataplane.Mode) {
	for _, m := range e.modes {
		if m.Name == mode.Name {
			continue
		}
		if err := m.CleanupLeftovers(ctx, "", []backends.Family{backends.IPv4, backends.IPv6}); err != nil {
			klog.FromContext(ctx).Error(err, "Removing what wasp left in another mode failed", "otherMode", m.Name)
		}
	}
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
	cfg, err := restConfig(c)
	if err != nil {
		return nil, nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("apiserver client: %w", err)
	}
	return client, nil, nil
}

// restConfig is the apiserver access of c: --kubeconfig, --master or the
// in-cluster configuration.
func restConfig(c *runConfig) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if c.master == "" && c.kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("no cluster: give --kubeconfig, --master or --source (in-cluster configuration: %w)", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags(c.master, c.kubeconfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %q --master %q: %w", c.kubeconfig, c.master, err)
	}
	cfg.UserAgent = "wasp/" + version
	cfg.QPS, cfg.Burst, cfg.ContentType = c.qps, c.burst, c.contentType
	return cfg, nil
}

// watchCatalog follows the cluster's ServiceProxyModules for this node,
// when the apiserver serves them, handing each change to rl.
func watchCatalog(ctx context.Context, c *runConfig, client kubernetes.Interface, rl *reload.Reloader, ev *events.Recorder) {
	logger := klog.FromContext(ctx)
	served, err := catalog.Served(ctx, client, 30*time.Second)
	if err != nil || !served {
		logger.Info("ServiceProxyModules are not served; modules come from the configuration only", "err", err)
		return
	}
	cfg, err := restConfig(c)
	if err != nil {
		logger.Error(err, "ServiceProxyModules not watched")
		return
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		logger.Error(err, "ServiceProxyModules not watched")
		return
	}
	// Set before the first choice reaches rl, through w.
	rl.Status = catalog.StatusWriter{Dynamic: dyn, NodeName: c.nodeName}.Set
	w := catalog.NewWatcher(catalog.WatcherOpts{
		Dynamic: dyn, Client: client, NodeName: c.nodeName,
		OnChange: func(choice map[abi.Stage]catalog.Choice) {
			var objs []string
			for _, ch := range choice {
				objs = append(objs, ch.Object)
			}
			slices.Sort(objs)
			logger.Info("ServiceProxyModules chosen for this node", "objects", objs)
			rl.SetCatalog(choice)
		},
		OnInvalid: func(_ string, err error) { ev.ConfigRejected(err) },
	})
	if err := w.Run(ctx); err != nil && ctx.Err() == nil {
		logger.Error(err, "Watching ServiceProxyModules stopped")
	}
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
