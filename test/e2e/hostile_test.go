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
// a memory bomb that writes every page it takes, a spinning loop, and
// loops of one instruction or host call that each do up to 128 MiB of
// work (memory.fill, memory.copy, random_get). Throughout, a canary
// Service keeps answering and follows a change, /healthz answers every
// second with no gap over 2 s, /livez and /metrics keep answering, the
// hostile Services get the builtin semantics, wasp's peak resident
// memory stays under 1 GiB, and SIGTERM stops it within 5 s.
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
	for _, behaviour := range []string{"tree", "fill", "spin", "clear", "copy", "random"} {
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
	gaps := watchHealth(s, health)
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

	if gap := gaps(); gap > 2*time.Second {
		t.Errorf("/healthz went %v without answering, want at most 2s", gap)
	} else {
		t.Logf("the longest time /healthz went without answering: %v", gap)
	}

	// SIGTERM, not the SIGKILL that follows it after 10 s, ends wasp,
	// within 5 s.
	stopping := time.Now()
	w.Stop()
	if took := time.Since(stopping); took > 5*time.Second {
		t.Errorf("wasp took %v to stop on SIGTERM, want at most 5s", took)
	} else {
		t.Logf("wasp stopped %v after SIGTERM", took.Round(time.Millisecond))
	}
	_, err = w.Exited()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ProcessState.String() == "signal: killed" {
		t.Fatalf("wasp did not stop on SIGTERM: %v", err)
	}
}

// watchHealth asks /healthz at health every second until the returned
// function is called, which returns the longest time between two answers
// (or from the start to the first).
func watchHealth(s *suite, health netip.AddrPort) func() time.Duration {
	stop := make(chan struct{})
	done := make(chan time.Duration, 1)
	go func() {
		last, longest := time.Now(), time.Duration(0)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- max(longest, time.Since(last))
				return
			case <-tick.C:
			}
			if code, _, _, err := getJSON(s, health, "/healthz"); err == nil && code == http.StatusOK {
				longest = max(longest, time.Since(last))
				last = time.Now()
			}
		}
	}()
	return func() time.Duration {
		close(stop)
		return <-done
	}
}
