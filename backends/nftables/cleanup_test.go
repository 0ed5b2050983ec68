package nftables

import (
	"fmt"
	"syscall"
	"testing"
)

func TestNoNFTables(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("nftables ipv4: %w", syscall.EPROTONOSUPPORT), true},
		{fmt.Errorf("nftables ipv6: %w", syscall.EAFNOSUPPORT), true},
		{errNotSupported, true},
		{fmt.Errorf("nftables: delete table ip wasp: %w", syscall.EPERM), false},
	}
	for _, tc := range tests {
		if got := noNFTables(tc.err); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
}
