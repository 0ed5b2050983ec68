package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/internal/ocitest"
	"github.com/wasp-proxy/wasp/internal/sigstoretest"
)

// writeKeyPair writes an ECDSA P-256 key pair as PEM files, the private key
// in PKCS #8 (openssl genpkey's format), and returns their paths.
func writeKeyPair(t *testing.T, dir, name string) (private, public string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	private, public = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	if err := os.WriteFile(private, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(public, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		t.Fatal(err)
	}
	return private, public
}

// pushSigning pushes the selection module to a registry of its own as
// oci://HOST/wasp/selection:v1 and writes two key pairs; it returns the
// pinned reference, the release key pair's files and the other public key.
func pushSigning(t *testing.T) (reg *ocitest.Registry, dir, pinned, key, pub, otherPub string) {
	t.Helper()
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of the machine's
	reg = ocitest.New(t)
	dir = t.TempDir()
	file, _ := selectionFile(t, dir)
	out, _, err := run(t, "", "module", "push", file, "oci://"+reg.Host+"/wasp/selection:v1")
	if err != nil {
		t.Fatal(err)
	}
	key, pub = writeKeyPair(t, dir, "release")
	_, otherPub = writeKeyPair(t, dir, "other")
	return reg, dir, strings.TrimSpace(out), key, pub, otherPub
}

// TestModuleSignVerify: wasp module sign, verify and inspect --key, the way
// an operator signs a module and checks it before rolling it out.
func TestModuleSignVerify(t *testing.T) {
	reg, _, pinned, key, pub, otherPub := pushSigning(t)

	_, _, err := run(t, "", "module", "verify", pinned, "--key", pub)
	if err == nil || !strings.Contains(err.Error(), oci.ErrNoSignature.Error()) {
		t.Fatalf("verify before signing: %v", err)
	}

	out, _, err := run(t, "", "module", "sign", "oci://"+reg.Host+"/wasp/selection:v1", "--key", key, "--format", "simplesigning")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "signed "+pinned+"\n") || !strings.Contains(out, ".sig") {
		t.Fatalf("sign printed %q", out)
	}

	out, _, err = run(t, "", "module", "verify", pinned, "--key", pub)
	if err != nil || !strings.Contains(out, "verified "+pinned) {
		t.Fatalf("verify printed %q, %v", out, err)
	}
	// Any one of several keys is enough.
	if _, _, err := run(t, "", "module", "verify", pinned, "--key", otherPub, "--key", pub); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, "", "module", "verify", pinned, "--key", otherPub)
	if err == nil || !strings.Contains(err.Error(), oci.ErrBadSignature.Error()) {
		t.Fatalf("verify with another key: %v", err)
	}
	_, _, err = run(t, "", "module", "verify", pinned, "--key", key)
	if err == nil || !strings.Contains(err.Error(), "PUBLIC KEY") {
		t.Fatalf("verify with a private key file: %v", err)
	}

	for _, tc := range []struct {
		name, key, want string
	}{
		{"right key", pub, "verified: 1 of 1 signatures at oci://"},
		{"another key", otherPub, "not verified: "},
	} {
		t.Run("inspect with "+tc.name, func(t *testing.T) {
			out, _, err := run(t, "", "module", "inspect", pinned, "--key", tc.key)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Signatures      string
				SignaturesFound []oci.FoundSignature
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got.Signatures, tc.want) {
				t.Fatalf("signatures: %q, want %q...", got.Signatures, tc.want)
			}
			if len(got.SignaturesFound) != 1 || got.SignaturesFound[0].Layout != "simplesigning" {
				t.Fatalf("signaturesFound: %+v, want the one simple-signing signature", got.SignaturesFound)
			}
		})
	}
}

// TestModuleSignBundle: wasp module sign writes a Sigstore bundle by
// default, as cosign 3 does, which verify accepts with the key only; a
// keyless bundle verifies with --trusted-root and the signer's identity.
func TestModuleSignBundle(t *testing.T) {
	_, dir, pinned, key, pub, otherPub := pushSigning(t)

	out, _, err := run(t, "", "module", "sign", pinned, "--key", key)
	if err != nil || !strings.Contains(out, "signature bundle in referrer sha256:") {
		t.Fatalf("sign printed %q, %v", out, err)
	}
	out, _, err = run(t, "", "module", "verify", pinned, "--key", pub)
	if err != nil || !strings.Contains(out, "1 signature bundles, signed by key ") {
		t.Fatalf("verify printed %q, %v", out, err)
	}
	if _, _, err = run(t, "", "module", "verify", pinned, "--key", otherPub); err == nil || !strings.Contains(err.Error(), oci.ErrBadSignature.Error()) {
		t.Fatalf("verify with another key: %v", err)
	}

	store := sigstoretest.New(t)
	root := filepath.Join(dir, "trusted_root.json")
	if err := os.WriteFile(root, store.TrustedRoot(t), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := oci.SignStatement(pinned)
	if err != nil {
		t.Fatal(err)
	}
	c, err := oci.New(oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AttachBundle(context.Background(), pinned, store.Sign(t, "release@example.com", "https://issuer.example.com", st)); err != nil {
		t.Fatal(err)
	}
	keyless := []string{"module", "verify", pinned, "--trusted-root", root, "--certificate-oidc-issuer", "https://issuer.example.com"}
	out, _, err = run(t, "", append(keyless, "--certificate-identity", "release@example.com")...)
	if err != nil || !strings.Contains(out, "signed by release@example.com (https://issuer.example.com)") {
		t.Fatalf("verify keyless printed %q, %v", out, err)
	}
	_, _, err = run(t, "", append(keyless, "--certificate-identity", "mallory@example.com")...)
	if err == nil || !strings.Contains(err.Error(), "mallory@example.com") {
		t.Fatalf("verify keyless, another identity: %v", err)
	}
	_, _, err = run(t, "", "module", "verify", pinned, "--certificate-identity", "release@example.com")
	if err == nil || !strings.Contains(err.Error(), "--trusted-root") {
		t.Fatalf("verify keyless without a trusted root: %v", err)
	}
	if _, _, err = run(t, "", "module", "verify", pinned); err == nil || !strings.Contains(err.Error(), "nothing to verify with") {
		t.Fatalf("verify without trust: %v", err)
	}
}
