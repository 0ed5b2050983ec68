package pipeline

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
)

// ep is a ready, serving endpoint at addr:port, local when local.
func ep(addr string, port uint16, local bool) abi.Endpoint {
	return abi.Endpoint{Addr: netip.MustParseAddr(addr), Port: port, Ready: true, Serving: true, Local: local}
}

// ones weighs each index 1.
func ones(idx ...uint32) []abi.Weight {
	ws := []abi.Weight{}
	for _, i := range idx {
		ws = append(ws, abi.Weight{Index: i, Weight: 1})
	}
	return ws
}

func TestKeepLastGood(t *testing.T) {
	a, b, c := ep("10.244.1.10", 80, false), ep("10.244.1.99", 80, false), ep("10.244.7.77", 80, false)
	la, lb := ep("10.244.1.10", 80, true), ep("10.244.1.99", 80, true)
	notServing := func(e abi.Endpoint) abi.Endpoint { e.Ready, e.Serving = false, false; return e }
	terminating := func(e abi.Endpoint) abi.Endpoint { e.Ready, e.Terminating = false, true; return e }
	remote := func(e abi.Endpoint) abi.Endpoint { e.Local = false; return e }
	withPort := func(e abi.Endpoint, p uint16) abi.Endpoint { e.Port = p; return e }
	tests := []struct {
		name    string
		then    []abi.Endpoint
		last    abi.Decision
		now     []abi.Endpoint
		want    abi.Decision
		builtin bool
	}{{
		name: "unchanged",
		then: []abi.Endpoint{a, b}, now: []abi.Endpoint{a, b},
		last: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: []abi.Weight{{Index: 0, Weight: 3}, {Index: 1, Weight: 7}}},
		want: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: []abi.Weight{{Index: 0, Weight: 3}, {Index: 1, Weight: 7}}},
	}, {
		name: "the only endpoint replaced: builtin",
		then: []abi.Endpoint{b}, now: []abi.Endpoint{c},
		last:    abi.Decision{Eligible: abi.Indices{0}, Cluster: abi.Indices{0}, All: abi.Indices{0}, HasAnyEndpoints: true, Weights: ones(0)},
		builtin: true,
	}, {
		name: "one of two replaced: the other kept, at its new index, with its weight",
		then: []abi.Endpoint{a, b}, now: []abi.Endpoint{a, c},
		last: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: []abi.Weight{{Index: 0, Weight: 5}, {Index: 1, Weight: 9}}},
		want: abi.Decision{Eligible: abi.Indices{0}, Cluster: abi.Indices{0}, All: abi.Indices{0}, HasAnyEndpoints: true, Weights: []abi.Weight{{Index: 0, Weight: 5}}},
	}, {
		name: "an endpoint added before the kept ones: indices shift, the new one is not added",
		then: []abi.Endpoint{b, c}, now: []abi.Endpoint{a, b, c},
		last: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: ones(0, 1)},
		want: abi.Decision{Eligible: abi.Indices{1, 2}, Cluster: abi.Indices{1, 2}, All: abi.Indices{1, 2}, HasAnyEndpoints: true, Weights: ones(1, 2)},
	}, {
		name: "an endpoint no longer serving is dropped",
		then: []abi.Endpoint{a, b}, now: []abi.Endpoint{a, notServing(b)},
		last: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: ones(0, 1)},
		want: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0}, All: abi.Indices{0}, HasAnyEndpoints: true, Weights: ones(0)},
	}, {
		name: "a terminating endpoint still serving is kept",
		then: []abi.Endpoint{a, b}, now: []abi.Endpoint{a, terminating(b)},
		last: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: ones(0, 1)},
		want: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: ones(0, 1)},
	}, {
		name: "every endpoint no longer serving: builtin",
		then: []abi.Endpoint{a}, now: []abi.Endpoint{notServing(a)},
		last:    abi.Decision{Eligible: abi.Indices{0}, Cluster: abi.Indices{0}, All: abi.Indices{0}, HasAnyEndpoints: true, Weights: ones(0)},
		builtin: true,
	}, {
		name: "an endpoint no longer local leaves the Local set only",
		then: []abi.Endpoint{la, lb}, now: []abi.Endpoint{la, remote(lb)},
		last: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, Local: abi.Indices{0, 1}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: ones(0, 1)},
		want: abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, Local: abi.Indices{0}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: ones(0, 1)},
	}, {
		name: "no local endpoint left in a Local set that had some: builtin",
		then: []abi.Endpoint{la}, now: []abi.Endpoint{remote(la)},
		last:    abi.Decision{Eligible: abi.Indices{0}, Local: abi.Indices{0}, All: abi.Indices{0}, HasAnyEndpoints: true, Weights: ones(0)},
		builtin: true,
	}, {
		name: "nil sets stay nil, an empty set stays empty",
		then: []abi.Endpoint{a}, now: []abi.Endpoint{c},
		last: abi.Decision{Eligible: abi.Indices{}, Cluster: abi.Indices{}, All: abi.Indices{}},
		want: abi.Decision{Eligible: abi.Indices{}, Cluster: abi.Indices{}, All: abi.Indices{}},
	}, {
		name: "no set at all (no endpoints then)",
		then: nil, now: []abi.Endpoint{c},
		last: abi.Decision{Eligible: abi.Indices{}},
		want: abi.Decision{Eligible: abi.Indices{}},
	}, {
		name: "the same address on a new port is the same endpoint",
		then: []abi.Endpoint{a}, now: []abi.Endpoint{withPort(a, 8080)},
		last: abi.Decision{Eligible: abi.Indices{0}, Cluster: abi.Indices{0}, All: abi.Indices{0}, HasAnyEndpoints: true, Weights: ones(0)},
		want: abi.Decision{Eligible: abi.Indices{0}, Cluster: abi.Indices{0}, All: abi.Indices{0}, HasAnyEndpoints: true, Weights: ones(0)},
	}, {
		name: "a set member the selection left out does not count as programmed",
		then: []abi.Endpoint{a, b}, now: []abi.Endpoint{b},
		last:    abi.Decision{Eligible: abi.Indices{0, 1}, Cluster: abi.Indices{0, 1}, All: abi.Indices{0, 1}, HasAnyEndpoints: true, Weights: ones(0)},
		builtin: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := keepLastGood(&Result{Decision: tt.last, Endpoints: tt.then}, tt.now)
			if ok == tt.builtin {
				t.Fatalf("kept %t (%+v), want builtin %t", ok, got, tt.builtin)
			}
			if ok && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("decision\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
