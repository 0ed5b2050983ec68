package xtables

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/wasp-proxy/wasp/internal/nsthread"
)

// The sysctls the iptables backend reads or sets.
const (
	// SysctlRouteLocalnet lets packets to 127.0.0.0/8 be routed after
	// DNAT, for NodePorts on localhost (IPv4 only).
	SysctlRouteLocalnet = "net.ipv4.conf.all.route_localnet"
	// SysctlTCPBeLiberal, when not 0, makes conntrack accept
	// out-of-window TCP packets instead of marking them INVALID.
	SysctlTCPBeLiberal = "net.netfilter.nf_conntrack_tcp_be_liberal"
)

// sysctlPath maps a sysctl name, dotted (net.ipv4.ip_forward) or
// slashed (net/ipv4/ip_forward), to its file under /proc/sys.
func sysctlPath(key string) (string, error) {
	if !strings.Contains(key, "/") {
		key = strings.ReplaceAll(key, ".", "/")
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return "", fmt.Errorf("sysctl %q: not a sysctl name", key)
		}
	}
	return filepath.Join("/proc/sys", key), nil
}

// ReadSysctl returns the value of sysctl key (dotted or slashed) in the
// network namespace at netns ("" for the current one), without its
// trailing newline.
func ReadSysctl(netns, key string) (string, error) {
	p, err := sysctlPath(key)
	if err != nil {
		return "", err
	}
	var out string
	// A /proc/sys/net file shows the namespace of the thread that opens
	// it.
	err = nsthread.Do(netns, func() error {
		b, err := os.ReadFile(p)
		out = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, err)
	}
	return out, nil
}

// SetSysctl sets sysctl key (dotted or slashed) to value in the network
// namespace at netns ("" for the current one), in one write as sysctl(8)
// does.
func SetSysctl(netns, key, value string) error {
	p, err := sysctlPath(key)
	if err != nil {
		return err
	}
	err = nsthread.Do(netns, func() error {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(value + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("set sysctl %s=%s: %w", key, value, err)
	}
	return nil
}
