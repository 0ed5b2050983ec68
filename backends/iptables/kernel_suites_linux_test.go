//go:build linux

package iptables

import (
	"context"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
)

// variants are the iptables variants every kernel suite runs with.
var variants = []xtables.Variant{xtables.Legacy, xtables.NFT}

// kernelHarness is harness on the iptables of variant v in a throwaway
// namespace.
func kernelHarness(v xtables.Variant) backendtest.Harness {
	h := harness(v)
	h.Kernel = true
	h.Probe = func(netns string) error {
		r, err := xtables.New(v, backends.IPv4, netns)
		if err != nil {
			return err
		}
		_, err = r.Save(context.Background(), TableNAT)
		return err
	}
	h.Unsupported = map[string]string{
		"Traffic/ClusterIP/undefined port rejected":       "upstream iptables mode lets it through to the ClusterIP, which nothing answers",
		"Traffic/ClusterIP/unallocated ClusterIP dropped": "upstream iptables mode has no Service CIDR drop (nftables mode only)",
	}
	return h
}

// TestKernelTraffic runs backendtest's traffic scenarios with each
// variant: real packets through the chains in node-a of a netlab cluster.
func TestKernelTraffic(t *testing.T) {
	for _, v := range variants {
		t.Run(string(v), func(t *testing.T) { backendtest.RunTraffic(t, kernelHarness(v)) })
	}
}

// TestKernelTransitions runs backendtest's transition suite with each
// variant: every partial restore is accepted, and the chains read back
// equal a fresh full sync's.
func TestKernelTransitions(t *testing.T) {
	for _, v := range variants {
		t.Run(string(v), func(t *testing.T) { backendtest.RunTransitions(t, kernelHarness(v)) })
	}
}

// TestKernelIdempotence runs backendtest's idempotence suite with each
// variant: the golden and transition states load, and a second Sync
// writes no service chain.
func TestKernelIdempotence(t *testing.T) {
	for _, v := range variants {
		t.Run(string(v), func(t *testing.T) { backendtest.RunIdempotence(t, kernelHarness(v)) })
	}
}

// TestKernelLifecycle runs backendtest's lifecycle suite with each
// variant: Close twice, Sync and Cleanup after Close, Cleanup twice.
func TestKernelLifecycle(t *testing.T) {
	for _, v := range variants {
		t.Run(string(v), func(t *testing.T) { backendtest.RunLifecycle(t, kernelHarness(v)) })
	}
}

// TestKernelChurn runs backendtest's churn suite with each variant: no
// new connection is lost while partial restores change other service
// ports or the probed one's endpoints and weights.
func TestKernelChurn(t *testing.T) {
	for _, v := range variants {
		t.Run(string(v), func(t *testing.T) { backendtest.RunChurn(t, kernelHarness(v)) })
	}
}
