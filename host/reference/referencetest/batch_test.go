package referencetest_test

import (
	"cmp"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
)

func TestBatchIsDeterministic(t *testing.T) {
	node1, ports1 := referencetest.Batch(42, 500, 10)
	node2, ports2 := referencetest.Batch(42, 500, 10)
	if !reflect.DeepEqual(node1, node2) || !reflect.DeepEqual(ports1, ports2) {
		t.Errorf("Batch(42) differs between calls")
	}
	if _, other := referencetest.Batch(43, 500, 10); reflect.DeepEqual(ports1, other) {
		t.Errorf("Batch(42) = Batch(43), want different seeds to differ")
	}
}

func TestBatchFollowsTheABI(t *testing.T) {
	tests := []struct {
		name           string
		ports, perPort int
	}{
		{name: "benchmark shape", ports: 10000, perPort: 10},
		{name: "wide service ports", ports: 20, perPort: 300},
		{name: "empty service ports", ports: 5, perPort: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, ports := referencetest.Batch(1, tt.ports, tt.perPort)
			if zone, _ := node.Label(abi.LabelTopologyZone); node.Name != referencetest.NodeName || zone != referencetest.NodeZone {
				t.Errorf("node = %s in %q, want %s in %q", node.Name, zone, referencetest.NodeName, referencetest.NodeZone)
			}
			if !slices.IsSortedFunc(node.Labels, func(a, b abi.Label) int { return cmp.Compare(a.Key, b.Key) }) {
				t.Errorf("node labels not sorted by key: %v", node.Labels)
			}
			if len(ports) != tt.ports {
				t.Fatalf("got %d service ports, want %d", len(ports), tt.ports)
			}
			for i, sp := range ports {
				if len(sp.Endpoints) != tt.perPort {
					t.Fatalf("port %d: %d endpoints, want %d", i, len(sp.Endpoints), tt.perPort)
				}
				keys := make([]string, len(sp.Endpoints))
				for k, ep := range sp.Endpoints {
					keys[k] = netip.AddrPortFrom(ep.Addr, ep.Port).String()
					if ep.Local != (ep.NodeName == referencetest.NodeName) {
						t.Fatalf("port %d endpoint %s: Local %v on %s", i, keys[k], ep.Local, ep.NodeName)
					}
				}
				if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
					t.Fatalf("port %d: endpoints not unique and sorted by ip:port: %v", i, keys)
				}
				if sp.ExternalPolicyLocal && sp.NodePort == 0 {
					t.Fatalf("port %d: eTP Local without NodePort", i)
				}
			}
		})
	}
}

// TestBatchMix checks the mix is roughly the documented one.
func TestBatchMix(t *testing.T) {
	_, ports := referencetest.Batch(1, 10000, 10)
	var internalLocal, externalLocal, hinted, sameNode, terminating, unready, endpoints int
	for _, sp := range ports {
		if sp.InternalPolicyLocal {
			internalLocal++
		}
		if sp.ExternalPolicyLocal {
			externalLocal++
		}
		if sp.Endpoints[0].ZoneHints != nil || sp.Endpoints[1].ZoneHints != nil {
			hinted++
		}
		if sp.Endpoints[0].NodeHints != nil || sp.Endpoints[1].NodeHints != nil {
			sameNode++
		}
		for _, ep := range sp.Endpoints {
			endpoints++
			if ep.Terminating {
				terminating++
			}
			if !ep.Ready {
				unready++
			}
		}
	}
	for _, c := range []struct {
		name     string
		got      int
		min, max int
	}{
		{"iTP Local service ports", internalLocal, 800, 1200},
		{"eTP Local service ports", externalLocal, 800, 1200},
		{"zone-hinted service ports", hinted, 2700, 3300},
		{"PreferSameNode service ports", sameNode, 50, 300},
		{"terminating endpoints", terminating, endpoints * 5 / 100, endpoints * 12 / 100},
		{"unready endpoints", unready, endpoints * 8 / 100, endpoints * 15 / 100},
	} {
		if c.got < c.min || c.got > c.max {
			t.Errorf("%s = %d, want %d..%d", c.name, c.got, c.min, c.max)
		}
	}
}

func BenchmarkBatch(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		referencetest.Batch(1, 10000, 10)
	}
}
