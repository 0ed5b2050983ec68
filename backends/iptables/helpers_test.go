package iptables

import (
	"bytes"
	"context"
	"flag"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/backendtest"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
)

// The tests use backendtest's address plan and States (node 1,
// 198.51.100.11, is the node under test; endpoints in 10.244.1.0/24 are
// on it), with two service ports more in goldenState4.

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var (
	ip  = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

const nodeIP = "198.51.100.11"

func ep(addr string, w uint32) backends.Endpoint { return backendtest.Endpoint(ip(addr), w) }

// svc returns a TCP service port "demo/<name>:http" on clusterIP:80 with
// HasAnyEndpoints set when f gives it Cluster or Local endpoints.
func svc(name, clusterIP string, f func(*backends.Service)) backends.Service {
	return backendtest.Service(name, ip(clusterIP), f)
}

func sortServices(ss []backends.Service) []backends.Service { return backendtest.SortServices(ss) }

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	backendtest.Golden(t, filepath.Join("testdata", name), got, *update)
}

func lineDiff(want, got string) string { return backendtest.LineDiff(want, got) }

// largeState returns n service ports with eps endpoints each.
func largeState(n, eps int) *backends.State { return backendtest.Large(n, eps) }

// goldenState4 is backendtest.Golden4 with a NodePort on the sticky
// service port (affinity across frontends), a load balancer of external
// policy Cluster with two remote endpoints, and an SCTP service port.
func goldenState4() *backends.State {
	s := backendtest.Golden4()
	for i := range s.Services {
		if s.Services[i].Name == "sticky" {
			s.Services[i].NodePort = 30012
		}
	}
	s.Services = sortServices(append(s.Services, svc("lb-cluster", "10.96.0.18", func(s *backends.Service) {
		s.NodePort = 30018
		s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.18")}
		s.Cluster = []backends.Endpoint{ep("10.244.2.18", 1), ep("10.244.2.19", 1)}
	}), svc("sctp", "10.96.0.20", func(s *backends.Service) {
		s.Protocol, s.Key = backends.SCTP, "demo/sctp:http/SCTP/IPv4"
		s.NodePort = 30020
		s.Cluster = []backends.Endpoint{ep("10.244.2.20", 1)}
	})))
	return s
}

// goldenState6 is backendtest.Golden6: NodePorts on a node address and
// on loopback, MasqueradeAll, affinity with weights, no endpoints.
func goldenState6() *backends.State { return backendtest.Golden6() }

// saveOf returns iptables-save -t table of k.
func saveOf(t *testing.T, k kernel, table string) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := k.save(context.Background(), table, &out); err != nil {
		t.Fatalf("save %s: %v", table, err)
	}
	return out.Bytes()
}

// chainNames returns the chains declared in iptables-save output.
func chainNames(save []byte) []string {
	var out []string
	for l := range bytes.Lines(save) {
		if name, ok := chainName(string(bytes.TrimSuffix(l, []byte("\n")))); ok {
			out = append(out, name)
		}
	}
	return out
}

// restoreText is the restore input text, for kernel.restore.
func restoreText(text string) xtables.Input { return xtables.Bytes([]byte(text)) }
