//go:build linux

package nodesetup

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/internal/netlab"
)

// Kernel tests run Run in a throwaway network namespace of a netlab lab,
// where the conntrack timeouts, be_liberal and route_localnet have their
// own values. nf_conntrack_max and the hash table size are global: these
// tests never change them (raising them on the test machine would last
// beyond the test, and resizing the hash table rehashes every connection
// of the host); the fake covers their writes, and the kernel tests check
// that a namespace cannot change them and that the initial namespace
// leaves limits that are already large enough alone.

// kernelNS returns a fresh network namespace, or skips the test with the
// reason it cannot have one.
func kernelNS(t *testing.T) *netlab.NS {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel test: skipped in -short mode")
	}
	ns, err := netlab.NewForTest(t).AddNS("setup")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// readIn reads the settings' values inside ns, or in the current
// namespace if ns is nil.
func readIn(t *testing.T, ns *netlab.NS, ss ...setting) map[string]string {
	t.Helper()
	path := ""
	if ns != nil {
		path = ns.Path()
	}
	f := &osFiles{netns: path}
	out := map[string]string{}
	for _, s := range ss {
		v, err := f.read(s.path)
		if err != nil {
			t.Fatal(err)
		}
		out[s.name] = v
	}
	return out
}

var perNamespace = []setting{settingTCPEstablished, settingTCPCloseWait, settingTCPBeLiberal, settingUDPTimeout, settingUDPStream, settingRouteLocalnet}

// TestKernelPerNamespaceSettings: Run writes the per-namespace settings in
// the namespace it is given, reads them back there, and leaves the
// host's as they were.
func TestKernelPerNamespaceSettings(t *testing.T) {
	ns := kernelNS(t)
	host := readIn(t, nil, perNamespace...)
	before := readIn(t, ns, perNamespace...)

	// Values neither the namespace nor the host has: one more second
	// than either.
	pick := func(s setting) time.Duration {
		a, _ := strconv.Atoi(host[s.name])
		b, _ := strconv.Atoi(before[s.name])
		return time.Duration(max(a, b)+1) * time.Second
	}
	c := Config{NetNS: ns.Path(), RouteLocalnet: true, Conntrack: Conntrack{
		TCPEstablishedTimeout: pick(settingTCPEstablished),
		TCPCloseWaitTimeout:   pick(settingTCPCloseWait),
		TCPBeLiberal:          true,
		UDPTimeout:            pick(settingUDPTimeout),
		UDPStreamTimeout:      pick(settingUDPStream),
	}}
	if before[settingTCPBeLiberal.name] != "0" || before[settingRouteLocalnet.name] != "0" {
		t.Fatalf("a fresh namespace has %v", before)
	}
	_, ctx := ktesting.NewTestContext(t)
	r, err := Run(ctx, c)
	if err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	want := map[string]string{
		settingTCPEstablished.name: strconv.Itoa(int(c.Conntrack.TCPEstablishedTimeout / time.Second)),
		settingTCPCloseWait.name:   strconv.Itoa(int(c.Conntrack.TCPCloseWaitTimeout / time.Second)),
		settingTCPBeLiberal.name:   "1",
		settingUDPTimeout.name:     strconv.Itoa(int(c.Conntrack.UDPTimeout / time.Second)),
		settingUDPStream.name:      strconv.Itoa(int(c.Conntrack.UDPStreamTimeout / time.Second)),
		settingRouteLocalnet.name:  "1",
	}
	for name, v := range readIn(t, ns, perNamespace...) {
		if v != want[name] {
			t.Errorf("namespace: %s = %s, want %s", name, v, want[name])
		}
	}
	for _, s := range r.Settings {
		if s.Action != Written || s.Before != before[s.Name] {
			t.Errorf("report: %+v, want written over %s", s, before[s.Name])
		}
	}
	for name, v := range readIn(t, nil, perNamespace...) {
		if v != host[name] {
			t.Errorf("host: %s changed from %s to %s", name, host[name], v)
		}
	}

	r, err = Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Settings {
		if s.Action != Unchanged {
			t.Errorf("second run: %s %s", s.Name, s.Action)
		}
	}
}

// TestKernelGlobalSettingsFromNamespace: from a network namespace other
// than the initial one, the kernel refuses nf_conntrack_max and the hash
// table size, and the error says so.
func TestKernelGlobalSettingsFromNamespace(t *testing.T) {
	ns := kernelNS(t)
	host := readIn(t, nil, settingConntrackMax, settingHashsize)
	limit, _ := strconv.Atoi(host[settingConntrackMax.name])
	buckets, _ := strconv.Atoi(host[settingHashsize.name])
	target := 4 * (max(limit, buckets) + 1) // more than both have
	_, ctx := ktesting.NewTestContext(t)
	r, err := Run(ctx, Config{NetNS: ns.Path(), Conntrack: Conntrack{MaxPerCore: 1, Min: target}})
	if err == nil {
		t.Fatalf("raising global limits from a namespace succeeded:\n%s", r)
	}
	says(t, "error", err.Error(),
		"net.netfilter.nf_conntrack_max="+strconv.Itoa(target),
		"nf_conntrack.hashsize="+strconv.Itoa(target/4),
		"initial network namespace")
	if got := readIn(t, nil, settingConntrackMax, settingHashsize); got[settingConntrackMax.name] != host[settingConntrackMax.name] ||
		got[settingHashsize.name] != host[settingHashsize.name] {
		t.Errorf("host limits changed from %v to %v", host, got)
	}
}

// TestKernelGlobalSettingsAlreadyMet: in the initial namespace, limits at
// least as large as asked are read and left alone. No probe runs, so the
// host's nftables are not touched either.
func TestKernelGlobalSettingsAlreadyMet(t *testing.T) {
	if err := netlab.Probe(); err != nil {
		t.Skipf("needs root: %v", err)
	}
	host := readIn(t, nil, settingConntrackMax, settingHashsize)
	limit, _ := strconv.Atoi(host[settingConntrackMax.name])
	buckets, _ := strconv.Atoi(host[settingHashsize.name])
	if buckets < limit/4 {
		t.Skipf("the host's hash table (%d) is smaller than a quarter of nf_conntrack_max (%d): the test would resize it", buckets, limit)
	}
	c := Config{Conntrack: Conntrack{MaxPerCore: 1, Min: limit}}
	_, ctx := ktesting.NewTestContext(t)
	r, err := run(ctx, &c, env{files: newOSFiles(&c)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Settings) != 2 {
		t.Fatalf("settings %+v", r.Settings)
	}
	for _, s := range r.Settings {
		if s.Action != Unchanged || s.Before != host[s.Name] {
			t.Errorf("%+v, want unchanged at %s", s, host[s.Name])
		}
	}
}

// TestKernelProbes: the probes every mode needs succeed on the test
// machine's kernel, in a namespace. The nftables mode's are
// backends/nftables' own (its TestKernelProbes).
func TestKernelProbes(t *testing.T) {
	ns := kernelNS(t)
	_, ctx := ktesting.NewTestContext(t)
	got := Probe(ctx, ns.Path())
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
		if p.Outcome != Supported {
			t.Errorf("%s: %s: %s", p.Name, p.Outcome, p.Reason)
		}
	}
	if want := []string{probeConntrackNL, probeConntrackMod}; !slices.Equal(names, want) {
		t.Errorf("probes %v, want %v", names, want)
	}
}

// TestKernelProbesCanceled: a canceled context makes every probe
// inconclusive, without asking the kernel.
func TestKernelProbesCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range Probe(ctx, "/nonexistent") {
		if p.Outcome != Inconclusive {
			t.Errorf("%s: %s: %s", p.Name, p.Outcome, p.Reason)
		}
	}
}
