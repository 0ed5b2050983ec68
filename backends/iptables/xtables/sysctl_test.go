package xtables

import (
	"strings"
	"testing"
)

func TestSysctlPath(t *testing.T) {
	for _, tc := range []struct {
		key, want, wantErr string
	}{
		{key: SysctlRouteLocalnet, want: "/proc/sys/net/ipv4/conf/all/route_localnet"},
		{key: "net/netfilter/nf_conntrack_tcp_be_liberal", want: "/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal"},
		// Slashed, an interface name may hold a dot.
		{key: "net/ipv4/conf/eth0.100/route_localnet", want: "/proc/sys/net/ipv4/conf/eth0.100/route_localnet"},
		{key: "net/../../etc/passwd", wantErr: `sysctl "net/../../etc/passwd": not a sysctl name`},
		{key: "/net/ipv4/ip_forward", wantErr: "not a sysctl name"},
		{key: "net..ipv4", wantErr: "not a sysctl name"},
		{key: "", wantErr: "not a sysctl name"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			got, err := sysctlPath(tc.key)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("sysctlPath = %q, %v; want an error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("sysctlPath = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
