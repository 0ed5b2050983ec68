//go:build linux

package netlab

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

func TestClusterRoutesAndEcho(t *testing.T) {
	lab := NewForTest(t)
	c, err := BuildCluster(lab, ClusterSpec{
		Nodes: []NodeSpec{{Name: "node-a", Pods: []string{"web-1"}}, {Name: "node-b", Pods: []string{"web-2"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	tests := []struct {
		name    string
		from    *NS
		network string
		to      netip.Addr
		want    string
	}{
		{"node to local pod, tcp", c.Nodes[0].NS, "tcp", c.Pod("web-1").IPv4, "web-1"},
		{"node to remote pod, tcp", c.Nodes[0].NS, "tcp", c.Pod("web-2").IPv4, "web-2"},
		{"pod to remote pod, udp", c.Pod("web-1").NS, "udp", c.Pod("web-2").IPv4, "web-2"},
		{"pod to remote pod, tcp6", c.Pod("web-1").NS, "tcp", c.Pod("web-2").IPv6, "web-2"},
		{"client to pod, routed through node-a", c.Client.NS, "tcp", c.Pod("web-1").IPv4, "web-1"},
		{"client to pod, no such port", c.Client.NS, "tcp", c.Pod("web-1").IPv4, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			defer acancel()
			port := uint16(8080)
			if tt.want == "" {
				port = 9
			}
			got, err := tt.from.Ask(actx, tt.network, netip.AddrPortFrom(tt.to, port).String())
			if tt.want == "" {
				if err == nil {
					t.Fatalf("port %d answered %q", port, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("answer %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCloseRemovesNamespaces(t *testing.T) {
	lab := NewForTest(t)
	ns, err := lab.AddNS("x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ns.Path()); err != nil {
		t.Fatal(err)
	}
	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), lab.prefix) {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
}

// TestNetnsDirIsSharedMountPoint: once a lab has a namespace, netnsDir is
// a shared mount point of its own, as `ip netns add` leaves it, so that an
// `ip netns add` while the lab is up bind-mounts nothing above the lab's
// namespaces, and the lab can still delete them.
func TestNetnsDirIsSharedMountPoint(t *testing.T) {
	lab := NewForTest(t)
	if _, err := lab.AddNS("x"); err != nil {
		t.Fatal(err)
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mounts := 0
	for _, line := range strings.Split(string(info), "\n") {
		// id parent major:minor root mountpoint options optional... - ...
		f := strings.Fields(line)
		if len(f) < 7 || f[4] != netnsDir {
			continue
		}
		mounts++
		if !strings.Contains(line, " shared:") {
			t.Errorf("%s is a mount point, but not shared: %s", netnsDir, line)
		}
	}
	if mounts != 1 {
		t.Errorf("%s is the mount point of %d mounts, want 1", netnsDir, mounts)
	}
	if err := lab.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestAskPeer: the echo server reports the address a request came from,
// over TCP and UDP, in both families.
func TestAskPeer(t *testing.T) {
	lab := NewForTest(t)
	c, err := BuildCluster(lab, ClusterSpec{Nodes: []NodeSpec{{Name: "node-a", Pods: []string{"web-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	pod := c.Pod("web-1")
	for _, network := range []string{"tcp", "udp"} {
		for _, to := range []netip.Addr{pod.IPv4, pod.IPv6} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			id, peer, err := c.Client.NS.AskPeer(ctx, network, netip.AddrPortFrom(to, 8080).String())
			cancel()
			want := c.Client.IPv4
			if to.Is6() {
				want = c.Client.IPv6
			}
			if err != nil || id != "web-1" || peer.Addr() != want || peer.Port() == 0 {
				t.Errorf("%s to %s: got %q from %v, %v; want web-1 seeing %s", network, to, id, peer, err, want)
			}
		}
	}
}
