//go:build linux

package backendtest_test

import (
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	bt "github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// TestPlanIsNetlabs: the plan's node, client and pod addresses are those
// of a netlab cluster, for both families.
func TestPlanIsNetlabs(t *testing.T) {
	c, err := netlab.BuildCluster(netlab.NewForTest(t), netlab.ClusterSpec{Nodes: []netlab.NodeSpec{
		{Name: "node-a", Pods: []string{"a1"}}, {Name: "node-b", Pods: []string{"b1", "b2"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []backends.Family{backends.IPv4, backends.IPv6} {
		pick := func(h netlab.Host) string {
			if f == backends.IPv6 {
				return h.IPv6.String()
			}
			return h.IPv4.String()
		}
		for _, tt := range []struct {
			name      string
			got, want string
		}{
			{"node 1", pick(c.Nodes[0].Host), bt.NodeIP(f, 1).String()},
			{"node 2", pick(c.Nodes[1].Host), bt.NodeIP(f, 2).String()},
			{"client", pick(*c.Client), bt.ClientIP(f).String()},
			{"pod a1", pick(c.Pod("a1").Host), bt.EndpointIP(f, 1, 11).String()},
			{"pod b2", pick(c.Pod("b2").Host), bt.EndpointIP(f, 2, 12).String()},
		} {
			if tt.got != tt.want {
				t.Errorf("%s: %s %s in netlab, %s in the plan", f, tt.name, tt.got, tt.want)
			}
		}
		if !bt.PodCIDR(f).Contains(bt.EndpointIP(f, 2, 12)) {
			t.Errorf("%s: pod CIDR %s", f, bt.PodCIDR(f))
		}
	}
}
