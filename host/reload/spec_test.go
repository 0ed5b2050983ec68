package reload

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/host/config"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/internal/sigstoretest"
)

// publicKeyPEM returns a new ECDSA key and its public key as a PEM block.
func publicKeyPEM(t *testing.T) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// TestModuleSpecKeys: a module's public keys and trusted root are read inline or from a
// file; a missing file is an error naming the key.
func TestModuleSpecKeys(t *testing.T) {
	key, block := publicKeyPEM(t)
	file := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(file, []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	m := v1alpha1.ModuleConfiguration{Stage: "endpoint-selection", Source: "oci://r.example/m@sha256:" + strings.Repeat("a", 64),
		Signatures: &v1alpha1.ModuleSignatures{PublicKeys: []string{block, file}}}
	c := &v1alpha1.WaspConfiguration{Modules: []v1alpha1.ModuleConfiguration{m}}
	config.Default(c)
	spec, err := ModuleSpec(c.Modules[0])
	if err != nil || len(spec.Signatures) != 1 || len(spec.Signatures[0].PublicKeys) != 2 {
		t.Fatalf("moduleSpec: %+v, %v; want one policy of 2 keys", spec.Signatures, err)
	}
	// The node-wide policy comes first, and both are required.
	global := oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{key.Public()}}
	if spec, err = ModuleSpec(c.Modules[0], global); err != nil || len(spec.Signatures) != 2 || len(spec.Signatures[0].PublicKeys) != 1 {
		t.Fatalf("moduleSpec with a node-wide policy: %+v, %v", spec.Signatures, err)
	}
	// ... for every module but a builtin one: a file module gets the
	// policy too, which makes it fail to load (host/chain).
	file2 := c.Modules[0]
	file2.Source, file2.Signatures = "file:///etc/wasp/m.wasm", nil
	if spec, err = ModuleSpec(file2, global); err != nil || len(spec.Signatures) != 1 {
		t.Fatalf("moduleSpec of a file module with a node-wide policy: %+v, %v", spec.Signatures, err)
	}
	builtin := c.Modules[0]
	builtin.Source = "builtin:selection"
	if spec, err = ModuleSpec(builtin, global); err != nil || len(spec.Signatures) != 0 {
		t.Fatalf("moduleSpec of a builtin module with a node-wide policy: %+v, %v", spec.Signatures, err)
	}

	// Keyless: the trusted root inline or from a file.
	root := sigstoretest.New(t).TrustedRoot(t)
	rootFile := filepath.Join(t.TempDir(), "trusted_root.json")
	if err := os.WriteFile(rootFile, root, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{string(root), rootFile} {
		c.Modules[0].Signatures = &v1alpha1.ModuleSignatures{Keyless: &v1alpha1.KeylessSignatures{TrustedRoot: r,
			Identities: []v1alpha1.CertificateIdentity{{Issuer: "https://issuer.example.com", SubjectRegExp: "@example.com$"}}}}
		if spec, err = ModuleSpec(c.Modules[0]); err != nil || len(spec.Signatures) != 1 || spec.Signatures[0].Keyless == nil {
			t.Fatalf("moduleSpec, keyless: %+v, %v", spec.Signatures, err)
		}
	}
	c.Modules[0].Signatures.Keyless.TrustedRoot = `{"mediaType": "nonsense"}`
	if _, err := ModuleSpec(c.Modules[0]); err == nil || !strings.Contains(err.Error(), "signatures.keyless: invalid trusted root") {
		t.Fatalf("a bad trusted root: %v, want an error naming signatures.keyless", err)
	}

	c.Modules[0].Signatures = &v1alpha1.ModuleSignatures{PublicKeys: []string{filepath.Join(t.TempDir(), "gone.pem")}}
	if _, err := ModuleSpec(c.Modules[0]); err == nil || !strings.Contains(err.Error(), "signatures.publicKeys[0]") {
		t.Fatalf("a missing key file: %v, want an error naming signatures.publicKeys[0]", err)
	}
}

// TestCatalogSpecFiles: a ServiceProxyModule names files only under the
// node's moduleFileDirectories (none by default), for its source, keys and
// trusted root alike; a file's bad content is refused without a byte of
// it in the error; a device is refused unread.
func TestCatalogSpecFiles(t *testing.T) {
	_, block := publicKeyPEM(t)
	allowed, outside := t.TempDir(), t.TempDir()
	write := func(dir, name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyIn, keyOut := write(allowed, "key.pem", block), write(outside, "key.pem", block)
	secret := write(allowed, "secret", "root:x:0:0:root:/root:/bin/bash\n")
	ref := "oci://r.example/m@sha256:" + strings.Repeat("a", 64)
	module := func(source string, keys ...string) v1alpha1.ModuleConfiguration {
		m := v1alpha1.ModuleConfiguration{Stage: "endpoint-selection", Source: source}
		if len(keys) > 0 {
			m.Signatures = &v1alpha1.ModuleSignatures{PublicKeys: keys}
		}
		c := &v1alpha1.WaspConfiguration{Modules: []v1alpha1.ModuleConfiguration{m}}
		config.Default(c)
		return c.Modules[0]
	}
	tests := []struct {
		name    string
		module  v1alpha1.ModuleConfiguration
		dirs    []string
		wantErr string // "" for none
	}{
		{name: "file source, no directory allowed", module: module("file://" + filepath.Join(allowed, "m.wasm")), wantErr: "source: " + filepath.Join(allowed, "m.wasm")},
		{name: "file source in an allowed directory", module: module("file://" + keyIn), dirs: []string{allowed}},
		{name: "file source outside", module: module("file:///etc/passwd"), dirs: []string{allowed}, wantErr: "source: /etc/passwd: not under an allowed directory"},
		{name: "inline key", module: module(ref, block)},
		{name: "key file, no directory allowed", module: module(ref, keyIn), wantErr: "signatures.publicKeys[0]: " + keyIn + ": not under an allowed directory"},
		{name: "key file in an allowed directory", module: module(ref, keyIn), dirs: []string{allowed}},
		{name: "key file outside", module: module(ref, keyOut), dirs: []string{allowed}, wantErr: "not under an allowed directory"},
		{name: "not a key", module: module(ref, secret), dirs: []string{allowed}, wantErr: "signatures.publicKeys[0]: " + secret + ": no usable PEM PUBLIC KEY block"},
		{name: "a device", module: module(ref, "/dev/zero"), dirs: []string{"/dev"}, wantErr: "/dev/zero: not a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := catalogSpec(tc.module, tc.dirs)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "bash") {
				t.Errorf("the error holds the file's content: %v", err)
			}
		})
	}

	// A trusted root file that is no trusted root: the error says so,
	// without the parser's quote of the content.
	m := module(ref)
	m.Signatures = &v1alpha1.ModuleSignatures{Keyless: &v1alpha1.KeylessSignatures{TrustedRoot: secret,
		Identities: []v1alpha1.CertificateIdentity{{Issuer: "https://issuer.example.com", Subject: "ops@example.com"}}}}
	_, err := catalogSpec(m, []string{allowed})
	if !errors.Is(err, oci.ErrTrustedRoot) || strings.Contains(err.Error(), "root:x") || strings.Contains(err.Error(), "bash") {
		t.Fatalf("a trusted root file of another content: %v", err)
	}
}
