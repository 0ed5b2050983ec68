//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	fw "github.com/wasp-proxy/wasp/test/framework"
)

// driftSyncPeriod is wasp's --sync-period in TestDrift: how often it
// checks its tables for drift.
const driftSyncPeriod = 3 * time.Second

// TestDrift changes wasp's nftables table behind its back with the nft
// command, as an operator or another agent would, while wasp runs: an
// endpoint's element deleted, a Service's chain flushed, a simple service
// port's element deleted. Each breaks the Service; wasp notices at its
// next drift check, logs what it repairs, counts it, and the Service
// answers again, with no change in the cluster.
func TestDrift(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("e2e drift test: the nft command is not installed (Debian: apt-get install nftables)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := fw.Setup(ctx, t)
	w := env.StartWasp(t, "--sync-period", driftSyncPeriod.String())
	s := &suite{env: env, ctx: ctx}

	ns := s.namespace(t)
	// A NodePort Service has chains of its own; a ClusterIP-only one is
	// simple: elements only (backends/nftables, "simple service ports").
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "drift", Namespace: ns, Type: v1.ServiceTypeNodePort})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	simple := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "drift-simple", Namespace: ns})
	s.env.SetEndpoints(s.ctx, t, simple, v1.IPv4Protocol, fw.Ready("a-2")...)
	simpleIP := fw.ClusterIP(t, simple, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1")
	s.waitFor(t, s.client(), "tcp", simpleIP, 80, "a-2")

	// No drift while nobody touches the table: checks pass, none repairs.
	fw.Eventually(t, converge, func() error {
		mfs, err := scrape(s)
		if err != nil {
			return err
		}
		if v, _ := sample(mfs, "wasp_dataplane_drift_checks_total", "ip_family=IPv4", "result=clean"); v < 2 {
			return fmt.Errorf("%v clean drift checks, want 2", v)
		}
		return nil
	})
	mfs, err := scrape(s)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := sample(mfs, "wasp_dataplane_drift_checks_total", "result=drifted"); v != 0 {
		t.Fatalf("%v drifted checks before any change behind wasp's back", v)
	}

	serviceChain := serviceChainOf(t, s, ip)
	for _, tc := range []struct {
		name   string
		ip     netip.Addr // the Service the change breaks
		pod    string     // its one endpoint
		nft    []string
		object string
		logged string // in the log line of the repair
	}{{
		name:   "endpoint element deleted",
		ip:     ip,
		pod:    "a-1",
		nft:    []string{"delete", "element", "ip", "wasp", "buckets-cluster-1", fmt.Sprintf("{ %s . tcp . 80 . 0 }", ip)},
		object: "element",
		logged: fmt.Sprintf("map buckets-cluster-1: element %s . tcp . 80 . 0 missing", ip),
	}, {
		name:   "service chain flushed",
		ip:     ip,
		pod:    "a-1",
		nft:    []string{"flush", "chain", "ip", "wasp", serviceChain},
		object: "rule",
		logged: fmt.Sprintf("chain %s: 0 rules, want ", serviceChain),
	}, {
		name:   "simple service element deleted",
		ip:     simpleIP,
		pod:    "a-2",
		nft:    []string{"delete", "element", "ip", "wasp", "simple-services", fmt.Sprintf("{ %s . tcp . 80 }", simpleIP)},
		object: "element",
		logged: fmt.Sprintf("set simple-services: element %s . tcp . 80 missing", simpleIP),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := scrape(s)
			if err != nil {
				t.Fatal(err)
			}
			checks, _ := sample(before, "wasp_dataplane_drift_checks_total", "ip_family=IPv4")
			repairs, _ := sample(before, "wasp_dataplane_drift_repairs_total", "ip_family=IPv4", "object="+tc.object)

			changed := time.Now()
			if out, err := s.nodeA().NS.Command(s.ctx, "nft", tc.nft...).CombinedOutput(); err != nil {
				t.Fatalf("nft %s: %v\n%s", strings.Join(tc.nft, " "), err, out)
			}
			// The change breaks the Service until the repair; a check may
			// repair it before this request, so a success proves nothing.
			_, brokenErr := fw.Ask(s.client(), "tcp", tc.ip, 80, 500*time.Millisecond)

			var back time.Duration
			fw.Eventually(t, converge, func() error {
				if _, err := fw.Ask(s.client(), "tcp", tc.ip, 80, 500*time.Millisecond); err != nil {
					return err
				}
				back = time.Since(changed)
				return nil
			})
			after, err := scrape(s)
			if err != nil {
				t.Fatal(err)
			}
			// The check that ran across the change may have read the
			// object before it; the one after it finds the change.
			checksAfter, _ := sample(after, "wasp_dataplane_drift_checks_total", "ip_family=IPv4")
			if checksAfter > checks+3 {
				t.Errorf("the Service answered again only after %v drift checks, want it repaired by the second after the change", checksAfter-checks)
			}
			if v, _ := sample(after, "wasp_dataplane_drift_repairs_total", "ip_family=IPv4", "object="+tc.object); v != repairs+1 {
				t.Errorf("wasp_dataplane_drift_repairs_total{object=%s} went from %v to %v, want one repair", tc.object, repairs, v)
			}
			line, _ := logged(w.Log(), "Dataplane changed behind wasp's back", changed)
			if !strings.Contains(line, tc.logged) {
				t.Errorf("the repair's log line %q does not name %q", line, tc.logged)
			}
			expectOnly(t, s.client(), "tcp", tc.ip, 80, 10, tc.pod)
			t.Logf("%s: broken right after (%v); answering again after %v (sync period %v); log: %s",
				tc.name, brokenErr, back.Round(100*time.Millisecond), driftSyncPeriod, line[strings.Index(line, "]")+1:])
		})
	}
}

var serviceChainRE = regexp.MustCompile(`goto (service-[^ ,\n]+)`)

// serviceChainOf returns the name of the Cluster chain of the service
// port at ip:80, from service-ips as nft lists it.
func serviceChainOf(t *testing.T, s *suite, ip netip.Addr) string {
	t.Helper()
	out, err := s.nodeA().NS.Command(s.ctx, "nft", "list", "map", "ip", "wasp", "service-ips").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list map: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, ip.String()+" . tcp . 80 ") {
			if m := serviceChainRE.FindStringSubmatch(line); m != nil {
				return m[1]
			}
		}
	}
	t.Fatalf("no service chain of %s in service-ips:\n%s", ip, out)
	return ""
}
