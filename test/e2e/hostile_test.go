//go:build linux

package e2e

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	fw "github.com/wasp-proxy/wasp/test/framework"
)

// TestHostileModule runs wasp with a topology module that misbehaves on
// the Services that ask it to: a call tree of 2^62 calls without a loop,
// a memory bomb that writes every page it takes, and a spinning loop.
// Throughout, a canary Service keeps answering, /healthz, /livez and
// /metrics keep answering, the hostile Services get the builtin
// semantics, wasp's peak resident memory stays under 1 GiB, and SIGTERM
// still stops it.
func TestHostileModule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := fw.Setup(ctx, t)
	s := &suite{env: env, ctx: ctx}

	wasm := filepath.Join(env.Dir, "misbehave.wasm")
	if out, err := exec.CommandContext(ctx, env.WaspBin, "module", "build", "../../host/runtime/testdata/modules/misbehave", "-o", wasm).CombinedOutput(); err != nil {
		t.Fatalf("build the test module: %v\n%s", err, out)
	}
	w := env.StartWasp(t, "--module", "topology="+wasm)

	ns := s.namespace(t)
	canary := env.CreateService(ctx, t, fw.ServiceSpec{Name: "canary", Namespace: ns})
	env.SetEndpoints(ctx, t, canary, v1.IPv4Protocol, fw.Ready("a-1", "b-1")...)
	canaryIP := fw.ClusterIP(t, canary, v1.IPv4Protocol)
	s.waitFor(t, s.client(), "tcp", canaryIP, 80, "a-1", "b-1")

	var hostile []netip.Addr
	for _, behaviour := range []string{"tree", "fill", "spin"} {
		svc := env.CreateService(ctx, t, fw.ServiceSpec{Name: behaviour, Namespace: ns,
			Annotations: map[string]string{"wasp.test/behaviour": behaviour}})
		env.SetEndpoints(ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-2")...)
		hostile = append(hostile, fw.ClusterIP(t, svc, v1.IPv4Protocol))
	}
	// A port the module fails for, with no last good decision, gets
	// upstream's semantics: these answer from their endpoint.
	for _, ip := range hostile {
		s.waitFor(t, s.client(), "tcp", ip, 80, "a-2")
	}

	// Keep probing while wasp keeps re-evaluating the hostile ports.
	health := netip.AddrPortFrom(s.nodeA().IPv4, 10256)
	var maxRSS int64
	endpoints := map[string]bool{"a-1": true, "b-1": true}
	for i := range 30 {
		if id, err := fw.Ask(s.client(), "tcp", canaryIP, 80, ask); err != nil || !endpoints[id] {
			t.Fatalf("probe %d: canary answered %q, %v", i, id, err)
		}
		for _, path := range []string{"/healthz", "/livez"} {
			if code, body, _, err := getJSON(s, health, path); err != nil || code != http.StatusOK {
				t.Fatalf("probe %d: %s: %d %v %v", i, path, code, body, err)
			}
		}
		if _, err := scrape(s); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		rss, err := w.RSS()
		if err != nil {
			t.Fatal(err)
		}
		maxRSS = max(maxRSS, rss)
		// A change still reaches the dataplane.
		if i == 15 {
			env.SetEndpoints(ctx, t, canary, v1.IPv4Protocol, fw.Ready("a-1", "a-3", "b-1")...)
			expectOnlyEventually(t, s, canaryIP, "a-1", "a-3", "b-1")
			endpoints["a-3"] = true
		}
		time.Sleep(500 * time.Millisecond)
	}
	peak, err := w.Memory("VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wasp resident memory with a hostile module: largest sample %d MiB, peak %d MiB", maxRSS>>20, peak>>20)
	if peak > 1<<30 {
		t.Errorf("wasp's peak resident memory is %d MiB, want under 1 GiB", peak>>20)
	}
	for _, want := range []string{`stage="topology"`, "reason"} {
		if !strings.Contains(w.Log(), want) {
			t.Errorf("wasp's log does not mention the failing module (%s)", want)
		}
	}

	// SIGTERM, not the SIGKILL that follows it after 10 s, ends wasp.
	w.Stop()
	_, err = w.Exited()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ProcessState.String() == "signal: killed" {
		t.Fatalf("wasp did not stop on SIGTERM: %v", err)
	}
}
