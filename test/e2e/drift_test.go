//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	fw "github.com/wasp-proxy/wasp/test/framework"
)

// driftSyncPeriod is wasp's --sync-period in TestDrift: how often it
// checks its dataplane for drift.
const driftSyncPeriod = 3 * time.Second

// TestDrift changes wasp's dataplane behind its back while wasp runs, as
// an operator or another agent would, once per dataplane (nftables,
// iptables-nft, iptables-legacy; one control plane for all, as
// TestDataplane): with the nft command, an endpoint's element deleted, a
// Service's chain flushed, a simple service port's element deleted; with
// the variant's iptables command, one DNAT rule of a Service deleted, its
// policy chain flushed, and the rule of another Service in the fixed
// dispatch chain deleted. Each breaks the Service; wasp notices at its
// next drift check, logs what it repairs, counts it, and the Service
// answers again, with no change in the cluster. Between dataplanes wasp
// is stopped and `wasp cleanup` must leave nothing behind.
func TestDrift(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	env := fw.Setup(ctx, t)
	for _, dp := range fw.Dataplanes(t) {
		if !t.Run(dp.Name, func(t *testing.T) { runDrift(ctx, t, env, dp) }) && ctx.Err() != nil {
			return
		}
	}
}

// driftChange is one change behind wasp's back that breaks a Service.
type driftChange struct {
	name    string
	ip      netip.Addr // the Service the change breaks
	pod     string     // its one endpoint
	command []string   // run in the proxy node's namespace
	object  string     // the kind of object whose repair is counted
	logged  string     // in the log line of the repair
}

func runDrift(ctx context.Context, t *testing.T, env *fw.Env, dp fw.Dataplane) {
	if _, err := exec.LookPath("nft"); err != nil && !dp.IPTables() {
		t.Skip("e2e drift test: the nft command is not installed (Debian: apt-get install nftables)")
	}
	env.UseDataplane(t, dp)
	w := env.StartWasp(t, "--sync-period", driftSyncPeriod.String())
	s := &suite{env: env, ctx: ctx, prefix: "drift-" + dp.Name}
	// The next dataplane must not see this one's Services.
	defer s.deleteServices(t)

	ns := s.namespace(t)
	// A NodePort Service has chains of its own; a ClusterIP-only one is
	// simple in nftables: elements only (backends/nftables, "simple
	// service ports").
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "drift", Namespace: ns, Type: v1.ServiceTypeNodePort})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)
	simple := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "drift-simple", Namespace: ns})
	s.env.SetEndpoints(s.ctx, t, simple, v1.IPv4Protocol, fw.Ready("a-2")...)
	simpleIP := fw.ClusterIP(t, simple, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1")
	s.waitFor(t, s.client(), "tcp", simpleIP, 80, "a-2")

	// No drift while nobody touches the dataplane: checks pass, none
	// repairs.
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

	var changes []driftChange
	if dp.IPTables() {
		changes = iptablesDrift(t, s, dp, ip, simpleIP)
	} else {
		changes = nftablesDrift(t, s, ip, simpleIP)
	}
	for _, tc := range changes {
		t.Run(tc.name, func(t *testing.T) {
			before, err := scrape(s)
			if err != nil {
				t.Fatal(err)
			}
			checks, _ := sample(before, "wasp_dataplane_drift_checks_total", "ip_family=IPv4")
			repairs, _ := sample(before, "wasp_dataplane_drift_repairs_total", "ip_family=IPv4", "object="+tc.object)

			changed := time.Now()
			if out, err := s.nodeA().NS.Command(s.ctx, tc.command[0], tc.command[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(tc.command, " "), err, out)
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
	w.Stop()
	expectCleanedUp(t, s)
}

// nftablesDrift are the changes of the nftables dataplane: ip is the
// ClusterIP of a Service with a NodePort and one endpoint, a-1;
// simpleIP that of a ClusterIP-only one with one endpoint, a-2.
func nftablesDrift(t *testing.T, s *suite, ip, simpleIP netip.Addr) []driftChange {
	serviceChain := serviceChainOf(t, s, ip)
	return []driftChange{{
		name:    "endpoint element deleted",
		ip:      ip,
		pod:     "a-1",
		command: []string{"nft", "delete", "element", "ip", "wasp", "buckets-cluster-1", fmt.Sprintf("{ %s . tcp . 80 . 0 }", ip)},
		object:  "element",
		logged:  fmt.Sprintf("map buckets-cluster-1: element %s . tcp . 80 . 0 missing", ip),
	}, {
		name:    "service chain flushed",
		ip:      ip,
		pod:     "a-1",
		command: []string{"nft", "flush", "chain", "ip", "wasp", serviceChain},
		object:  "rule",
		logged:  fmt.Sprintf("chain %s: 0 rules, want ", serviceChain),
	}, {
		name:    "simple service element deleted",
		ip:      simpleIP,
		pod:     "a-2",
		command: []string{"nft", "delete", "element", "ip", "wasp", "simple-services", fmt.Sprintf("{ %s . tcp . 80 }", simpleIP)},
		object:  "element",
		logged:  fmt.Sprintf("set simple-services: element %s . tcp . 80 missing", simpleIP),
	}}
}

// iptablesDrift are the changes of an iptables dataplane, made with the
// iptables command of its variant: ip and simpleIP as nftablesDrift's.
// Deleting a rule by its number in the chain as iptables-save lists it
// needs no parsing of its arguments.
func iptablesDrift(t *testing.T, s *suite, dp fw.Dataplane, ip, simpleIP netip.Addr) []driftChange {
	iptables := "iptables-" + dp.Variant
	nat := savedNAT(t, s, dp)
	policy := policyChainOf(t, nat, ip)
	dnat := ruleNumber(t, nat, policy, "-j DNAT")
	dispatch := ruleNumber(t, nat, "WASP-SERVICES", "-d "+simpleIP.String()+"/32")
	return []driftChange{{
		name:    "DNAT rule deleted",
		ip:      ip,
		pod:     "a-1",
		command: []string{iptables, "-t", "nat", "-D", policy, strconv.Itoa(dnat)},
		object:  "rule",
		logged:  fmt.Sprintf("table nat: chain %s: %d rules, want %d; rule %d differs", policy, rules(nat, policy)-1, rules(nat, policy), dnat),
	}, {
		name:    "policy chain flushed",
		ip:      ip,
		pod:     "a-1",
		command: []string{iptables, "-t", "nat", "-F", policy},
		object:  "rule",
		logged:  fmt.Sprintf("table nat: chain %s: 0 rules, want %d", policy, rules(nat, policy)),
	}, {
		name:    "dispatch rule deleted",
		ip:      simpleIP,
		pod:     "a-2",
		command: []string{iptables, "-t", "nat", "-D", "WASP-SERVICES", strconv.Itoa(dispatch)},
		object:  "rule",
		logged:  fmt.Sprintf("table nat: chain WASP-SERVICES: %d rules, want %d", rules(nat, "WASP-SERVICES")-1, rules(nat, "WASP-SERVICES")),
	}}
}

// savedNAT returns the rule lines of the proxy node's nat table, as the
// variant's iptables-save lists them.
func savedNAT(t *testing.T, s *suite, dp fw.Dataplane) []string {
	t.Helper()
	out, err := s.nodeA().NS.Command(s.ctx, "iptables-"+dp.Variant+"-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-A ") {
			lines = append(lines, l)
		}
	}
	return lines
}

var policyChainRE = regexp.MustCompile(`-j (WASP-SVC-[A-Z2-7]+)`)

// policyChainOf returns the Cluster policy chain of the service port at
// ip:80, from its rule in WASP-SERVICES.
func policyChainOf(t *testing.T, nat []string, ip netip.Addr) string {
	t.Helper()
	for _, l := range nat {
		if strings.HasPrefix(l, "-A WASP-SERVICES ") && strings.Contains(l, "-d "+ip.String()+"/32 ") && strings.Contains(l, "--dport 80 ") {
			if m := policyChainRE.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		}
	}
	t.Fatalf("no policy chain of %s in WASP-SERVICES:\n%s", ip, strings.Join(nat, "\n"))
	return ""
}

// ruleNumber returns the number (from 1) of the first rule of chain that
// contains substr.
func ruleNumber(t *testing.T, nat []string, chain, substr string) int {
	t.Helper()
	n := 0
	for _, l := range nat {
		if !strings.HasPrefix(l, "-A "+chain+" ") {
			continue
		}
		n++
		if strings.Contains(l, substr) {
			return n
		}
	}
	t.Fatalf("no rule of %s with %q:\n%s", chain, substr, strings.Join(nat, "\n"))
	return 0
}

// rules returns the number of rules of chain.
func rules(nat []string, chain string) int {
	n := 0
	for _, l := range nat {
		if strings.HasPrefix(l, "-A "+chain+" ") {
			n++
		}
	}
	return n
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
