package backendtest

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// Golden compares got with the file at path, or writes got there when
// update is set (a backend's -update flag). A difference is reported as
// an error with LineDiff.
func Golden(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n%s", path, LineDiff(string(want), got))
	}
}

// Large returns an IPv4 State of n TCP service ports "bench/svc-NNNNN:http"
// with eps endpoints each, for benchmarks at scale (up to 65,536 service
// ports; endpoints' addresses repeat every four).
func Large(n, eps int) *backends.State {
	s := &backends.State{
		Family:       backends.IPv4,
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/14")},
	}
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		sv := backends.Service{
			Key: "bench/" + name + ":http/TCP/IPv4", Namespace: "bench", Name: name, PortName: "http", Protocol: "TCP",
			ClusterIP: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Port: 80, HasAnyEndpoints: true,
		}
		for j := range eps {
			sv.Cluster = append(sv.Cluster, backends.Endpoint{
				Addr: netip.AddrFrom4([4]byte{10, 244 + byte(i>>14), byte(i >> 6), byte(i&63)<<2 | byte(j&3)}), Port: uint16(8080 + j), Weight: 1,
			})
		}
		s.Services = append(s.Services, sv)
	}
	return s
}
