package backends_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

func TestRoutes(t *testing.T) {
	a := backends.Endpoint{Addr: netip.MustParseAddr("10.244.1.10"), Port: 8080, Weight: 1}
	b := backends.Endpoint{Addr: netip.MustParseAddr("10.244.2.10"), Port: 8080, Weight: 1}
	none := []backends.Endpoint{}
	tests := []struct {
		name           string
		any            bool
		cluster, local []backends.Endpoint
		itp, etp       bool // policy Local
		internal       backends.Route
		external       backends.Route
	}{
		{name: "no endpoint at all rejects", any: false, cluster: none, local: nil,
			internal: backends.Route{Verdict: backends.Reject, Endpoints: none},
			external: backends.Route{Verdict: backends.Reject, Endpoints: none}},
		{name: "no endpoint at all rejects, Local too", any: false, itp: true, etp: true,
			internal: backends.Route{Verdict: backends.Reject, Local: true},
			external: backends.Route{Verdict: backends.Reject, Local: true}},
		{name: "cluster forwards", any: true, cluster: []backends.Endpoint{a, b},
			internal: backends.Route{Verdict: backends.Forward, Endpoints: []backends.Endpoint{a, b}},
			external: backends.Route{Verdict: backends.Forward, Endpoints: []backends.Endpoint{a, b}}},
		{name: "iTP Local without a local endpoint drops, an empty set", any: true, itp: true, cluster: []backends.Endpoint{b}, local: none,
			internal: backends.Route{Verdict: backends.Drop, Local: true, Endpoints: none},
			external: backends.Route{Verdict: backends.Forward, Endpoints: []backends.Endpoint{b}}},
		{name: "eTP Local with an unused (nil) local set drops", any: true, etp: true, cluster: []backends.Endpoint{b},
			internal: backends.Route{Verdict: backends.Forward, Endpoints: []backends.Endpoint{b}},
			external: backends.Route{Verdict: backends.Drop, Local: true}},
		{name: "eTP Local forwards to the local set", any: true, etp: true, cluster: []backends.Endpoint{a, b}, local: []backends.Endpoint{a},
			internal: backends.Route{Verdict: backends.Forward, Endpoints: []backends.Endpoint{a, b}},
			external: backends.Route{Verdict: backends.Forward, Local: true, Endpoints: []backends.Endpoint{a}}},
		{name: "endpoints left out by the chain drop", any: true, cluster: none,
			internal: backends.Route{Verdict: backends.Drop, Endpoints: none},
			external: backends.Route{Verdict: backends.Drop, Endpoints: none}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := backends.Service{HasAnyEndpoints: tc.any, Cluster: tc.cluster, Local: tc.local,
				InternalPolicyLocal: tc.itp, ExternalPolicyLocal: tc.etp}
			for _, c := range []struct {
				what      string
				got, want backends.Route
			}{{"internal", svc.InternalRoute(), tc.internal}, {"external", svc.ExternalRoute(), tc.external}} {
				if !routeEqual(c.got, c.want) {
					t.Errorf("%s route %+v, want %+v", c.what, c.got, c.want)
				}
			}
		})
	}
}

// routeEqual compares routes, telling a nil endpoint set from an empty
// one.
func routeEqual(a, b backends.Route) bool {
	return a.Verdict == b.Verdict && a.Local == b.Local && slices.Equal(a.Endpoints, b.Endpoints) &&
		(a.Endpoints == nil) == (b.Endpoints == nil)
}

func TestExternallyReachable(t *testing.T) {
	vip := []netip.Addr{netip.MustParseAddr("203.0.113.1")}
	tests := []struct {
		name string
		svc  backends.Service
		want bool
	}{
		{"ClusterIP only", backends.Service{Port: 80}, false},
		{"NodePort", backends.Service{NodePort: 30080}, true},
		{"external IP", backends.Service{ExternalIPs: vip}, true},
		{"load-balancer VIP", backends.Service{LoadBalancerVIPs: vip}, true},
		{"empty lists", backends.Service{ExternalIPs: []netip.Addr{}, LoadBalancerVIPs: []netip.Addr{}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.svc.ExternallyReachable(); got != tc.want {
				t.Errorf("ExternallyReachable() = %v, want %v", got, tc.want)
			}
		})
	}
}
