//go:build linux

package conntrack

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// TestKernel runs the reconciler against a real conntrack table, in a
// throwaway network namespace: entries inserted through ctnetlink in the
// shapes DNAT leaves (reply source = endpoint), and, when nft is
// installed, entries made by real UDP traffic over loopback.
func TestKernel(t *testing.T) {
	lab := netlab.NewForTest(t)
	ns, err := lab.AddNS("ct")
	if err != nil {
		t.Fatal(err)
	}
	h := handleIn(t, ns.Path())

	// The same flows as TestSyncWholeTable, plus an IPv6 one that the
	// IPv4 cleaner must not see.
	inserted := everyKind()
	for i := range inserted {
		inserted[i].origSrcPort += uint16(i) // distinct tuples
		inserted[i].replyDstPort = inserted[i].origSrcPort
		insert(t, h, backends.IPv4, inserted[i])
	}
	v6 := v6Flow()
	insert(t, h, backends.IPv6, v6)

	state := dnsState()
	var (
		wantKept    []flow
		wantDeleted uint64
	)
	for _, f := range inserted {
		if planFor(state).stale(&f) {
			wantDeleted++
		} else {
			wantKept = append(wantKept, f)
		}
	}

	// Real traffic, if nft can make conntrack track this namespace: a
	// "service" on 127.0.0.1:5300 whose serving endpoint is elsewhere
	// (the flow was never DNATed, so it is stale) and one on
	// 127.0.0.2:5300 served by 127.0.0.2 itself (kept).
	if _, err := exec.LookPath("nft"); err != nil {
		t.Logf("no real traffic: nft not installed: %v", err)
	} else {
		trackConntrack(t, ns.FullName())
		realStale := netip.MustParseAddrPort("127.0.0.1:5300")
		realKept := netip.MustParseAddrPort("127.0.0.2:5300")
		if err := ns.ServeEcho("echo", realStale, realKept); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, ap := range []netip.AddrPort{realStale, realKept} {
			if _, err := ns.Ask(ctx, "udp", ap.String()); err != nil {
				t.Fatalf("udp exchange with %s: %v", ap, err)
			}
		}
		state.Services = append(state.Services,
			service("zz-real-kept:5300/UDP", "UDP", "127.0.0.2", 5300, func(s *backends.Service) { s.Serving = addrs("127.0.0.2") }),
			service("zz-real-stale:5300/UDP", "UDP", "127.0.0.1", 5300, func(s *backends.Service) { s.Serving = addrs(podA) }),
		)
		real := flowsTo(list(t, h, backends.IPv4), realKept)
		if len(real) == 0 {
			t.Fatalf("no conntrack entry for the UDP exchange with %s:\n%s", realKept, dump(list(t, h, backends.IPv4)))
		}
		wantKept = append(wantKept, real...)
		stale := flowsTo(list(t, h, backends.IPv4), realStale)
		if len(stale) == 0 {
			t.Fatalf("no conntrack entry for the UDP exchange with %s", realStale)
		}
		wantDeleted += uint64(len(stale))
	}

	_, ctx := ktesting.NewTestContext(t)
	b, err := New(backendfake.New(), Opts{Family: backends.IPv4, NetNS: ns.Path()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Sync(ctx, state); err != nil {
		t.Fatalf("Sync: %v", err)
	}

	if got, want := dump(list(t, h, backends.IPv4)), dump(wantKept); got != want {
		t.Errorf("IPv4 conntrack table after Sync:\n%s\nwant:\n%s", got, want)
	}
	if got, want := dump(list(t, h, backends.IPv6)), v6.String(); got != want {
		t.Errorf("IPv6 conntrack table after an IPv4 Sync:\n%s\nwant:\n%s", got, want)
	}
	if got := b.(*Backend).Stats(); got.DeletedEntries != wantDeleted || got.Failures != 0 {
		t.Errorf("Stats = %+v, want %d deleted and no failure", got, wantDeleted)
	}
}

// handleIn opens a conntrack netlink handle in the namespace at path.
func handleIn(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	nsh, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// insert creates a conntrack entry for f, as `conntrack -I` does.
func insert(t *testing.T, h *netlink.Handle, family backends.Family, f flow) {
	t.Helper()
	tuple := func(src, dst netip.Addr, sport, dport uint16) netlink.IPTuple {
		return netlink.IPTuple{SrcIP: net.IP(src.AsSlice()), DstIP: net.IP(dst.AsSlice()), SrcPort: sport, DstPort: dport, Protocol: f.proto}
	}
	nf := &netlink.ConntrackFlow{
		FamilyType: uint8(inetFamily(family)),
		Forward:    tuple(f.origSrc, f.origDst, f.origSrcPort, f.origDstPort),
		Reverse:    tuple(f.replySrc, f.replyDst, f.replySrcPort, f.replyDstPort),
		TimeOut:    600,
	}
	if f.proto == unix.IPPROTO_TCP {
		nf.ProtoInfo = &netlink.ProtoInfoTCP{State: 3} // ESTABLISHED
	}
	if err := h.ConntrackCreate(netlink.ConntrackTable, inetFamily(family), nf); err != nil {
		t.Fatalf("insert conntrack entry %s: %v", f.String(), err)
	}
}

// list returns the conntrack entries of family.
func list(t *testing.T, h *netlink.Handle, family backends.Family) []flow {
	t.Helper()
	nfs, err := h.ConntrackTableList(netlink.ConntrackTable, inetFamily(family))
	if err != nil {
		t.Fatal(err)
	}
	var out []flow
	for _, nf := range nfs {
		out = append(out, flowOf(family, nf))
	}
	return out
}

// flowsTo returns the flows sent to ap.
func flowsTo(fs []flow, ap netip.AddrPort) []flow {
	var out []flow
	for _, f := range fs {
		if f.origDst == ap.Addr() && f.origDstPort == ap.Port() {
			out = append(out, f)
		}
	}
	return out
}

// dump renders flows sorted, one a line.
func dump(fs []flow) string {
	var lines []string
	for _, f := range fs {
		lines = append(lines, f.String())
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// trackConntrack loads a ruleset with a ct expression in the namespace:
// conntrack hooks into a namespace only once a rule there needs it.
func trackConntrack(t *testing.T, fullName string) {
	t.Helper()
	const ruleset = `table inet wasp-conntrack-test {
	chain output {
		type filter hook output priority 0; policy accept;
		ct state new counter
	}
}
`
	cmd := exec.Command("ip", "netns", "exec", fullName, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("load nft ruleset: %v: %s", err, out)
	}
}
