//go:build linux

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/wasp-proxy/wasp/test/controlplane"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// TestMigration moves a node from upstream kube-proxy's iptables mode to
// wasp's iptables mode and back, the way docs/migration.md tells an
// operator to, under continuous traffic: a long-lived connection and a
// stream of new ones through a ClusterIP must not see one failure. Each
// direction starts the new proxy while the old one still runs (wasp's
// chains are its own, WASP-*, so both sets of rules coexist and the first
// jump in the built-in chains decides), stops the old one, removes its
// rules (kube-proxy --cleanup, or wasp cleanup), and then shows that the
// new proxy alone programs an endpoint change.
//
// It builds upstream kube-proxy (controlplane.BuildKubeProxy, cached like
// the apiserver), and runs the iptables-nft variant, the one the kube-proxy
// binary finds as `iptables` on this machine.
func TestMigration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	fw.Skip(t)
	kubeProxy, err := controlplane.BuildKubeProxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env := fw.Setup(ctx, t)
	env.UseDataplane(t, fw.IPTablesNFTDataplane)
	s := &suite{env: env, ctx: ctx, prefix: "migration"}
	kpArgs, err := env.KubeProxyArgs(fw.ProxyNode, env.Kubeconfig, "iptables", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy has the default metrics and healthz ports of the node's
	// loopback; wasp, running beside it, gets others.
	waspArgs := []string{"--metrics-bind-address", "127.0.0.1:20249", "--healthz-bind-address", "127.0.0.1:20256"}

	ns := s.namespace(t)
	svc := s.env.CreateService(ctx, t, fw.ServiceSpec{Name: "moving", Namespace: ns})
	s.env.SetEndpoints(ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "b-1")...)
	ip := fw.ClusterIP(t, svc, v1.IPv4Protocol)

	kp := env.StartProcess(t, env.ProxyNS(), kubeProxy, kpArgs...)
	s.waitFor(t, s.client(), "tcp", ip, 80, "a-1", "b-1")
	expectChains(t, s, "kube-proxy", "KUBE-SERVICES", true)

	long := startLongLived(t, s, ip)
	fresh := startTrafficTo(s, "tcp", ip, 80, 5*time.Millisecond)
	stop := func(what string) {
		t.Helper()
		requests, failures := long.stop()
		counts, errs := fresh.stop()
		requests += sum(counts) + len(errs)
		for _, err := range errs {
			failures = append(failures, fmt.Errorf("new connection: %v", err))
		}
		if len(failures) > 0 {
			t.Fatalf("%s: %d of %d requests failed, first: %v", what, len(failures), requests, failures[0])
		}
		t.Logf("%s: %d requests, none failed", what, requests)
	}

	// kube-proxy → wasp.
	w := env.StartWasp(t, waspArgs...)
	fw.Eventually(t, converge, func() error {
		r, err := env.ReadRuleset()
		if err != nil {
			return err
		}
		if !strings.Contains(strings.Join(r.Lines, "\n"), ip.String()) {
			return fmt.Errorf("wasp has not programmed %s yet (%s)", ip, r.Counts())
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // traffic through both sets of rules
	kp.Stop()
	if out, err := env.ProxyNS().Command(ctx, kubeProxy, "--cleanup", "--v", "2").CombinedOutput(); err != nil {
		t.Fatalf("kube-proxy --cleanup: %v\n%s", err, out)
	}
	expectChains(t, s, "kube-proxy --cleanup", "KUBE-SERVICES", false)
	s.env.SetEndpoints(ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "a-2", "b-1")...)
	expectOnlyEventually(t, s, ip, "a-1", "a-2", "b-1")
	stop("kube-proxy to wasp")

	// wasp → kube-proxy.
	long = startLongLived(t, s, ip)
	fresh = startTrafficTo(s, "tcp", ip, 80, 5*time.Millisecond)
	kp = env.StartProcess(t, env.ProxyNS(), kubeProxy, kpArgs...)
	fw.Eventually(t, converge, func() error {
		if !strings.Contains(kp.Log(), "SyncProxyRules complete") {
			return fmt.Errorf("kube-proxy has not synced yet")
		}
		return nil
	})
	expectChains(t, s, "kube-proxy", "KUBE-SERVICES", true)
	time.Sleep(500 * time.Millisecond)
	w.Stop()
	if out, err := env.RunWasp(ctx, "cleanup"); err != nil {
		t.Fatalf("wasp cleanup: %v\n%s", err, out)
	}
	if r, err := env.ReadRuleset(); err != nil {
		t.Fatal(err)
	} else if r.Chains+r.Rules+r.Sets != 0 {
		t.Fatalf("after wasp cleanup, wasp's chains or sets remain: %s", r.Counts())
	}
	s.env.SetEndpoints(ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-2", "b-1", "b-2")...)
	expectOnlyEventually(t, s, ip, "a-2", "b-1", "b-2")
	stop("wasp to kube-proxy")
	kp.Stop()
}

// expectChains checks whether the proxy node's nat table (the dataplane's
// iptables variant) has chain.
func expectChains(t *testing.T, s *suite, who, chain string, want bool) {
	t.Helper()
	out, err := s.env.ProxyNS().Command(s.ctx, "iptables-"+s.env.Dataplane().Variant+"-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save: %v\n%s", err, out)
	}
	if got := strings.Contains(string(out), ":"+chain+" "); got != want {
		t.Fatalf("after %s, nat chain %s present: %v, want %v", who, chain, got, want)
	}
}
