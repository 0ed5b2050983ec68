package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	"github.com/wasp-proxy/wasp/examples/cluster"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/config"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/metrics"
	"github.com/wasp-proxy/wasp/host/nodesetup"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/dataplane"
	"github.com/wasp-proxy/wasp/internal/sigstoretest"
	"github.com/wasp-proxy/wasp/modules"
)

// Test address plan: the bundled sample cluster's (examples/cluster), node-a
// at 198.51.100.1 and 2001:db8:100::1.

// eventually is a failure guard, not a timing assertion.
const eventually = 2 * time.Minute

// fakeEnv is an env over fake backends, remembering them by family, and
// fake modes, remembering which one each backend, probe and cleanup was of.
type fakeEnv struct {
	mu        sync.Mutex
	backends  map[backends.Family]*backendfake.Fake
	opts      map[backends.Family]dataplane.Opts // the options each run backend got
	built     []v1alpha1.ProxyMode               // the mode of each backend built, in order
	probed    []v1alpha1.ProxyMode               // the mode of each probe run
	cleaned   []v1alpha1.ProxyMode               // the mode of each cleanup run
	failClean backends.Family                    // the nftables cleanup of this family fails
	setups    []*v1alpha1.WaspConfiguration
	rejected  []error
}

func newFakeEnv() *fakeEnv {
	return &fakeEnv{backends: map[backends.Family]*backendfake.Fake{}, opts: map[backends.Family]dataplane.Opts{}}
}

// get returns the fake backend of fam, made on first use.
func (f *fakeEnv) get(fam backends.Family) (*backendfake.Fake, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fam == f.failClean {
		return nil, errors.New("injected failure")
	}
	b := f.backends[fam]
	if b == nil {
		b = backendfake.New()
		f.backends[fam] = b
	}
	return b, nil
}

// mode is the fake row of name: its backends are fakes, its probe and
// cleanup are recorded; the nftables row cleans up the fake backends.
func (f *fakeEnv) mode(name v1alpha1.ProxyMode) dataplane.Mode {
	record := func(to *[]v1alpha1.ProxyMode) {
		f.mu.Lock()
		defer f.mu.Unlock()
		*to = append(*to, name)
	}
	return dataplane.Mode{
		Name:    name,
		Metrics: metrics.Mode(name),
		New: func(_ context.Context, o dataplane.Opts) (backends.Backend, error) {
			record(&f.built)
			f.mu.Lock()
			f.opts[o.Family] = o
			f.mu.Unlock()
			return f.get(o.Family)
		},
		Probe: func(context.Context, string) []nodesetup.ProbeResult {
			record(&f.probed)
			return []nodesetup.ProbeResult{{Name: string(name), Outcome: nodesetup.Supported}}
		},
		CleanupLeftovers: func(ctx context.Context, _ string, families []backends.Family) error {
			record(&f.cleaned)
			if name != v1alpha1.ProxyModeNFTables {
				return nil
			}
			var errs []error
			for _, fam := range families {
				b, err := f.get(fam)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", fam, err))
					continue
				}
				errs = append(errs, b.Cleanup(ctx), b.Close())
			}
			return errors.Join(errs...)
		},
		Leftovers: string(name) + " leftovers",
	}
}

func (f *fakeEnv) env() env {
	return env{
		modes: []dataplane.Mode{f.mode(v1alpha1.ProxyModeNFTables), f.mode(v1alpha1.ProxyModeIPTables)},
		configRejected: func(_ context.Context, _ *runFlags, err error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.rejected = append(f.rejected, err)
		},
		setupNode: func(ctx context.Context, c *v1alpha1.WaspConfiguration, m dataplane.Mode) error {
			m.Probe(ctx, "")
			f.mu.Lock()
			defer f.mu.Unlock()
			f.setups = append(f.setups, c)
			return nil
		},
		interfaceAddrs: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.51.100.1"),
				netip.MustParseAddr("10.244.1.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("2001:db8:100::1")}, nil
		},
		nodeWait: 0,
	}
}

func (f *fakeEnv) backend(fam backends.Family) *backendfake.Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.backends[fam]
}

// execute runs the command tree over e with args until it returns or stop
// says so (checked every few milliseconds), then cancels it.
func execute(t *testing.T, e env, stop func() bool, args ...string) (string, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := newRootCommandWith(e)
	var out bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if stop != nil {
		go func() {
			deadline := time.Now().Add(eventually)
			for !stop() && time.Now().Before(deadline) && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
		}()
	}
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// sample writes the bundled sample cluster to a file and returns its path.
func sample(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sample.yaml")
	if err := os.WriteFile(p, cluster.Sample, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunFlagErrors: every bad flag is named, all of them at once, and
// nothing is programmed.
func TestRunFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"ipvs mode", []string{"--proxy-mode", "ipvs"}, []string{`--proxy-mode: mode: Invalid value: "ipvs": not implemented by wasp: use nftables or iptables`}},
		{"iptables masquerade bit 0", []string{"--proxy-mode", "iptables", "--iptables-masquerade-bit", "0"},
			[]string{"iptables.masqueradeBit: 0 is not supported by wasp's iptables backend: use 1 to 31"}},
		{"iptables masquerade bit 32", []string{"--proxy-mode", "iptables", "--iptables-masquerade-bit", "32"},
			[]string{"--iptables-masquerade-bit: iptables.masqueradeBit: Invalid value: 32: must be in [0,31]"}},
		{"unknown mode", []string{"--proxy-mode", "userspace"}, []string{`--proxy-mode: mode: Unsupported value: "userspace"`}},
		{"source and kubeconfig", []string{"--source", "x.yaml", "--kubeconfig", "k"}, []string{"--source and --kubeconfig"}},
		{"source and master", []string{"--source", "x.yaml", "--master", "https://a"}, []string{"--source and --master"}},
		{"negative poll", []string{"--source-poll-interval", "-1s"}, []string{"--source-poll-interval -1s: negative"}},
		{"blank hostname", []string{"--hostname-override", "  "}, []string{"--hostname-override: empty"}},
		{"bad hostname", []string{"--hostname-override", "node_a"}, []string{`--hostname-override: hostnameOverride: Invalid value: "node_a"`}},
		{"bad bind address", []string{"--bind-address", "node-a"}, []string{`--bind-address: nodeIPOverride[0]: Invalid value: "node-a": must be an IP address`}},
		{"bad cluster cidr", []string{"--cluster-cidr", "10.244.0.0/16, fd00::/129"}, []string{`--cluster-cidr: detectLocal.clusterCIDRs[1]: Invalid value: "fd00::/129": must be a CIDR`}},
		{"bad nodeport cidr", []string{"--nodeport-addresses", "10.0.0.0/8,eth0"}, []string{`--nodeport-addresses: nodePortAddresses[1]: Invalid value: "eth0": must be a CIDR or "primary"`}},
		{"primary and cidr", []string{"--nodeport-addresses", "primary,10.0.0.0/8"}, []string{`--nodeport-addresses: nodePortAddresses[0]: Invalid value: "primary": "primary" cannot be combined with CIDRs`}},
		{"sync period", []string{"--sync-period", "-1s"}, []string{`--sync-period: syncPeriod: Invalid value: "-1s": must be greater than 0`}},
		{"negative min sync", []string{"--min-sync-period", "-1s"}, []string{`--min-sync-period: minSyncPeriod: Invalid value: "-1s": must be greater than or equal to 0`}},
		{"min sync above sync", []string{"--min-sync-period", "1m", "--sync-period", "30s"}, []string{`--min-sync-period: minSyncPeriod: Invalid value: "1m0s": must not be greater than syncPeriod`}},
		{"config sync period", []string{"--config-sync-period", "-1s"}, []string{`--config-sync-period: configSyncPeriod: Invalid value: "-1s"`}},
		{"healthz without port", []string{"--healthz-bind-address", "0.0.0.0"}, []string{`--healthz-bind-address: healthzBindAddress: Invalid value: "0.0.0.0": must be IP:port`}},
		{"healthz host name", []string{"--healthz-bind-address", "localhost:10256"}, []string{`"localhost" must be an IP address`}},
		{"healthz port", []string{"--healthz-bind-address", "0.0.0.0:70000"}, []string{`port "70000" must be in [0,65535]`}},
		{"metrics", []string{"--metrics-bind-address", "127.0.0.1"}, []string{`--metrics-bind-address: metricsBindAddress: Invalid value: "127.0.0.1": must be IP:port`}},
		{"profiling", []string{"--profiling-bind-address", "::1:6060"}, []string{`--profiling-bind-address: profilingBindAddress: Invalid value: "::1:6060": must be IP:port`}},
		{"oom score adj", []string{"--oom-score-adj", "-1001"}, []string{`--oom-score-adj: linux.oomScoreAdj: Invalid value: -1001: must be in [-1000,1000]`}},
		{"conntrack", []string{"--conntrack-max-per-core", "-1", "--conntrack-min", "-1", "--conntrack-tcp-timeout-established", "-1s",
			"--conntrack-tcp-timeout-close-wait", "-1s", "--conntrack-udp-timeout", "-1s", "--conntrack-udp-timeout-stream", "-1s"},
			[]string{"--conntrack-max-per-core: linux.conntrack.maxPerCore: Invalid value: -1", "--conntrack-min: linux.conntrack.min: Invalid value: -1",
				"--conntrack-tcp-timeout-established: linux.conntrack.tcpEstablishedTimeout: ", "--conntrack-tcp-timeout-close-wait: linux.conntrack.tcpCloseWaitTimeout: ",
				"--conntrack-udp-timeout: linux.conntrack.udpTimeout: ", "--conntrack-udp-timeout-stream: linux.conntrack.udpStreamTimeout: "}},
		{"ip family", []string{"--ip-families", "ipv4,ipv5"}, []string{`--ip-families "ipv5": want ipv4 or ipv6`}},
		{"module syntax", []string{"--module", "routing"}, []string{`--module "routing": want STAGE=SOURCE`}},
		{"module stage", []string{"--module", "routing=x.wasm"}, []string{`--module: modules[0].stage: Unsupported value: "routing"`}},
		{"module builtin", []string{"--module", "topology=builtin:nope"}, []string{`--module: modules[0].source: Unsupported value: "builtin:nope"`}},
		{"every problem", []string{"--proxy-mode", "ipvs", "--cluster-cidr", "x", "--ip-families", "ip4"},
			[]string{"--proxy-mode", "--cluster-cidr", "--ip-families"}},
		{"unknown flag", []string{"--bind-adress", "0.0.0.0"}, []string{"unknown flag: --bind-adress"}},
		{"node not in source", []string{"--source", "SAMPLE", "--hostname-override", "node-z"}, []string{`node "node-z" not found`, "--ip-families"}},
		{"missing source", []string{"--source", "/does/not/exist.yaml", "--hostname-override", "node-a"}, []string{"--source: snapshot: ", "/does/not/exist.yaml"}},
		{"primary without IPv6", []string{"--source", "SAMPLE", "--hostname-override", "node-z", "--ip-families", "ipv4"},
			[]string{`--nodeport-addresses primary: node "node-z" does not exist: give CIDRs instead`}},
		{"no CIDR of a family", []string{"--source", "SAMPLE", "--hostname-override", "node-a", "--nodeport-addresses", "198.51.100.0/24"},
			[]string{"--nodeport-addresses: no IPv6 CIDR, but IPv6 is proxied: add one (::/0 for every address)"}},
		{"no local address in CIDR", []string{"--source", "SAMPLE", "--hostname-override", "node-a", "--ip-families", "ipv4", "--nodeport-addresses", "192.0.2.0/24"},
			[]string{"--nodeport-addresses: no local address in [192.0.2.0/24]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fe := newFakeEnv()
			args := append([]string{"run", "--hostname-override", "node-a"}, tc.args...)
			for i, a := range args {
				if a == "SAMPLE" {
					args[i] = sample(t)
				}
			}
			_, err := execute(t, fe.env(), nil, args...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			for fam, b := range fe.backends {
				if c := b.Counts(); c.Syncs != 0 {
					t.Errorf("%v: %d syncs after a flag error", fam, c.Syncs)
				}
			}
		})
	}
}

func TestRunFlagsConfig(t *testing.T) {
	hostname := func() (string, error) { return "Worker-1", nil }
	defaults := func() *v1alpha1.WaspConfiguration {
		c := &v1alpha1.WaspConfiguration{}
		config.Default(c)
		return c
	}
	tests := []struct {
		name string
		args []string
		want runConfig
	}{
		{"defaults", nil, runConfig{
			config: defaults(), qps: 5, burst: 10, contentType: "application/vnd.kubernetes.protobuf",
			nodeName: "worker-1", sourcePoll: time.Second, ipFamilyPolicy: "PreferDualStack", nodePortPrimary: true, mode: "nftables", masqueradeBit: 14,
			syncPeriod: 30 * time.Second, minSyncPeriod: time.Second, configSyncPeriod: 15 * time.Minute,
			healthzBindAddress: "0.0.0.0:10256", metricsBindAddress: "127.0.0.1:10249",
		}},
		{"everything", []string{
			"--kubeconfig", "/etc/k.conf", "--master", "https://10.0.0.1:6443", "--hostname-override", " Node-A ",
			"--bind-address", "2001:db8::1", "--cluster-cidr", "10.244.0.0/16, fd00:10:244::/56", "--nodeport-addresses", "10.0.0.1/8,::/0",
			"--masquerade-all", "--sync-period", "1m", "--min-sync-period", "0s", "--config-sync-period", "1h",
			"--healthz-bind-address", "", "--metrics-bind-address", "[::1]:9999", "--profiling-bind-address", "127.0.0.1:6060",
			"--ip-families", "ipv6,IPv4,ipv6", "--module", "endpoint-selection=builtin:selection", "--module", "topology=/m/t.wasm",
			"--proxy-mode", "nftables", "--cleanup", "--init-only",
		}, runConfig{
			kubeconfig: "/etc/k.conf", master: "https://10.0.0.1:6443", qps: 5, burst: 10, contentType: "application/vnd.kubernetes.protobuf",
			nodeName: "node-a", sourcePoll: time.Second, ipFamilyPolicy: "PreferDualStack",
			nodeIPs:       []netip.Addr{netip.MustParseAddr("2001:db8::1")},
			clusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
			nodePortCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::/0")},
			mode:          "nftables", masqueradeAll: true, masqueradeBit: 14, syncPeriod: time.Minute, configSyncPeriod: time.Hour,
			metricsBindAddress: "[::1]:9999", profilingBindAddress: "127.0.0.1:6060",
			families: []backends.Family{backends.IPv4, backends.IPv6},
			specs: []chain.Spec{
				{Stage: 3, Source: "builtin:selection", Limits: runtime.Limits{MemoryBytes: 256 << 20, Timeout: 2 * time.Second}},
				{Stage: 1, Source: "file:///m/t.wasm", Limits: runtime.Limits{MemoryBytes: 256 << 20, Timeout: 2 * time.Second}},
			},
			cleanup: true, initOnly: true,
		}},
		{"iptables", []string{"--proxy-mode", "iptables", "--conntrack-tcp-be-liberal", "--iptables-masquerade-bit", "12", "--iptables-localhost-nodeports"}, runConfig{
			qps: 5, burst: 10, contentType: "application/vnd.kubernetes.protobuf",
			nodeName: "worker-1", sourcePoll: time.Second, ipFamilyPolicy: "PreferDualStack",
			// iptables' default: every local address.
			nodePortCIDRs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")},
			mode:          "iptables", masqueradeBit: 12, localhostNodePorts: true, tcpBeLiberal: true,
			syncPeriod: 30 * time.Second, minSyncPeriod: time.Second, configSyncPeriod: 15 * time.Minute,
			healthzBindAddress: "0.0.0.0:10256", metricsBindAddress: "127.0.0.1:10249",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f runFlags
			cmd := &cobra.Command{}
			f.add(cmd)
			if err := cmd.Flags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.waspConfig(cmd.Flags(), func(s string) { t.Errorf("warning %q", s) })
			if err != nil {
				t.Fatal(err)
			}
			got, err := newRunConfig(cfg, &f, hostname)
			if err != nil {
				t.Fatal(err)
			}
			got.cacheDir = ""
			if tc.want.config != nil && !reflect.DeepEqual(got.config, tc.want.config) {
				t.Errorf("config\n%+v\nwant\n%+v", got.config, tc.want.config)
			}
			got.config, tc.want.config = nil, nil
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

// TestRunSource runs wasp run over the sample cluster with fake backends:
// the informers, the module chain and both families' States, as on a
// node, and the families come from the Node.
func TestRunSource(t *testing.T) {
	fe := newFakeEnv()
	synced := func() bool {
		b4, b6 := fe.backend(backends.IPv4), fe.backend(backends.IPv6)
		return b4 != nil && b6 != nil && b4.Counts().Syncs > 0 && b6.Counts().Syncs > 0
	}
	_, err := execute(t, fe.env(), synced, "run", "--source", sample(t), "--hostname-override", "node-a",
		"--cluster-cidr", "10.244.0.0/16", "--healthz-bind-address", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !synced() {
		t.Fatal("the backends never synced")
	}
	dump := fe.backend(backends.IPv4).Dump()
	for _, want := range []string{
		"node-port-addresses { 198.51.100.1 }",
		// The loadBalancerSourceRanges exception's node IP: the Node's.
		"node-ips { 198.51.100.1 }",
		"cluster-cidrs { 10.244.0.0/16 }",
		"service demo/web:http/TCP/IPv4\n  cluster-ip 10.96.0.10 tcp dport 80",
		"node-port 30080",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("the IPv4 backend lacks %q:\n%s", want, dump)
		}
	}
	dump6 := fe.backend(backends.IPv6).Dump()
	for _, want := range []string{"node-ips { 2001:db8:100::1 }", "service demo/dual:http/TCP/IPv6"} {
		if !strings.Contains(dump6, want) {
			t.Errorf("the IPv6 backend lacks %q:\n%s", want, dump6)
		}
	}
	for fam, b := range fe.backends {
		if c := b.Counts(); c.Cleanups != 0 || c.Closes != 1 {
			t.Errorf("%v: %+v; want the dataplane left in place (no cleanup) and the backend closed", fam, c)
		}
	}
}

func TestCleanup(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		fail    backends.Family
		want    []backends.Family
		wantErr string
	}{
		{"both families", []string{"cleanup"}, 0, []backends.Family{backends.IPv4, backends.IPv6}, ""},
		{"one family", []string{"cleanup", "--ip-families", "ipv6"}, 0, []backends.Family{backends.IPv6}, ""},
		{"run --cleanup", []string{"run", "--cleanup", "--hostname-override", "x"}, 0, []backends.Family{backends.IPv4, backends.IPv6}, ""},
		{"a family fails, the other is cleaned", []string{"cleanup"}, backends.IPv4, []backends.Family{backends.IPv6}, "cleanup nftables: ipv4: injected failure"},
		{"bad family", []string{"cleanup", "--ip-families", "ip6"}, 0, nil, `--ip-families "ip6"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fe := newFakeEnv()
			fe.failClean = tc.fail
			out, err := execute(t, fe.env(), nil, tc.args...)
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
			}
			if tc.want != nil {
				// Every mode cleans up, whatever the configured one, and
				// says what it removed (but for the nftables mode, when
				// it failed).
				if !slices.Equal(fe.cleaned, []v1alpha1.ProxyMode{"nftables", "iptables"}) {
					t.Errorf("modes cleaned up: %v, want nftables and iptables", fe.cleaned)
				}
				if !strings.Contains(out, "iptables: none left of iptables leftovers") || strings.Contains(out, "nftables: none left") != (tc.fail == 0) {
					t.Errorf("output %q does not say what each mode removed", out)
				}
			}
			for _, fam := range []backends.Family{backends.IPv4, backends.IPv6} {
				b := fe.backend(fam)
				cleaned := b != nil && b.Counts().Cleanups == 1 && b.Counts().Closes == 1
				want := false
				for _, w := range tc.want {
					want = want || w == fam
				}
				if cleaned != want {
					t.Errorf("family %d cleaned up and closed: %v, want %v", fam, cleaned, want)
				}
			}
		})
	}
}

// TestRunModes: the configured mode builds the backends and is the only
// one probed: its name from --proxy-mode without --config; from the file
// with it (a kube-proxy file without a mode runs iptables), where
// --proxy-mode, as every flag that sets a field, is ignored with a
// warning, as kube-proxy does.
func TestRunModes(t *testing.T) {
	kubeProxy := func(mode string) string {
		return writeFile(t, "kp.yaml", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nhealthzBindAddress: \"\"\nmetricsBindAddress: \"\"\n"+mode)
	}
	tests := []struct {
		name    string
		args    []string
		want    v1alpha1.ProxyMode
		warning string
	}{
		{"default", nil, "nftables", ""},
		{"flag", []string{"--proxy-mode", "iptables"}, "iptables", ""},
		{"flag nftables", []string{"--proxy-mode", "nftables"}, "nftables", ""},
		{"kube-proxy file without a mode", []string{"--config", kubeProxy("")}, "iptables", ""},
		{"kube-proxy file of iptables", []string{"--config", kubeProxy("mode: iptables\n")}, "iptables", ""},
		{"kube-proxy file of nftables, flag ignored", []string{"--config", kubeProxy("mode: nftables\n"), "--proxy-mode", "iptables"}, "nftables",
			"--proxy-mode is ignored: --config is given (set mode in the file)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fe := newFakeEnv()
			synced := func() bool {
				b := fe.backend(backends.IPv4)
				return b != nil && b.Counts().Syncs > 0
			}
			args := append([]string{"run", "--source", sample(t), "--hostname-override", "node-a", "--ip-families", "ipv4",
				"--healthz-bind-address", "", "--metrics-bind-address", ""}, tc.args...)
			out, err := execute(t, fe.env(), synced, args...)
			if err != nil {
				t.Fatal(err)
			}
			if !synced() {
				t.Fatal("the backend never synced")
			}
			fe.mu.Lock()
			defer fe.mu.Unlock()
			if !slices.Equal(fe.built, []v1alpha1.ProxyMode{tc.want}) || !slices.Equal(fe.probed, []v1alpha1.ProxyMode{tc.want}) {
				t.Errorf("backends built in modes %v, probes of %v; want %s alone", fe.built, fe.probed, tc.want)
			}
			// What wasp left in the other mode is removed, as upstream.
			if other := map[v1alpha1.ProxyMode]v1alpha1.ProxyMode{"nftables": "iptables", "iptables": "nftables"}[tc.want]; !slices.Equal(fe.cleaned, []v1alpha1.ProxyMode{other}) {
				t.Errorf("modes cleaned up at start: %v, want %s alone", fe.cleaned, other)
			}
			if tc.warning != "" && !strings.Contains(out, tc.warning) {
				t.Errorf("output %q lacks %q", out, tc.warning)
			}
		})
	}
}

// TestLocalhostNodePorts: IPv4 NodePorts answer on localhost in the
// iptables mode with iptables.localhostNodePorts, when nodePortAddresses
// allow 127.0.0.1 (upstream forces it off otherwise); the node setup then
// sets route_localnet.
func TestLocalhostNodePorts(t *testing.T) {
	tests := []struct {
		name string
		file string
		want bool
	}{
		{"kube-proxy default", "mode: iptables\n", true},
		{"kube-proxy, off", "mode: iptables\niptables:\n  localhostNodePorts: false\n", false},
		{"kube-proxy, CIDRs without loopback", "mode: iptables\nnodePortAddresses: [198.51.100.0/24]\n", false},
		{"kube-proxy, loopback CIDR", "mode: iptables\nnodePortAddresses: [127.0.0.0/8, 198.51.100.0/24]\n", true},
		{"kube-proxy nftables", "mode: nftables\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := config.Load([]byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" + tc.file))
			if err != nil {
				t.Fatal(err)
			}
			m, _ := newFakeEnv().env().mode(c.Mode)
			if got := nodeSetupConfig(c, m).RouteLocalnet; got != tc.want || localhostNodePorts(c) != tc.want {
				t.Errorf("route_localnet %v, localhost NodePorts %v; want %v", got, localhostNodePorts(c), tc.want)
			}
		})
	}
}

// TestNodeSetupProbesTheMode: the node setup probes the configured mode
// only, so that an iptables node without nftables passes it.
func TestNodeSetupProbesTheMode(t *testing.T) {
	for _, mode := range []v1alpha1.ProxyMode{"nftables", "iptables"} {
		fe := newFakeEnv()
		m, err := fe.env().mode(mode)
		if err != nil {
			t.Fatal(err)
		}
		c := &v1alpha1.WaspConfiguration{Mode: mode}
		config.Default(c)
		got := nodeSetupConfig(c, m).Dataplane(context.Background())
		if len(got) != 1 || got[0].Name != string(mode) || !slices.Equal(fe.probed, []v1alpha1.ProxyMode{mode}) {
			t.Errorf("%s: probes %+v of modes %v, want the %s probe alone", mode, got, fe.probed, mode)
		}
	}
}

// writeFile writes data to a new file named name and returns its path.
func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const waspFile = `apiVersion: wasp.dev/v1alpha1
kind: WaspConfiguration
hostnameOverride: file-node
syncPeriod: 45s
detectLocal:
  clusterCIDRs: [10.244.0.0/16]
`

// configFlagArgs gives every flag that sets a field of the configuration
// a valid value that differs from waspFile's.
var configFlagArgs = map[string]string{
	"kubeconfig": "/k", "bind-address": "192.0.2.1", "proxy-mode": "nftables", "sync-period": "1m",
	"min-sync-period": "2s", "config-sync-period": "1h", "cluster-cidr": "10.0.0.0/8", "nodeport-addresses": "0.0.0.0/0",
	"healthz-bind-address": "", "metrics-bind-address": "", "profiling-bind-address": "127.0.0.1:1",
	"masquerade-all": "true", "iptables-masquerade-bit": "13", "iptables-localhost-nodeports": "true", "oom-score-adj": "5", "conntrack-max-per-core": "1", "conntrack-min": "1",
	"conntrack-tcp-timeout-established": "1s", "conntrack-tcp-timeout-close-wait": "1s", "conntrack-tcp-be-liberal": "true",
	"conntrack-udp-timeout": "1s", "conntrack-udp-timeout-stream": "1s", "module": "topology=builtin:topology",
	"module-public-key": "/etc/wasp/release.pub", "module-trusted-root": "/etc/wasp/trusted_root.json",
	"module-certificate-identity": "release@example.com", "module-certificate-oidc-issuer": "https://issuer.example.com",
	"module-file-directory": "/etc/wasp/modules",
}

// loadWritten loads what --write-config-to wrote.
func loadWritten(t *testing.T, path string) *v1alpha1.WaspConfiguration {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, w, err := config.Load(data)
	if err != nil || len(w) > 0 {
		t.Fatalf("%v, warnings %q:\n%s", err, w, data)
	}
	return c
}

// TestRunConfigPrecedence: kube-proxy's rules. With --config, the flags
// that set a field are ignored, each with a warning; --hostname-override
// wins, --master, --cleanup, --init-only, --write-config-to and wasp's own
// flags apply. Without it, the flags build the configuration.
func TestRunConfigPrecedence(t *testing.T) {
	t.Run("every field flag is ignored with a warning", func(t *testing.T) {
		if len(configFlagArgs) != len(configFlags) {
			t.Fatalf("%d flags in the test, %d in configFlags", len(configFlagArgs), len(configFlags))
		}
		out := filepath.Join(t.TempDir(), "out.yaml")
		args := []string{"run", "--config", writeFile(t, "c.yaml", waspFile), "--write-config-to", out}
		for _, cf := range configFlags {
			args = append(args, "--"+cf.flag+"="+configFlagArgs[cf.flag])
		}
		stderr, err := execute(t, newFakeEnv().env(), nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		for _, cf := range configFlags {
			if want := "wasp: warning: --" + cf.flag + " is ignored: --config is given (set " + cf.field + " in the file)"; !strings.Contains(stderr, want) {
				t.Errorf("no warning %q in\n%s", want, stderr)
			}
		}
		want := &v1alpha1.WaspConfiguration{HostnameOverride: "file-node", SyncPeriod: metav1.Duration{Duration: 45 * time.Second},
			DetectLocal: v1alpha1.DetectLocalConfiguration{ClusterCIDRs: []string{"10.244.0.0/16"}}}
		config.Default(want)
		if got := loadWritten(t, out); !reflect.DeepEqual(got, want) {
			t.Errorf("wrote %+v\nwant the file's %+v", got, want)
		}
	})
	t.Run("no warning without flags", func(t *testing.T) {
		stderr, err := execute(t, newFakeEnv().env(), nil, "run", "--config", writeFile(t, "c.yaml", waspFile),
			"--write-config-to", filepath.Join(t.TempDir(), "out.yaml"))
		if err != nil || stderr != "" {
			t.Errorf("error %v, output %q", err, stderr)
		}
	})
	t.Run("hostname-override wins, trimmed and lower-cased", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out.yaml")
		stderr, err := execute(t, newFakeEnv().env(), nil, "run", "--config", writeFile(t, "c.yaml", waspFile),
			"--hostname-override", " Node-B ", "--write-config-to", out)
		if err != nil || stderr != "" {
			t.Fatalf("error %v, output %q", err, stderr)
		}
		if got := loadWritten(t, out).HostnameOverride; got != "node-b" {
			t.Errorf("hostnameOverride %q, want node-b", got)
		}
	})
	t.Run("a blank hostname-override is an error", func(t *testing.T) {
		_, err := execute(t, newFakeEnv().env(), nil, "run", "--config", writeFile(t, "c.yaml", waspFile), "--hostname-override", " ")
		if err == nil || !strings.Contains(err.Error(), "--hostname-override: empty") {
			t.Errorf("got error %v", err)
		}
	})
	t.Run("wasp --config, as kube-proxy", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out.yaml")
		if _, err := execute(t, newFakeEnv().env(), nil, "--config", writeFile(t, "c.yaml", waspFile), "--write-config-to", out); err != nil {
			t.Fatal(err)
		}
		if got := loadWritten(t, out).SyncPeriod.Duration; got != 45*time.Second {
			t.Errorf("syncPeriod %v, want the file's 45s", got)
		}
	})
	t.Run("kube-proxy's file converted", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out.yaml")
		kp := writeFile(t, "kp.yaml", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n"+
			"clusterCIDR: 10.244.0.0/16,fd00::/56\nnftables:\n  masqueradeAll: true\n  minSyncPeriod: 3s\n")
		if _, err := execute(t, newFakeEnv().env(), nil, "--config", kp, "--write-config-to", out); err != nil {
			t.Fatal(err)
		}
		got := loadWritten(t, out)
		if !got.Linux.MasqueradeAll || got.MinSyncPeriod.Duration != 3*time.Second || len(got.DetectLocal.ClusterCIDRs) != 2 {
			t.Errorf("converted to %+v", got)
		}
	})
	t.Run("the mode written out is kube-proxy's", func(t *testing.T) {
		for file, want := range map[string]v1alpha1.ProxyMode{"": "iptables", "mode: iptables\n": "iptables", "mode: nftables\n": "nftables", "mode: ipvs\n": "nftables"} {
			out := filepath.Join(t.TempDir(), "out.yaml")
			kp := writeFile(t, "kp.yaml", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"+file)
			if _, err := execute(t, newFakeEnv().env(), nil, "--config", kp, "--write-config-to", out); err != nil {
				t.Fatal(err)
			}
			if got := loadWritten(t, out).Mode; got != want {
				t.Errorf("%q: wrote mode %s, want %s", file, got, want)
			}
		}
	})
	t.Run("master applies", func(t *testing.T) {
		_, err := execute(t, newFakeEnv().env(), nil, "run", "--config", writeFile(t, "c.yaml", waspFile),
			"--source", sample(t), "--master", "https://192.0.2.1:6443")
		if err == nil || !strings.Contains(err.Error(), "--source and --master") {
			t.Errorf("got error %v, want --master taken with --config", err)
		}
	})
	t.Run("cleanup and ip-families apply", func(t *testing.T) {
		fe := newFakeEnv()
		if _, err := execute(t, fe.env(), nil, "run", "--config", writeFile(t, "c.yaml", waspFile), "--cleanup", "--ip-families", "ipv6"); err != nil {
			t.Fatal(err)
		}
		if fe.backend(backends.IPv4) != nil || fe.backend(backends.IPv6) == nil || fe.backend(backends.IPv6).Counts().Cleanups != 1 {
			t.Errorf("want IPv6 cleaned up alone")
		}
	})
	t.Run("init-only runs the node setup with the file and exits", func(t *testing.T) {
		fe := newFakeEnv()
		if _, err := execute(t, fe.env(), nil, "run", "--config", writeFile(t, "c.yaml", waspFile), "--init-only", "--oom-score-adj", "7"); err != nil {
			t.Fatal(err)
		}
		if len(fe.setups) != 1 || *fe.setups[0].Linux.OOMScoreAdj != v1alpha1.DefaultOOMScoreAdj || fe.setups[0].HostnameOverride != "file-node" {
			t.Fatalf("node setups %+v, want one with the file's configuration", fe.setups)
		}
		if len(fe.backends) != 0 {
			t.Errorf("backends opened by --init-only: %v", fe.backends)
		}
	})
	t.Run("without --config the flags build it", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out.yaml")
		args := []string{"run", "--write-config-to", out, "--hostname-override", "node-a"}
		_, pub := writeKeyPair(t, t.TempDir(), "release")
		root := writeFile(t, "trusted_root.json", string(sigstoretest.New(t).TrustedRoot(t)))
		files := map[string]string{"module-public-key": pub, "module-trusted-root": root}
		for _, cf := range configFlags {
			v, ok := files[cf.flag]
			if !ok {
				v = configFlagArgs[cf.flag]
			}
			args = append(args, "--"+cf.flag+"="+v)
		}
		stderr, err := execute(t, newFakeEnv().env(), nil, args...)
		if err != nil || stderr != "" {
			t.Fatalf("error %v, output %q", err, stderr)
		}
		got := loadWritten(t, out)
		ct := got.Linux.Conntrack
		for name, ok := range map[string]bool{
			"kubeconfig":         got.ClientConnection.Kubeconfig == "/k",
			"bind-address":       reflect.DeepEqual(got.NodeIPOverride, []string{"192.0.2.1"}),
			"sync periods":       got.SyncPeriod.Duration == time.Minute && got.MinSyncPeriod.Duration == 2*time.Second && got.ConfigSyncPeriod.Duration == time.Hour,
			"cluster-cidr":       reflect.DeepEqual(got.DetectLocal.ClusterCIDRs, []string{"10.0.0.0/8"}),
			"nodeport-addresses": reflect.DeepEqual(got.NodePortAddresses, []string{"0.0.0.0/0"}),
			"bind addresses":     *got.HealthzBindAddress == "" && *got.MetricsBindAddress == "" && got.ProfilingBindAddress == "127.0.0.1:1",
			"masquerade-all":     got.Linux.MasqueradeAll,
			"iptables":           *got.IPTables.MasqueradeBit == 13 && *got.IPTables.LocalhostNodePorts,
			"oom-score-adj":      *got.Linux.OOMScoreAdj == 5,
			"conntrack":          *ct.MaxPerCore == 1 && *ct.Min == 1 && ct.TCPEstablishedTimeout.Duration == time.Second && ct.TCPCloseWaitTimeout.Duration == time.Second && ct.TCPBeLiberal && ct.UDPTimeout.Duration == time.Second && ct.UDPStreamTimeout.Duration == time.Second,
			"module":             len(got.Modules) == 1 && got.Modules[0].Source == "builtin:topology",
			"module signatures": got.ModuleSignatures != nil && reflect.DeepEqual(got.ModuleSignatures.PublicKeys, []string{pub}) &&
				got.ModuleSignatures.Keyless != nil && got.ModuleSignatures.Keyless.TrustedRoot == root &&
				reflect.DeepEqual(got.ModuleSignatures.Keyless.Identities, []v1alpha1.CertificateIdentity{{Issuer: "https://issuer.example.com", Subject: "release@example.com"}}),
			"hostname-override":     got.HostnameOverride == "node-a",
			"module-file-directory": reflect.DeepEqual(got.ModuleFileDirectories, []string{"/etc/wasp/modules"}),
		} {
			if !ok {
				t.Errorf("%s not in the configuration: %+v", name, got)
			}
		}
	})
}

// TestRunConfigInvalid: an invalid file stops wasp with every problem, and
// nothing is programmed; configHardFail: false makes unknown fields
// warnings, never invalid values.
func TestRunConfigInvalid(t *testing.T) {
	fe := newFakeEnv()
	bad := writeFile(t, "bad.yaml", "apiVersion: wasp.dev/v1alpha1\nkind: WaspConfiguration\nfoo: 1\nmode: ipvs\nnftables:\n  masqueradeBit: 40\n")
	_, err := execute(t, fe.env(), nil, "run", "--config", bad, "--source", sample(t), "--hostname-override", "node-a")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"invalid, nothing applied:\n", "\n  foo: Forbidden: unknown field", `\n  mode: Invalid value: "ipvs"`, "\n  nftables.masqueradeBit: Invalid value: 40: must be in [0,31]"} {
		if !strings.Contains(err.Error(), strings.ReplaceAll(want, `\n`, "\n")) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if len(fe.backends) != 0 || len(fe.setups) != 0 {
		t.Errorf("something was applied: backends %v, node setups %d", fe.backends, len(fe.setups))
	}
	if len(fe.rejected) != 1 || !strings.Contains(fe.rejected[0].Error(), "nftables.masqueradeBit") {
		t.Errorf("rejections reported to the cluster: %v; want the one error", fe.rejected)
	}

	soft := writeFile(t, "soft.yaml", "apiVersion: wasp.dev/v1alpha1\nkind: WaspConfiguration\nconfigHardFail: false\nfoo: 1\n")
	stderr, err := execute(t, newFakeEnv().env(), nil, "run", "--config", soft, "--write-config-to", filepath.Join(t.TempDir(), "o.yaml"))
	if err != nil || !strings.Contains(stderr, "foo: Forbidden: unknown field (configHardFail is false, so this is ignored)") {
		t.Errorf("error %v, output %q", err, stderr)
	}
	soft = writeFile(t, "soft.yaml", "apiVersion: wasp.dev/v1alpha1\nkind: WaspConfiguration\nconfigHardFail: false\nfoo: 1\noomScoreAdj: 5\nlinux:\n  oomScoreAdj: 5000\n")
	_, err = execute(t, newFakeEnv().env(), nil, "run", "--config", soft, "--write-config-to", filepath.Join(t.TempDir(), "o.yaml"))
	if err == nil || !strings.Contains(err.Error(), "linux.oomScoreAdj: Invalid value: 5000") {
		t.Errorf("got error %v, want the invalid value fatal despite configHardFail: false", err)
	}
}

const kubeProxyFile = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clusterCIDR: 10.244.0.0/16
healthzBindAddress: 127.0.0.1:0
nftables:
  masqueradeBit: 15
`

// TestRunConfigFile runs wasp over kube-proxy's file and the sample
// cluster; a change of the file makes it exit with an error, for its
// supervisor to restart it.
func TestRunConfigFile(t *testing.T) {
	fe := newFakeEnv()
	path := writeFile(t, "config.conf", kubeProxyFile)
	synced := func() bool {
		b4, b6 := fe.backend(backends.IPv4), fe.backend(backends.IPv6)
		return b4 != nil && b6 != nil && b4.Counts().Syncs > 0 && b6.Counts().Syncs > 0
	}
	written := false
	stop := func() bool {
		if synced() && !written {
			written = true
			if err := os.WriteFile(path, []byte(kubeProxyFile+"oomScoreAdj: -1\n"), 0o644); err != nil {
				t.Error(err)
			}
		}
		return false // the change must stop it
	}
	_, err := execute(t, fe.env(), stop, "--config", path, "--source", sample(t), "--hostname-override", "node-a")
	if !written {
		t.Fatalf("the backends never synced; error %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), "--config "+path+" changed") {
		t.Fatalf("got error %v, want the change reported", err)
	}
	if dump := fe.backend(backends.IPv4).Dump(); !strings.Contains(dump, "cluster-cidrs { 10.244.0.0/16 }") {
		t.Errorf("the file's clusterCIDR is not programmed:\n%s", dump)
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	if fe.opts[backends.IPv4].MasqueradeBit != 15 || fe.opts[backends.IPv6].MasqueradeBit != 15 {
		t.Errorf("backend options %+v, want the file's masquerade bit 15", fe.opts)
	}
	if len(fe.setups) != 1 {
		t.Errorf("%d node setups, want 1", len(fe.setups))
	}
}

// TestRunModuleFailurePolicyAtStart: a configured module that does not
// load stops wasp at start, unless its failurePolicy is Builtin, in which
// case the stage starts on the builtin module.
func TestRunModuleFailurePolicyAtStart(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone.wasm")
	file := func(policy string) string {
		return writeFile(t, "config.yaml", "apiVersion: wasp.dev/v1alpha1\nkind: WaspConfiguration\nhealthzBindAddress: \"\"\nmetricsBindAddress: \"\"\n"+
			"modules:\n- stage: endpoint-selection\n  source: file://"+missing+"\n  failurePolicy: "+policy+"\n")
	}
	_, err := execute(t, newFakeEnv().env(), nil, "run", "--config", file("KeepLastGood"), "--source", sample(t), "--hostname-override", "node-a")
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("KeepLastGood: %v, want an error naming %s", err, missing)
	}

	fe := newFakeEnv()
	synced := func() bool {
		b := fe.backend(backends.IPv4)
		return b != nil && b.Counts().Syncs > 0
	}
	_, err = execute(t, fe.env(), synced, "run", "--config", file("Builtin"), "--source", sample(t), "--hostname-override", "node-a")
	if err != nil || !synced() {
		t.Fatalf("Builtin: %v (synced %v), want wasp running on the builtin module", err, synced())
	}
}

// TestRunUnsignedModuleFile: with a node-wide public key, an unsigned
// module file does not load; wasp says why and programs nothing.
func TestRunUnsignedModuleFile(t *testing.T) {
	wasm, err := modules.Wasm("selection")
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, "selection.wasm", string(wasm))
	_, pub := writeKeyPair(t, t.TempDir(), "release")
	fe := newFakeEnv()
	synced := func() bool { // wasp running: the module loaded
		b := fe.backend(backends.IPv4)
		return b != nil && b.Counts().Syncs > 0
	}
	_, err = execute(t, fe.env(), synced, "run", "--source", sample(t), "--hostname-override", "node-a",
		"--healthz-bind-address", "", "--metrics-bind-address", "",
		"--module", "endpoint-selection="+path, "--module-public-key", pub)
	if !errors.Is(err, chain.ErrUnsignedFile) {
		t.Fatalf("got %v, want ErrUnsignedFile", err)
	}
	if len(fe.backends) != 0 {
		t.Errorf("backends opened: %v", fe.backends)
	}
}
