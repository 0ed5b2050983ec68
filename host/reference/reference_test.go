package reference_test

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/reference"
)

// Nodes the table tests evaluate for. The node is always node-0; endpoints
// built with local run there.
var (
	nodeInZoneA       = abi.Node{Name: "node-0", Labels: []abi.Label{{Key: abi.LabelTopologyZone, Value: "zone-a"}}}
	nodeWithoutZone   = abi.Node{Name: "node-0"}
	nodeWithEmptyZone = abi.Node{Name: "node-0", Labels: []abi.Label{{Key: abi.LabelTopologyZone, Value: ""}}}
)

// epOpt adjusts an endpoint built by ep.
type epOpt func(*abi.Endpoint)

// ep returns endpoint 10.0.0.n:8080, ready, on remote node-1 in zone-b,
// without hints, adjusted by opts. Endpoints numbered 1..9 are in the
// "ip:port" order the ABI requires.
func ep(n byte, opts ...epOpt) abi.Endpoint {
	e := abi.Endpoint{
		Addr:     netip.AddrFrom4([4]byte{10, 0, 0, n}),
		Port:     8080,
		Ready:    true,
		Serving:  true,
		NodeName: "node-1",
		Zone:     "zone-b",
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

// Endpoint conditions and placement (after upstream's nil defaults).
var (
	local                 epOpt = func(e *abi.Endpoint) { e.Local, e.NodeName, e.Zone = true, "node-0", "zone-a" }
	unready               epOpt = func(e *abi.Endpoint) { e.Ready, e.Serving, e.Terminating = false, false, false }
	unreadyServing        epOpt = func(e *abi.Endpoint) { e.Ready, e.Serving, e.Terminating = false, true, false }
	servingTerminating    epOpt = func(e *abi.Endpoint) { e.Ready, e.Serving, e.Terminating = false, true, true }
	notServingTerminating epOpt = func(e *abi.Endpoint) { e.Ready, e.Serving, e.Terminating = false, false, true }
	readyTerminating      epOpt = func(e *abi.Endpoint) { e.Ready, e.Serving, e.Terminating = true, true, true }
)

// forZones sets the endpoint's zone hints.
func forZones(zones ...string) epOpt {
	return func(e *abi.Endpoint) { e.ZoneHints = zones }
}

// forNodes sets the endpoint's node hints.
func forNodes(nodes ...string) epOpt {
	return func(e *abi.Endpoint) { e.NodeHints = nodes }
}

// clusterIP is a ClusterIP service port with both traffic policies Cluster.
func clusterIP(eps ...abi.Endpoint) abi.ServicePort {
	return abi.ServicePort{Namespace: "ns", Name: "svc", Protocol: abi.ProtocolTCP, Port: 80, Endpoints: eps}
}

// internalLocal is a ClusterIP service port with internalTrafficPolicy Local.
func internalLocal(eps ...abi.Endpoint) abi.ServicePort {
	sp := clusterIP(eps...)
	sp.InternalPolicyLocal = true
	return sp
}

// externalLocal is a NodePort service port with externalTrafficPolicy Local.
func externalLocal(eps ...abi.Endpoint) abi.ServicePort {
	sp := clusterIP(eps...)
	sp.NodePort, sp.ExternalPolicyLocal, sp.ExternallyAccessible = 30080, true, true
	return sp
}

// nodePortInternalLocal is a NodePort service port with
// internalTrafficPolicy Local and externalTrafficPolicy Cluster.
func nodePortInternalLocal(eps ...abi.Endpoint) abi.ServicePort {
	sp := clusterIP(eps...)
	sp.NodePort, sp.InternalPolicyLocal, sp.ExternallyAccessible = 30080, true, true
	return sp
}

// externalLocalUnreachable has externalTrafficPolicy Local but no NodePort,
// VIP or external IP. The API does not allow eTP Local on a ClusterIP
// service; the flags can still meet in a ServicePort, and upstream then
// ignores the external policy.
func externalLocalUnreachable(eps ...abi.Endpoint) abi.ServicePort {
	sp := clusterIP(eps...)
	sp.ExternalPolicyLocal = true
	return sp
}

// set is a used index set: never nil, possibly empty.
func set(i ...uint32) abi.Indices {
	return append(abi.Indices{}, i...)
}

// want is the expected final decision of Categorize.
type want struct {
	mode     abi.TopologyMode
	eligible abi.Indices // nil: not checked (Eligible itself is never nil)
	cluster  abi.Indices
	local    abi.Indices
	all      abi.Indices
	hasAny   bool
}

func TestCategorize(t *testing.T) {
	tests := []struct {
		name string
		node abi.Node
		sp   abi.ServicePort
		want want
	}{
		// No endpoints.
		{
			name: "no endpoints: every set nil and no endpoints anywhere",
			node: nodeInZoneA,
			sp:   externalLocal(),
			want: want{eligible: set()},
		},
		{
			name: "no endpoints with Cluster policy: Cluster nil, not empty",
			node: nodeInZoneA,
			sp:   clusterIP(),
			want: want{eligible: set()},
		},

		// Zone hints.
		{
			name: "zone hints: only endpoints hinted for the node's zone serve cluster traffic",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, forZones("zone-a")), ep(2, forZones("zone-b")), ep(3, forZones("zone-c")), ep(4, forZones("zone-a"))),
			want: want{mode: abi.TopologyPreferSameZone, eligible: set(0, 3), cluster: set(0, 3), all: set(0, 3), hasAny: true},
		},
		{
			name: "zone hints: an endpoint hinted for several zones matches any of them",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, forZones("zone-b", "zone-a")), ep(2, forZones("zone-b")), ep(3, forZones("zone-c", "zone-a"))),
			want: want{mode: abi.TopologyPreferSameZone, eligible: set(0, 2), cluster: set(0, 2), all: set(0, 2), hasAny: true},
		},
		{
			name: "zone hints are all-or-nothing: one ready endpoint without hints disables topology",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, forZones("zone-a")), ep(2, forZones("zone-b")), ep(3)),
			want: want{eligible: set(0, 1, 2), cluster: set(0, 1, 2), all: set(0, 1, 2), hasAny: true},
		},
		{
			name: "zone hints: an empty hint list counts as no hints",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, forZones("zone-a")), ep(2, forZones())),
			want: want{eligible: set(0, 1), cluster: set(0, 1), all: set(0, 1), hasAny: true},
		},
		{
			name: "zone hints: unready endpoints without hints do not count towards every endpoint hinted",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, forZones("zone-a")), ep(2, forZones("zone-b")), ep(3, unready), ep(4, servingTerminating)),
			want: want{mode: abi.TopologyPreferSameZone, eligible: set(0), cluster: set(0), all: set(0), hasAny: true},
		},
		{
			name: "zone hints: no ready endpoint hinted for the node's zone disables topology",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, unready, forZones("zone-a")), ep(2, forZones("zone-b")), ep(3, forZones("zone-c"))),
			want: want{eligible: set(0, 1, 2), cluster: set(1, 2), all: set(1, 2), hasAny: true},
		},
		{
			name: "zone hints: an unready endpoint hinted for the zone is eligible but not used",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, forZones("zone-a")), ep(2, unready, forZones("zone-a")), ep(3, forZones("zone-b"))),
			want: want{mode: abi.TopologyPreferSameZone, eligible: set(0, 1), cluster: set(0), all: set(0), hasAny: true},
		},

		// Node without a zone label.
		{
			name: "node without zone label: hints for named zones never match",
			node: nodeWithoutZone,
			sp:   clusterIP(ep(1, forZones("zone-a")), ep(2, forZones("zone-b"))),
			want: want{eligible: set(0, 1), cluster: set(0, 1), all: set(0, 1), hasAny: true},
		},
		{
			name: "node with empty zone label behaves as without one",
			node: nodeWithEmptyZone,
			sp:   clusterIP(ep(1, forZones("zone-a")), ep(2, forZones("zone-b"))),
			want: want{eligible: set(0, 1), cluster: set(0, 1), all: set(0, 1), hasAny: true},
		},
		{
			name: "node without zone label: a hint for the empty zone matches, as upstream's set lookup does",
			node: nodeWithoutZone,
			sp:   clusterIP(ep(1, forZones("")), ep(2, forZones("zone-b"))),
			want: want{mode: abi.TopologyPreferSameZone, eligible: set(0), cluster: set(0), all: set(0), hasAny: true},
		},

		// PreferSameNode.
		{
			name: "PreferSameNode: every ready endpoint node-hinted and one for this node beats zone",
			node: nodeInZoneA,
			sp: clusterIP(
				ep(1, local, forNodes("node-0"), forZones("zone-a")),
				ep(2, forNodes("node-1"), forZones("zone-a")),
				ep(3, forNodes("node-2"), forZones("zone-b"))),
			want: want{mode: abi.TopologyPreferSameNode, eligible: set(0), cluster: set(0), all: set(0), hasAny: true},
		},
		{
			name: "PreferSameNode falls back to zone when a ready endpoint lacks a node hint",
			node: nodeInZoneA,
			sp: clusterIP(
				ep(1, local, forNodes("node-0"), forZones("zone-a")),
				ep(2, forZones("zone-a")),
				ep(3, forNodes("node-2"), forZones("zone-b"))),
			want: want{mode: abi.TopologyPreferSameZone, eligible: set(0, 1), cluster: set(0, 1), all: set(0, 1), hasAny: true},
		},
		{
			name: "PreferSameNode falls back to zone when no ready endpoint is hinted for this node",
			node: nodeInZoneA,
			sp: clusterIP(
				ep(1, unready, local, forNodes("node-0"), forZones("zone-a")),
				ep(2, forNodes("node-1"), forZones("zone-a")),
				ep(3, forNodes("node-2"), forZones("zone-b"))),
			want: want{mode: abi.TopologyPreferSameZone, eligible: set(0, 1), cluster: set(1), all: set(1), hasAny: true},
		},
		{
			name: "PreferSameNode: unready endpoints need no node hint",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, local, forNodes("node-0"), forZones("zone-a")), ep(2, unready), ep(3, forNodes("node-1"), forZones("zone-a"))),
			want: want{mode: abi.TopologyPreferSameNode, eligible: set(0), cluster: set(0), all: set(0), hasAny: true},
		},
		{
			name: "PreferSameNode falls back to no topology when zone hints are missing too",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, forNodes("node-1")), ep(2, forNodes("node-2"))),
			want: want{eligible: set(0, 1), cluster: set(0, 1), all: set(0, 1), hasAny: true},
		},

		// Cluster policy and endpoint conditions.
		{
			name: "Cluster terminating fallback: no ready endpoint anywhere uses every serving terminating endpoint, remote ones included",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, local, servingTerminating), ep(2, servingTerminating), ep(3, notServingTerminating), ep(4, unreadyServing)),
			want: want{eligible: set(0, 1, 2, 3), cluster: set(0, 1), all: set(0, 1), hasAny: true},
		},
		{
			name: "Cluster terminating fallback ignores topology hints",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, servingTerminating, forZones("zone-b")), ep(2, servingTerminating, forZones("zone-a"))),
			want: want{eligible: set(0, 1), cluster: set(0, 1), all: set(0, 1), hasAny: true},
		},
		{
			name: "Cluster: terminating endpoints are unused while a ready endpoint exists anywhere, even in another zone",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, forZones("zone-b")), ep(2, local, servingTerminating, forZones("zone-a"))),
			want: want{eligible: set(0, 1), cluster: set(0), all: set(0), hasAny: true},
		},
		{
			name: "not-serving terminating endpoints are never used: Cluster is used but empty",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, notServingTerminating), ep(2, local, notServingTerminating)),
			want: want{eligible: set(0, 1), cluster: set(), all: set()},
		},
		{
			name: "unready serving non-terminating endpoints are never used: Cluster is used but empty",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, unreadyServing), ep(2, local, unreadyServing), ep(3, unready)),
			want: want{eligible: set(0, 1, 2), cluster: set(), all: set()},
		},
		{
			name: "a ready endpoint also marked terminating counts as ready",
			node: nodeInZoneA,
			sp:   clusterIP(ep(1, readyTerminating), ep(2, servingTerminating)),
			want: want{eligible: set(0, 1), cluster: set(0), all: set(0), hasAny: true},
		},

		// Local policy.
		{
			name: "Local policy uses the local ready endpoints only",
			node: nodeInZoneA,
			sp:   internalLocal(ep(1, local), ep(2), ep(3, local, servingTerminating)),
			want: want{eligible: set(0, 1, 2), local: set(0), all: set(0), hasAny: true},
		},
		{
			name: "Local policy without a local ready endpoint falls back to local serving terminating ones",
			node: nodeInZoneA,
			sp:   internalLocal(ep(1, local, servingTerminating), ep(2), ep(3, local, notServingTerminating), ep(4, servingTerminating)),
			want: want{eligible: set(0, 1, 2, 3), local: set(0), all: set(0), hasAny: true},
		},
		{
			name: "Local fallback is independent of the Cluster fallback",
			node: nodeInZoneA,
			sp:   externalLocal(ep(1), ep(2, local, servingTerminating), ep(3, servingTerminating)),
			want: want{eligible: set(0, 1, 2), cluster: set(0), local: set(1), all: set(0, 1), hasAny: true},
		},
		{
			name: "Cluster and Local both fall back when no endpoint is ready",
			node: nodeInZoneA,
			sp:   externalLocal(ep(1, local, servingTerminating), ep(2, servingTerminating)),
			want: want{eligible: set(0, 1), cluster: set(0, 1), local: set(0), all: set(0, 1), hasAny: true},
		},
		{
			name: "Local policy never uses unready or not-serving endpoints: Local nil, nothing anywhere",
			node: nodeInZoneA,
			sp:   internalLocal(ep(1, local, notServingTerminating), ep(2, local, unreadyServing), ep(3, unready)),
			want: want{eligible: set(0, 1, 2)},
		},
		{
			name: "hasAnyEndpoints while All is empty: iTP Local with only remote endpoints",
			node: nodeInZoneA,
			sp:   internalLocal(ep(1), ep(2)),
			want: want{eligible: set(0, 1), hasAny: true},
		},
		{
			name: "hasAnyEndpoints while All is empty: iTP Local with only remote serving terminating endpoints",
			node: nodeInZoneA,
			sp:   internalLocal(ep(1, servingTerminating), ep(2, local, notServingTerminating)),
			want: want{eligible: set(0, 1), hasAny: true},
		},

		// Which sets a service uses.
		{
			name: "eTP Local and externally accessible uses both sets",
			node: nodeInZoneA,
			sp:   externalLocal(ep(1, local), ep(2)),
			want: want{eligible: set(0, 1), cluster: set(0, 1), local: set(0), all: set(0, 1), hasAny: true},
		},
		{
			name: "eTP Local without local endpoints: Local nil while Cluster serves",
			node: nodeInZoneA,
			sp:   externalLocal(ep(1), ep(2)),
			want: want{eligible: set(0, 1), cluster: set(0, 1), all: set(0, 1), hasAny: true},
		},
		{
			name: "iTP Local not externally accessible: Cluster nil",
			node: nodeInZoneA,
			sp:   internalLocal(ep(1, local), ep(2)),
			want: want{eligible: set(0, 1), local: set(0), all: set(0), hasAny: true},
		},
		{
			name: "iTP Local externally accessible: Cluster used for external traffic",
			node: nodeInZoneA,
			sp:   nodePortInternalLocal(ep(1), ep(2, local)),
			want: want{eligible: set(0, 1), cluster: set(0, 1), local: set(1), all: set(0, 1), hasAny: true},
		},
		{
			name: "eTP Local not externally accessible: Local nil and All is Cluster",
			node: nodeInZoneA,
			sp:   externalLocalUnreachable(ep(1, local), ep(2)),
			want: want{eligible: set(0, 1), cluster: set(0, 1), all: set(0, 1), hasAny: true},
		},

		// All and topology versus Local.
		{
			name: "All is the union when topology leaves a local endpoint out of Cluster",
			node: nodeInZoneA,
			sp:   externalLocal(ep(1, local, forZones("zone-b")), ep(2, forZones("zone-a")), ep(3, forZones("zone-b"))),
			want: want{mode: abi.TopologyPreferSameZone, eligible: set(1), cluster: set(1), local: set(0), all: set(0, 1), hasAny: true},
		},
		{
			name: "topology never applies to the Local set",
			node: nodeInZoneA,
			sp:   internalLocal(ep(1, local, forZones("zone-b")), ep(2, local, forZones("zone-a")), ep(3, forZones("zone-a"))),
			want: want{eligible: set(0, 1, 2), local: set(0, 1), all: set(0, 1), hasAny: true},
		},
		{
			name: "topology never applies to the Local set, even when it narrows Cluster",
			node: nodeInZoneA,
			sp:   externalLocal(ep(1, local, forZones("zone-b")), ep(2, local, forZones("zone-a")), ep(3, forZones("zone-a"))),
			want: want{mode: abi.TopologyPreferSameZone, eligible: set(1, 2), cluster: set(1, 2), local: set(0, 1), all: set(0, 1, 2), hasAny: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reference.Categorize(&tt.node, &tt.sp)
			checkDecision(t, got, tt.want)
			// The table and the upstream transcription must agree too.
			compareWithUpstream(t, &tt.node, &tt.sp)
		})
	}
}

func TestEndpointSelectionWeighsClusterAndLocal(t *testing.T) {
	tests := []struct {
		name string
		prev abi.Decision
		want []abi.Weight
	}{
		{
			name: "weight 1 on every endpoint of Cluster ∪ Local, ascending",
			prev: abi.Decision{Cluster: set(0, 2), Local: set(1, 2)},
			want: []abi.Weight{{Index: 0, Weight: 1}, {Index: 1, Weight: 1}, {Index: 2, Weight: 1}},
		},
		{
			name: "Local only",
			prev: abi.Decision{Local: set(3)},
			want: []abi.Weight{{Index: 3, Weight: 1}},
		},
		{
			name: "nothing chosen: no weights",
			prev: abi.Decision{Cluster: set()},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := clusterIP(ep(1), ep(2), ep(3), ep(4))
			got := reference.EndpointSelection(&nodeInZoneA, &sp, tt.prev)
			if !reflect.DeepEqual(got.Weights, tt.want) {
				t.Errorf("Weights = %v, want %v", got.Weights, tt.want)
			}
			got.Weights = nil
			if !reflect.DeepEqual(got, tt.prev) {
				t.Errorf("earlier fields = %+v, want them carried from %+v", got, tt.prev)
			}
		})
	}
}

func TestStagesCarryEarlierFields(t *testing.T) {
	sp := externalLocal(ep(1, local, forZones("zone-b")), ep(2, forZones("zone-a")), ep(3, forZones("zone-b")))
	topo := reference.Topology(&nodeInZoneA, &sp)
	policy := reference.TrafficPolicy(&nodeInZoneA, &sp, topo)
	final := reference.EndpointSelection(&nodeInZoneA, &sp, policy)

	if policy.Mode != topo.Mode || !reflect.DeepEqual(policy.Eligible, topo.Eligible) {
		t.Errorf("TrafficPolicy: Mode %v Eligible %s, want %v %s from Topology", policy.Mode, indices(policy.Eligible), topo.Mode, indices(topo.Eligible))
	}
	withoutWeights := final
	withoutWeights.Weights = nil
	if !reflect.DeepEqual(withoutWeights, policy) {
		t.Errorf("EndpointSelection = %+v, want the TrafficPolicy fields %+v carried", final, policy)
	}
	if want := reference.Categorize(&nodeInZoneA, &sp); !reflect.DeepEqual(final, want) {
		t.Errorf("stages by hand = %+v, Categorize = %+v", final, want)
	}
}

func TestTrafficPolicyReadsEligible(t *testing.T) {
	sp := externalLocal(ep(1, local), ep(2), ep(3))
	tests := []struct {
		name string
		prev abi.Decision
		want want
	}{
		{
			name: "a topology module may narrow Eligible without naming a mode; All still holds Local",
			prev: abi.Decision{Mode: abi.TopologyNone, Eligible: set(2)},
			want: want{eligible: set(2), cluster: set(2), local: set(0), all: set(0, 2), hasAny: true},
		},
		{
			name: "nil Eligible (topology did not run) makes every endpoint eligible",
			prev: abi.Decision{},
			want: want{cluster: set(0, 1, 2), local: set(0), all: set(0, 1, 2), hasAny: true},
		},
		{
			name: "indices past the endpoints are ignored",
			prev: abi.Decision{Eligible: set(1, 7, 9)},
			want: want{eligible: set(1, 7, 9), cluster: set(1), local: set(0), all: set(0, 1), hasAny: true},
		},
		{
			name: "empty Eligible leaves no ready endpoint: Cluster falls back to terminating ones, here none",
			prev: abi.Decision{Eligible: set()},
			want: want{eligible: set(), cluster: set(), local: set(0), all: set(0), hasAny: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reference.EndpointSelection(&nodeInZoneA, &sp, reference.TrafficPolicy(&nodeInZoneA, &sp, tt.prev))
			checkDecision(t, got, tt.want)
		})
	}
}

// checkDecision compares a final decision with w, nil apart from empty. The
// expected weights are 1 on every member of w.all.
func checkDecision(t *testing.T, got abi.Decision, w want) {
	t.Helper()
	if got.Mode != w.mode {
		t.Errorf("Mode = %q, want %q", got.Mode, w.mode)
	}
	if w.eligible != nil && !reflect.DeepEqual(got.Eligible, w.eligible) {
		t.Errorf("Eligible = %s, want %s", indices(got.Eligible), indices(w.eligible))
	}
	for _, s := range []struct {
		name      string
		got, want abi.Indices
	}{
		{"Cluster", got.Cluster, w.cluster},
		{"Local", got.Local, w.local},
		{"All", got.All, w.all},
	} {
		if !reflect.DeepEqual(s.got, s.want) {
			t.Errorf("%s = %s, want %s", s.name, indices(s.got), indices(s.want))
		}
	}
	if got.HasAnyEndpoints != w.hasAny {
		t.Errorf("HasAnyEndpoints = %v, want %v", got.HasAnyEndpoints, w.hasAny)
	}
	if want := weightsFor(w.all); !reflect.DeepEqual(got.Weights, want) {
		t.Errorf("Weights = %v, want %v", got.Weights, want)
	}
}

// weightsFor is weight 1 on every member of set, nil for an empty set.
func weightsFor(set abi.Indices) []abi.Weight {
	var out []abi.Weight
	for _, i := range set {
		out = append(out, abi.Weight{Index: i, Weight: 1})
	}
	return out
}

// indices formats an index set the way explain output shows it: null for
// nil, [] for empty.
func indices(s abi.Indices) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprint([]uint32(s))
}
