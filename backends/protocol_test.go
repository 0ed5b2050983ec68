package backends_test

import (
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

func TestProtocol(t *testing.T) {
	for _, n := range []uint8{0, 1, 58, 255} {
		if p := backends.ProtocolOf(n); p != "" {
			t.Errorf("ProtocolOf(%d) = %q, want \"\"", n, p)
		}
	}
	tests := []struct {
		p      backends.Protocol
		number uint8
		lower  string
	}{
		{backends.TCP, 6, "tcp"},
		{backends.UDP, 17, "udp"},
		{backends.SCTP, 132, "sctp"},
		{"tcp", 0, "tcp"}, // the Kubernetes spelling only
		{"ICMP", 0, "icmp"},
		{"", 0, ""},
	}
	for _, tc := range tests {
		t.Run(string(tc.p), func(t *testing.T) {
			if got := tc.p.Number(); got != tc.number {
				t.Errorf("Number() = %d, want %d", got, tc.number)
			}
			if got := tc.p.Valid(); got != (tc.number != 0) {
				t.Errorf("Valid() = %v", got)
			}
			if got := tc.p.Lower(); got != tc.lower {
				t.Errorf("Lower() = %q, want %q", got, tc.lower)
			}
			if tc.number != 0 {
				if got := backends.ProtocolOf(tc.number); got != tc.p {
					t.Errorf("ProtocolOf(%d) = %q, want %q", tc.number, got, tc.p)
				}
			}
		})
	}
}
