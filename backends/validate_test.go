package backends_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// The fake backend's tests run every field check through Sync; these cover
// what they don't: nil, field paths outside services, and duplicates in a
// set large enough to be checked through a map.
func TestValidate(t *testing.T) {
	big := make([]backends.Endpoint, 40)
	for i := range big {
		big[i] = backends.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 244, 1, byte(i + 1)}), Port: 8080, Weight: 1}
	}
	big[33] = big[7]
	svc := backends.Service{Key: "demo/web:http/TCP/IPv4", Namespace: "demo", Name: "web", Protocol: "TCP",
		ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80}

	tests := []struct {
		name string
		s    *backends.State
		want []string // substrings; none: valid
		not  []string // substrings the error must not have
	}{
		{name: "nil", s: nil, want: []string{"nil state"}},
		{name: "empty", s: &backends.State{Family: backends.IPv6}},
		{
			name: "top-level fields have no service prefix",
			s:    &backends.State{Family: backends.IPv4, NodeIPs: []netip.Addr{netip.MustParseAddr("::ffff:198.51.100.1")}},
			want: []string{"invalid state of ipv4: nodeIPs[0]: ::ffff:198.51.100.1 is not ipv4"},
			not:  []string{"services["},
		},
		{
			name: "duplicate in a large set",
			s: &backends.State{Family: backends.IPv4, Services: []backends.Service{func() backends.Service {
				s := svc
				s.Cluster = big
				return s
			}()}},
			want: []string{`services[0] "demo/web:http/TCP/IPv4": cluster[33]: 10.244.1.8:8080 duplicates cluster[7]`},
		},
		{
			name: "serving address family",
			s: &backends.State{Family: backends.IPv4, Services: []backends.Service{func() backends.Service {
				s := svc
				s.Serving = []netip.Addr{netip.MustParseAddr("fd00::1")}
				return s
			}()}},
			want: []string{"serving[0]: fd00::1 is not ipv4"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := backends.Validate(tt.s)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, backends.ErrInvalidState) {
				t.Fatalf("Validate: %v, want ErrInvalidState", err)
			}
			msg := fmt.Sprint(err)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q\ndoes not contain %q", msg, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(msg, n) {
					t.Errorf("error %q\ncontains %q", msg, n)
				}
			}
		})
	}
}
