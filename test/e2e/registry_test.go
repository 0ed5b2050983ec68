//go:build linux

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem" // the registry's storage
	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasp-proxy/wasp/host/catalog"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/sigstoretest"
	"github.com/wasp-proxy/wasp/modules"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// TestRegistry runs wasp's endpoint-selection module from a real OCI
// registry (CNCF distribution, in the test process, filesystem storage):
// the 9:1 weights module pushed with wasp module push and named by a
// ServiceProxyModule takes over without a restart; a module that does
// not compile, a layer whose bytes do not match its digest and a digest
// the registry does not have each leave it serving (KeepLastGood), with
// the failure in wasp's log and in the node's status entry; and with
// the registry stopped, a new wasp process loads it from its
// --cache-dir. Keyless signatures of a Sigstore of the test's own are
// required: of the right identity the module loads, of another identity
// or without a signature it keeps serving the last good version, and the
// cold start verifies the cached signature bundle again. It logs how long the swap and the cold start took.
func TestRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := fw.Setup(ctx, t)
	s := &suite{env: env, ctx: ctx}

	reg := startRegistry(ctx, t, filepath.Join(env.Dir, "registry"))
	// wasp, in node-a's namespace, reaches the registry at the address the
	// CLI pushes to, 127.0.0.1:PORT: the same references work on both
	// sides, and a loopback registry is talked to over plain HTTP.
	if err := env.Forward(t, fw.ProxyNode, reg.host, reg.host); err != nil {
		t.Fatal(err)
	}
	repo := "oci://" + reg.host + "/wasp/heavy"

	heavy := filepath.Join(env.Dir, "heavy-registry.wasm")
	if out, err := exec.CommandContext(ctx, env.WaspBin, "module", "build", "testdata/heavy", "-o", heavy).CombinedOutput(); err != nil {
		t.Fatalf("build the test module: %v\n%s", err, out)
	}
	pinned := push(t, s, heavy, repo+":v1")

	// A module that does not compile. push refuses it, so it goes up
	// through host/oci with the heavy module's metadata: the registry
	// holds a well-formed artifact of bad bytes.
	meta, err := runtime.Inspect(mustRead(t, heavy))
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(env.Dir, "broken-registry.wasm")
	junk := []byte("\x00asm\x01\x00\x00\x00 not a module")
	if err := os.WriteFile(broken, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, env.WaspBin, "module", "push", broken, repo+":broken").CombinedOutput(); err == nil {
		t.Fatalf("wasp module push took a module that does not check out:\n%s", out)
	}
	c, err := oci.New(oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Push(ctx, repo+":broken", junk, meta)
	if err != nil {
		t.Fatal(err)
	}
	brokenRef := a.Reference

	// A layer that does not match its digest: the builtin selection module
	// (1:1, so it shows if it ever ran), its bytes then altered in the
	// registry's storage, at the same size.
	selection, err := modules.Wasm("selection")
	if err != nil {
		t.Fatal(err)
	}
	sel := filepath.Join(env.Dir, "selection-registry.wasm")
	if err := os.WriteFile(sel, selection, 0o644); err != nil {
		t.Fatal(err)
	}
	mismatchRef := push(t, s, sel, "oci://"+reg.host+"/wasp/selection:v1")
	reg.corrupt(t, runtime.Digest(selection))

	// A digest the registry does not have: that of other bytes.
	other := sha256.Sum256([]byte("other bytes"))
	missingRef := repo + "@sha256:" + hex.EncodeToString(other[:])

	objs := installServiceProxyModules(t, s)
	cache := filepath.Join(env.Dir, "cache")
	// The keyless section names a trusted root in env.Dir: the node
	// lets ServiceProxyModules name files there.
	w := env.StartWasp(t, "--cache-dir", cache, "--module-file-directory", env.Dir)
	pid := w.Pid()
	ip, spread := heavyService(t, s, "registry")

	created := time.Now()
	if _, err := objs.Create(ctx, serviceProxyModule("heavy", pinned), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer objs.Delete(ctx, "heavy", metav1.DeleteOptions{})
	swapped := untilHeavy(t, s, ip, created)
	if err := spread(0.9); err != nil {
		t.Fatalf("the module from the registry: %v", err)
	}
	wantStatus(t, s, objs, "heavy", catalog.PhaseActive, runtime.Digest(mustRead(t, heavy)), "")
	for _, marker := range []string{"ServiceProxyModules chosen for this node", "Swapping the module chain"} {
		line, at := logged(w.Log(), marker, created)
		t.Logf("ServiceProxyModule created → %q logged: %s: %s", marker, ms(at), line)
	}
	t.Logf("ServiceProxyModule created → 9:1 observed: %s (%s)", swapped, pinned)

	for _, tc := range []struct {
		name, source, reason string
	}{
		{"a module that does not compile", brokenRef, "invalid module"},
		{"a layer that does not match its digest", mismatchRef, "digest mismatch"},
		{"a digest the registry does not have", missingRef, "not found"},
	} {
		why := regexp.MustCompile(regexp.QuoteMeta(tc.source) + ".*" + tc.reason) // in wasp's log
		from := len(w.Log())
		setSpec(t, s, objs, "heavy", "source", tc.source)
		fw.Eventually(t, converge, func() error {
			for _, line := range strings.Split(w.Log()[from:], "\n") {
				if strings.Contains(line, "Loading the ServiceProxyModules' chain failed") && why.MatchString(line) {
					t.Logf("%s: %s", tc.name, line)
					return nil
				}
			}
			return fmt.Errorf("%s: no failed load matching %q in wasp's log yet", tc.name, why)
		})
		wantStatus(t, s, objs, "heavy", catalog.PhaseFailed, "", tc.reason)
		if err := spread(0.9); err != nil {
			t.Fatalf("KeepLastGood after %s: %v", tc.name, err)
		}
	}
	// Signatures: the module signed keylessly (a bundle referrer, as
	// cosign 3 attaches it) by release@example.com of this test's own
	// Sigstore. Required of the right identity, it loads; of another
	// identity, or on an unsigned module, the load fails closed and the
	// last good version keeps serving.
	setSpec(t, s, objs, "heavy", "source", pinned)
	wantStatus(t, s, objs, "heavy", catalog.PhaseActive, runtime.Digest(mustRead(t, heavy)), "")
	store := sigstoretest.New(t)
	root := filepath.Join(env.Dir, "trusted_root.json")
	if err := os.WriteFile(root, store.TrustedRoot(t), 0o644); err != nil {
		t.Fatal(err)
	}
	statement, err := oci.SignStatement(pinned)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AttachBundle(ctx, pinned, store.Sign(t, "release@example.com", "https://issuer.example.com", statement)); err != nil {
		t.Fatal(err)
	}
	signedBy := func(subject string) map[string]any {
		return map[string]any{"keyless": map[string]any{"trustedRoot": root,
			"identities": []any{map[string]any{"issuer": "https://issuer.example.com", "subject": subject}}}}
	}
	for _, tc := range []struct {
		name, source, subject, reason string
	}{
		{"a signature of another identity", pinned, "mallory@example.com", "signature not trusted"},
		{"an unsigned module", brokenRef, "release@example.com", "no signature"},
	} {
		from := len(w.Log())
		setSpec(t, s, objs, "heavy", "signatures", signedBy(tc.subject))
		setSpec(t, s, objs, "heavy", "source", tc.source)
		fw.Eventually(t, converge, func() error {
			for _, line := range strings.Split(w.Log()[from:], "\n") {
				if strings.Contains(line, "Loading the ServiceProxyModules' chain failed") && strings.Contains(line, tc.reason) {
					t.Logf("%s: %s", tc.name, line)
					return nil
				}
			}
			return fmt.Errorf("%s: no failed load for %q in wasp's log yet", tc.name, tc.reason)
		})
		wantStatus(t, s, objs, "heavy", catalog.PhaseFailed, "", tc.reason)
		if err := spread(0.9); err != nil {
			t.Fatalf("KeepLastGood after %s: %v", tc.name, err)
		}
	}
	// The right identity: verified, and its bundle cached for the cold
	// start below.
	setSpec(t, s, objs, "heavy", "signatures", signedBy("release@example.com"))
	setSpec(t, s, objs, "heavy", "source", pinned)
	wantStatus(t, s, objs, "heavy", catalog.PhaseActive, runtime.Digest(mustRead(t, heavy)), "")
	if err := spread(0.9); err != nil {
		t.Fatalf("the keyless-signed module: %v", err)
	}
	if done, err := w.Exited(); done || w.Pid() != pid {
		t.Fatalf("wasp restarted or exited (%v): module changes must not restart it", err)
	}

	// Cold start from the cache: the object names the registry's module
	// and requires its keyless signature, the registry is down, and
	// wasp's rules are gone, so only the new process, with its cache (the
	// module and its signature bundle, verified again offline), can answer
	// 9:1.
	reg.stop(t)
	w.Stop()
	if out, err := env.RunWasp(ctx, "cleanup"); err != nil {
		t.Fatalf("wasp cleanup: %v\n%s", err, out)
	}
	w2 := env.StartWasp(t, "--cache-dir", cache, "--module-file-directory", env.Dir)
	cold := untilHeavy(t, s, ip, w2.Started)
	if err := spread(0.9); err != nil {
		t.Fatalf("after a restart with the registry down: %v", err)
	}
	// wasp syncs with the configuration's chain first, then swaps in the
	// ServiceProxyModule's.
	for _, marker := range []string{"Sync done", "Swapping the module chain"} {
		line, at := logged(w2.Log(), marker, w2.Started)
		t.Logf("cold start: process start → first %q logged: %s: %s", marker, ms(at), line)
	}
	t.Logf("cold start from the cache, registry down: process start → 9:1 observed: %s", cold)
	if !strings.Contains(w2.Log(), "verifying the module's cached signature bundles again") {
		t.Errorf("the restarted wasp did not verify the module's cached signature bundle")
	}
	if strings.Contains(w2.Log(), "Loading the ServiceProxyModules' chain failed") {
		t.Errorf("the restarted wasp failed to load a module it has in its cache")
	}
}

// logged returns the first line of a wasp log that contains marker and
// was logged after since, and how long after since (by its klog header,
// in this machine's time zone, as wasp's); "" and 0 if there is none.
func logged(log, marker string, since time.Time) (string, time.Duration) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, marker) {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", line[1:min(len(line), 21)], time.Local)
		if err != nil {
			continue
		}
		if d := at.AddDate(since.Year(), 0, 0).Sub(since); d >= 0 {
			return line, d
		}
	}
	return "", 0
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// push pushes the module file to ref with wasp module push and returns
// the reference pinned by digest it prints.
func push(t *testing.T, s *suite, file, ref string) string {
	t.Helper()
	out, err := exec.CommandContext(s.ctx, s.env.WaspBin, "module", "push", file, ref).CombinedOutput()
	if err != nil {
		t.Fatalf("wasp module push %s %s: %v\n%s", file, ref, err, out)
	}
	pinned := strings.TrimSpace(string(out))
	repo := ref // without its tag
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo = ref[:i]
	}
	if ok, _ := regexp.MatchString(`^`+regexp.QuoteMeta(repo)+`@sha256:[0-9a-f]{64}$`, pinned); !ok {
		t.Fatalf("wasp module push %s %s printed %q, want %s@sha256:DIGEST", file, ref, pinned, repo)
	}
	return pinned
}

// untilHeavy samples 100 new connections to ip:80 at a time until a-1
// answers at least 75 of them, and says when, after start, the first
// such sample began and ended. Under 1:1, 75 of 100 is 5 standard
// deviations off (about 3 in 10 million); under 9:1, 75 is 5 below the
// mean. Failed connections (no rules yet) count as not yet.
func untilHeavy(t *testing.T, s *suite, ip netip.Addr, start time.Time) string {
	t.Helper()
	var took string
	fw.Eventually(t, converge, func() error {
		const n = 100
		began := time.Since(start)
		got := map[string]int{}
		for range n {
			id, err := fw.Ask(s.client(), "tcp", ip, 80, 500*time.Millisecond)
			if err != nil {
				return err
			}
			got[id]++
		}
		took = fmt.Sprintf("%s (the sample of %d connections ran %s–%s)", ms(time.Since(start)), n, ms(began), ms(time.Since(start)))
		if got["a-1"] < 75 {
			return fmt.Errorf("a-1 answered %d of %d, want at least 75 (%v)", got["a-1"], n, got)
		}
		return nil
	})
	return took
}

// registry is a CNCF distribution registry serving on the host's
// loopback from storage in a directory.
type registry struct {
	host string // 127.0.0.1:PORT
	root string // the filesystem driver's root directory
	srv  *http.Server
}

// startRegistry starts a registry with storage in root; t.Cleanup stops
// it. Its log goes to root/../registry.log.
func startRegistry(ctx context.Context, t *testing.T, root string) *registry {
	t.Helper()
	logPath := root + ".log"
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	logrus.SetOutput(logFile) // the registry logs through logrus's standard logger
	t.Cleanup(func() {
		logrus.SetOutput(os.Stderr)
		logFile.Close()
		if t.Failed() {
			t.Logf("registry log: %s", logPath)
		}
	})
	config := &configuration.Configuration{Storage: configuration.Storage{
		"filesystem": configuration.Parameters{"rootdirectory": root},
	}}
	config.HTTP.Secret = "e2e" // signs upload state; one instance, so any value
	app := handlers.NewApp(ctx, config)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &registry{host: ln.Addr().String(), root: root, srv: &http.Server{Handler: app}}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the registry: every connection to it is refused from now on.
func (r *registry) stop(t *testing.T) {
	t.Helper()
	if err := r.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Error(err)
	}
}

// corrupt changes the bytes of the blob digest in the registry's storage,
// keeping its size: the registry serves them under that digest.
func (r *registry) corrupt(t *testing.T, digest string) {
	t.Helper()
	hexDigest := strings.TrimPrefix(digest, "sha256:")
	path := filepath.Join(r.root, "docker/registry/v2/blobs/sha256", hexDigest[:2], hexDigest, "data")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b[8:] {
		b[8+i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
