package backends_test

import (
	"net/netip"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

func TestMasquerade(t *testing.T) {
	pods := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	internal := []struct {
		name    string
		all     bool
		cluster []netip.Prefix
		want    backends.Masquerade
	}{
		{"masqueradeAll", true, nil, backends.MasqueradeAll},
		{"masqueradeAll wins over cluster CIDRs", true, pods, backends.MasqueradeAll},
		{"off-cluster sources", false, pods, backends.MasqueradeOffCluster},
		{"no cluster CIDR: none", false, nil, backends.MasqueradeNone},
	}
	for _, tc := range internal {
		t.Run("internal/"+tc.name, func(t *testing.T) {
			s := backends.State{MasqueradeAll: tc.all, ClusterCIDRs: tc.cluster}
			if got := s.InternalMasquerade(); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	external := []struct {
		name  string
		local bool
		want  backends.Masquerade
	}{
		{"Cluster policy: all", false, backends.MasqueradeAll},
		{"Local policy: the node's own traffic only", true, backends.MasqueradeFromNode},
	}
	for _, tc := range external {
		t.Run("external/"+tc.name, func(t *testing.T) {
			s := backends.Service{ExternalPolicyLocal: tc.local}
			if got := s.ExternalMasquerade(); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
