package nftables

import (
	"flag"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
)

// The tests use backendtest's address plan.

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var (
	ip  = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

func ep(addr string, w uint32) backends.Endpoint { return backendtest.Endpoint(ip(addr), w) }

// svc returns a TCP service port "demo/<name>:http" on clusterIP:80 with
// HasAnyEndpoints set when f gives it Cluster or Local endpoints.
func svc(name, clusterIP string, f func(*backends.Service)) backends.Service {
	return backendtest.Service(name, ip(clusterIP), f)
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	backendtest.Golden(t, filepath.Join("testdata", name), got, *update)
}

// lineDiff shows the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string { return backendtest.LineDiff(want, got) }

// largeState returns n service ports with eps endpoints each.
func largeState(n, eps int) *backends.State { return backendtest.Large(n, eps) }
