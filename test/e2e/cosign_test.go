//go:build linux

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/internal/sigstoretest"
	"github.com/wasp-proxy/wasp/modules"
	"github.com/wasp-proxy/wasp/test/controlplane"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// TestCosign checks wasp's signatures against cosign's, both ways, on a
// real registry (CNCF distribution, which has no referrers API, so
// bundles go through the referrers tag): what cosign 3 signs with a key
// (a Sigstore bundle, and the older .sig layout), wasp verifies; what
// wasp signs, in either layout, cosign verifies; a keyless bundle of the
// test's own Sigstore verifies with both, for its identity only. Nothing
// reaches the network: cosign gets a signing config without services and
// the trusted root on the command line.
func TestCosign(t *testing.T) {
	fw.Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cosignBin, err := controlplane.BuildCosign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waspBin, err := fw.BuildWasp(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	reg := startRegistry(ctx, t, filepath.Join(dir, "registry"))

	run := func(bin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		// cosign keeps its TUF cache under $HOME; the key password is empty.
		cmd.Env = append(os.Environ(), "HOME="+dir, "COSIGN_PASSWORD=", "COSIGN_YES=true", "DOCKER_CONFIG="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(bin string, args ...string) string {
		t.Helper()
		out, err := run(bin, args...)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
		}
		return out
	}
	fails := func(bin string, args ...string) string {
		t.Helper()
		out, err := run(bin, args...)
		if err == nil {
			t.Fatalf("%s %s succeeded:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
		}
		return out
	}
	// pushModule pushes a builtin module to repository cosign/REPO and
	// returns the wasp reference and cosign's (no scheme).
	pushModule := func(name, repo string) (string, string) {
		t.Helper()
		wasm, err := modules.Wasm(name)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, name+".wasm")
		if err := os.WriteFile(file, wasm, 0o644); err != nil {
			t.Fatal(err)
		}
		ref := strings.TrimSpace(must(waspBin, "module", "push", file, "oci://"+reg.host+"/cosign/"+repo+":v1"))
		return ref, strings.TrimPrefix(ref, oci.Scheme)
	}
	registryFlags := []string{"--allow-insecure-registry", "--allow-http-registry"}
	cosign := func(args ...string) []string { return append(args, registryFlags...) }

	must(cosignBin, "generate-key-pair", "--output-key-prefix", filepath.Join(dir, "cosign"))
	cosignKey, cosignPub := filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
	noServices := filepath.Join(dir, "signing-config.json")
	must(cosignBin, "signing-config", "create", "--out", noServices)
	waspKey, waspPub := filepath.Join(dir, "wasp.key"), filepath.Join(dir, "wasp.pub")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.WriteFile(waspKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600),
		os.WriteFile(waspPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)); err != nil {
		t.Fatal(err)
	}

	t.Run("cosign signs a bundle, wasp verifies", func(t *testing.T) {
		ref, img := pushModule("selection", "selection")
		must(cosignBin, cosign("sign", "--key", cosignKey, "--signing-config", noServices, img)...)
		out := must(waspBin, "module", "verify", ref, "--key", cosignPub)
		if !strings.Contains(out, "1 signature bundles, signed by key") {
			t.Fatalf("wasp module verify printed %q", out)
		}
		fails(waspBin, "module", "verify", ref, "--key", waspPub)
	})
	t.Run("cosign signs the .sig layout, wasp verifies", func(t *testing.T) {
		ref, img := pushModule("topology", "topology")
		must(cosignBin, cosign("sign", "--key", cosignKey, "--new-bundle-format=false", "--use-signing-config=false", "--tlog-upload=false", img)...)
		out := must(waspBin, "module", "verify", ref, "--key", cosignPub)
		if !strings.Contains(out, "1 of 1 signatures at") {
			t.Fatalf("wasp module verify printed %q", out)
		}
	})
	t.Run("wasp signs, cosign verifies", func(t *testing.T) {
		ref, img := pushModule("trafficpolicy", "trafficpolicy")
		must(waspBin, "module", "sign", ref, "--key", waspKey)
		out := must(cosignBin, cosign("verify", "--key", waspPub, "--insecure-ignore-tlog=true", img)...)
		if !strings.Contains(out, oci.SignPredicateType) {
			t.Fatalf("cosign verify of wasp's bundle printed %q", out)
		}
		fails(cosignBin, cosign("verify", "--key", cosignPub, "--insecure-ignore-tlog=true", img)...)
		must(waspBin, "module", "sign", ref, "--key", waspKey, "--format", "simplesigning")
		out = must(cosignBin, cosign("verify", "--key", waspPub, "--insecure-ignore-tlog=true", "--new-bundle-format=false", img)...)
		if !strings.Contains(out, oci.SignaturePayloadType) {
			t.Fatalf("cosign verify of wasp's .sig signature printed %q", out)
		}
	})
	t.Run("keyless", func(t *testing.T) {
		ref, img := pushModule("selection", "keyless")
		store := sigstoretest.New(t)
		root := filepath.Join(dir, "trusted_root.json")
		if err := os.WriteFile(root, store.TrustedRoot(t), 0o644); err != nil {
			t.Fatal(err)
		}
		statement, err := oci.SignStatement(ref)
		if err != nil {
			t.Fatal(err)
		}
		c, err := oci.New(oci.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AttachBundle(ctx, ref, store.Sign(t, "release@example.com", "https://issuer.example.com", statement)); err != nil {
			t.Fatal(err)
		}
		identity := func(subject string) []string {
			return []string{"--certificate-identity", subject, "--certificate-oidc-issuer", "https://issuer.example.com"}
		}
		// The test's Sigstore has no certificate transparency log, so its
		// certificates carry no SCT: cosign is told, wasp sees it in the
		// trusted root.
		must(cosignBin, cosign(append([]string{"verify", "--trusted-root", root, "--insecure-ignore-sct", img}, identity("release@example.com")...)...)...)
		fails(cosignBin, cosign(append([]string{"verify", "--trusted-root", root, "--insecure-ignore-sct", img}, identity("mallory@example.com")...)...)...)
		out := must(waspBin, append([]string{"module", "verify", ref, "--trusted-root", root}, identity("release@example.com")...)...)
		if !strings.Contains(out, "signed by release@example.com (https://issuer.example.com)") {
			t.Fatalf("wasp module verify printed %q", out)
		}
		fails(waspBin, append([]string{"module", "verify", ref, "--trusted-root", root}, identity("mallory@example.com")...)...)
	})
}
