package main

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	"github.com/wasp-proxy/wasp/examples/cluster"
	"github.com/wasp-proxy/wasp/host/chain"
)

// Test address plan: the bundled sample cluster's (examples/cluster), node-a
// at 198.51.100.1 and 2001:db8:100::1.

// eventually is a failure guard, not a timing assertion.
const eventually = 2 * time.Minute

// fakeEnv is an env over fake backends, remembering them by family.
type fakeEnv struct {
	mu        sync.Mutex
	backends  map[backends.Family]*backendfake.Fake
	failClean backends.Family // cleanup of this family fails
}

func newFakeEnv() *fakeEnv { return &fakeEnv{backends: map[backends.Family]*backendfake.Fake{}} }

func (f *fakeEnv) env() env {
	get := func(fam backends.Family) (backends.Backend, error) {
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
	return env{
		dataplane: get,
		backend:   get,
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
		{"iptables mode", []string{"--proxy-mode", "iptables"}, []string{`--proxy-mode "iptables": not implemented by wasp; use nftables`}},
		{"unknown mode", []string{"--proxy-mode", "userspace"}, []string{`--proxy-mode "userspace": unknown mode`}},
		{"source and kubeconfig", []string{"--source", "x.yaml", "--kubeconfig", "k"}, []string{"--source and --kubeconfig"}},
		{"source and master", []string{"--source", "x.yaml", "--master", "https://a"}, []string{"--source and --master"}},
		{"negative poll", []string{"--source-poll-interval", "-1s"}, []string{"--source-poll-interval -1s: negative"}},
		{"bad cluster cidr", []string{"--cluster-cidr", "10.244.0.0/16, 10.0.0.0/33"}, []string{`--cluster-cidr "10.0.0.0/33": not a CIDR`}},
		{"bad nodeport cidr", []string{"--nodeport-addresses", "10.0.0.0/8,eth0"}, []string{`--nodeport-addresses "eth0": not a CIDR or "primary"`}},
		{"primary and cidr", []string{"--nodeport-addresses", "primary,10.0.0.0/8"}, []string{`--nodeport-addresses: "primary" cannot be combined with CIDRs`}},
		{"empty nodeport addresses", []string{"--nodeport-addresses", ""}, []string{"--nodeport-addresses: empty"}},
		{"negative min sync", []string{"--min-sync-period", "-1s"}, []string{"--min-sync-period -1s: negative"}},
		{"healthz without port", []string{"--healthz-bind-address", "0.0.0.0"}, []string{`--healthz-bind-address "0.0.0.0": want IP:port`}},
		{"healthz host name", []string{"--healthz-bind-address", "localhost:10256"}, []string{`"localhost" is not an IP address`}},
		{"healthz port", []string{"--healthz-bind-address", "0.0.0.0:70000"}, []string{`port "70000": want 0 to 65535`}},
		{"ip family", []string{"--ip-families", "ipv4,ipv5"}, []string{`--ip-families "ipv5": want ipv4 or ipv6`}},
		{"module", []string{"--module", "routing=x.wasm"}, []string{`--module: module "routing=x.wasm": unknown stage "routing"`}},
		{"every problem", []string{"--proxy-mode", "ipvs", "--cluster-cidr", "x", "--ip-families", "ip4"},
			[]string{"--proxy-mode", "--cluster-cidr", "--ip-families"}},
		{"unknown flag", []string{"--bind-address", "0.0.0.0"}, []string{"unknown flag: --bind-address"}},
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
	tests := []struct {
		name string
		args []string
		want runConfig
	}{
		{"defaults", nil, runConfig{
			nodeName: "worker-1", sourcePoll: time.Second, nodePortPrimary: true, minSyncPeriod: time.Second,
			healthzBindAddress: "0.0.0.0:10256",
		}},
		{"everything", []string{
			"--kubeconfig", "/etc/k.conf", "--master", "https://10.0.0.1:6443", "--hostname-override", " Node-A ",
			"--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56", "--nodeport-addresses", "10.0.0.1/8,::/0",
			"--masquerade-all", "--min-sync-period", "5s", "--healthz-bind-address", "", "--ip-families", "ipv6,IPv4,ipv6",
			"--module", "endpoint-selection=builtin:selection", "--proxy-mode", "nftables", "--cleanup",
		}, runConfig{
			kubeconfig: "/etc/k.conf", master: "https://10.0.0.1:6443", nodeName: "node-a", sourcePoll: time.Second,
			clusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
			nodePortCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::/0")},
			masqueradeAll: true, minSyncPeriod: 5 * time.Second,
			families: []backends.Family{backends.IPv4, backends.IPv6},
			specs:    []chain.Spec{{Stage: 3, Source: "builtin:selection"}},
			cleanup:  true,
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
			got, err := f.config(hostname)
			if err != nil {
				t.Fatal(err)
			}
			got.cacheDir = ""
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestNodePortAddresses(t *testing.T) {
	node := &v1.Node{Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
		{Type: v1.NodeHostName, Address: "node-a"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.1"},
		{Type: v1.NodeInternalIP, Address: "198.51.100.1"},
		{Type: v1.NodeInternalIP, Address: "198.51.100.9"},
		{Type: v1.NodeExternalIP, Address: "2001:db8:100::1"},
	}}}
	ifAddrs := newFakeEnv().env().interfaceAddrs
	both := []backends.Family{backends.IPv4, backends.IPv6}
	tests := []struct {
		name     string
		primary  bool
		cidrs    []string
		families []backends.Family
		want     []string
	}{
		{"primary: first InternalIP, else ExternalIP", true, nil, both, []string{"198.51.100.1", "2001:db8:100::1"}},
		{"cidrs", false, []string{"198.51.100.0/24", "10.0.0.0/8", "2001:db8::/32"}, both, []string{"198.51.100.1", "10.244.1.1", "2001:db8:100::1"}},
		{"every address of a family", false, []string{"0.0.0.0/0", "2001:db8::/32"}, both, []string{"2001:db8:100::1"}},
		{"other family ignored", false, []string{"127.0.0.0/8", "2001:db8::/32"}, []backends.Family{backends.IPv4}, []string{"127.0.0.1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &runConfig{nodeName: "node-a", nodePortPrimary: tc.primary}
			for _, s := range tc.cidrs {
				c.nodePortCIDRs = append(c.nodePortCIDRs, netip.MustParsePrefix(s))
			}
			got, err := nodePortAddresses(c, node, tc.families, ifAddrs)
			if err != nil {
				t.Fatal(err)
			}
			var gotS []string
			for _, a := range got {
				gotS = append(gotS, a.String())
			}
			if !reflect.DeepEqual(gotS, tc.want) {
				t.Errorf("got %q, want %q", gotS, tc.want)
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
		"cluster-cidrs { 10.244.0.0/16 }",
		"service demo/web:http/TCP/IPv4\n  cluster-ip 10.96.0.10 tcp dport 80",
		"node-port 30080",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("the IPv4 backend lacks %q:\n%s", want, dump)
		}
	}
	if dump6 := fe.backend(backends.IPv6).Dump(); !strings.Contains(dump6, "service demo/dual:http/TCP/IPv6") {
		t.Errorf("the IPv6 backend lacks the dual-stack Service:\n%s", dump6)
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
		{"a family fails, the other is cleaned", []string{"cleanup"}, backends.IPv4, []backends.Family{backends.IPv6}, "cleanup IPv4: injected failure"},
		{"bad family", []string{"cleanup", "--ip-families", "ip6"}, 0, nil, `--ip-families "ip6"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fe := newFakeEnv()
			fe.failClean = tc.fail
			_, err := execute(t, fe.env(), nil, tc.args...)
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
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

// TestNodeFamilies: --ip-families, else the Node's primary IPs, decide
// the families.
func TestNodeFamilies(t *testing.T) {
	n := func(addrs ...string) *v1.Node {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		for _, a := range addrs {
			node.Status.Addresses = append(node.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
		}
		return node
	}
	tests := []struct {
		name    string
		flags   []backends.Family
		node    *v1.Node
		want    []backends.Family
		wantErr string
	}{
		{"flag wins", []backends.Family{backends.IPv6}, n("10.0.0.1"), []backends.Family{backends.IPv6}, ""},
		{"single stack", nil, n("10.0.0.1", "10.0.0.2"), []backends.Family{backends.IPv4}, ""},
		{"dual stack, IPv6 primary", nil, n("fd00::1", "10.0.0.1"), []backends.Family{backends.IPv4, backends.IPv6}, ""},
		{"no address", nil, n(), nil, "has no InternalIP or ExternalIP address"},
		{"no node", nil, nil, nil, "not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nodeFamilies(&runConfig{nodeName: "n", families: tc.flags}, tc.node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
