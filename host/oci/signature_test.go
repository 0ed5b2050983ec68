package oci_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/ocitest"
	"github.com/wasp-proxy/wasp/modules"
)

func ecdsaKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// cosignPayload is the simple-signing payload cosign signs for manifest d of
// REGISTRY/REPOSITORY, written out by hand from cosign's specification.
func cosignPayload(repository string, d digest.Digest) []byte {
	return []byte(`{"critical":{"identity":{"docker-reference":"` + repository + `"},"image":{"docker-manifest-digest":"` + d.String() +
		`"},"type":"cosign container image signature"},"optional":null}`)
}

// putSignatures stores a signature manifest of the given simple-signing
// layers (payload, annotation) for manifest d of repository, the way cosign
// lays it out.
func putSignatures(t *testing.T, reg *ocitest.Registry, repository string, d digest.Digest, layers ...[2]string) {
	t.Helper()
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest}
	cfg := []byte(`{"architecture":"","os":"","config":{},"rootfs":{"type":"layers","diff_ids":[]}}`)
	m.Config = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: reg.Put("", cfg), Size: int64(len(cfg))}
	for _, l := range layers {
		desc := ocispec.Descriptor{MediaType: oci.SignatureMediaType, Digest: reg.Put("", []byte(l[0])), Size: int64(len(l[0]))}
		desc.Annotations = map[string]string{oci.SignatureAnnotation: l[1]}
		m.Layers = append(m.Layers, desc)
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	reg.Tag(repository, oci.SignatureTag(d), reg.Put(ocispec.MediaTypeImageManifest, data))
}

func signECDSA(t *testing.T, k *ecdsa.PrivateKey, payload []byte) string {
	t.Helper()
	h := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, k, h[:])
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// signers returns a key of each type cosign uses.
func signers(t *testing.T) []struct {
	name string
	key  crypto.Signer
} {
	t.Helper()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return []struct {
		name string
		key  crypto.Signer
	}{{"ECDSA P-256", ecdsaKey(t)}, {"RSA", rsaKey}, {"Ed25519", edKey}}
}

// TestSignVerify: what Sign writes, Verify accepts with the signer's public
// key only, for each key type cosign uses.
func TestSignVerify(t *testing.T) {
	for _, tc := range signers(t) {
		t.Run(tc.name, func(t *testing.T) {
			reg := ocitest.New(t)
			a := push(t, reg)
			c := newClient(t, oci.Options{})
			ctx := context.Background()
			s, err := c.Sign(ctx, a.Reference, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			wantSig := "oci://" + reg.Host + "/wasp/selection:sha256-" + a.ManifestDigest.Encoded() + ".sig"
			if s.Reference != a.Reference || s.SignatureReference != wantSig || s.Found != 1 || s.Verified != 1 {
				t.Fatalf("Sign: %+v", s)
			}
			if _, err := c.Verify(ctx, a.Reference, oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{tc.key.Public()}}); err != nil {
				t.Fatal(err)
			}
			_, err = c.Verify(ctx, a.Reference, oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{ecdsaKey(t).Public()}})
			if !errors.Is(err, oci.ErrBadSignature) {
				t.Fatalf("another key: %v", err)
			}
		})
	}
}

// TestSignatureLayout: the signature manifest is cosign's, byte for byte
// where cosign's specification fixes the bytes.
func TestSignatureLayout(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	key := ecdsaKey(t)
	if _, err := newClient(t, oci.Options{}).Sign(context.Background(), a.Reference, key); err != nil {
		t.Fatal(err)
	}
	tag := "sha256-" + a.ManifestDigest.Encoded() + ".sig"
	if oci.SignatureTag(a.ManifestDigest) != tag {
		t.Fatalf("SignatureTag = %q, want %q", oci.SignatureTag(a.ManifestDigest), tag)
	}
	var m ocispec.Manifest
	raw := fetchManifest(t, reg, "wasp/selection", tag)
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.MediaType != ocispec.MediaTypeImageManifest || m.Config.MediaType != ocispec.MediaTypeImageConfig || len(m.Layers) != 1 {
		t.Fatalf("signature manifest: %s", raw)
	}
	l := m.Layers[0]
	if l.MediaType != "application/vnd.dev.cosign.simplesigning.v1+json" {
		t.Fatalf("layer media type %q", l.MediaType)
	}
	payload := reg.Get(l.Digest)
	if want := cosignPayload(reg.Host+"/wasp/selection", a.ManifestDigest); string(payload) != string(want) {
		t.Fatalf("payload\n got %s\nwant %s", payload, want)
	}
	sig, err := base64.StdEncoding.DecodeString(l.Annotations["dev.cosignproject.cosign/signature"])
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(payload)
	if !ecdsa.VerifyASN1(&key.PublicKey, h[:], sig) {
		t.Fatal("the annotation is not an ECDSA signature of the payload's SHA-256")
	}
}

func fetchManifest(t *testing.T, reg *ocitest.Registry, repository, tag string) []byte {
	t.Helper()
	d := reg.Resolve(repository, tag)
	if d == "" {
		t.Fatalf("no tag %s:%s", repository, tag)
	}
	return reg.Get(d)
}

// TestSignAgain: signing again with the same key adds nothing; another key
// adds a signature, and either key verifies.
func TestSignAgain(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	c := newClient(t, oci.Options{})
	ctx := context.Background()
	k1, k2 := ecdsaKey(t), ecdsaKey(t)
	for _, k := range []crypto.Signer{k1, k1, k2} {
		if _, err := c.Sign(ctx, a.Reference, k); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []crypto.Signer{k1, k2} {
		s, err := c.Verify(ctx, a.Reference, oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{k.Public()}})
		if err != nil || s.Found != 2 || s.Verified != 1 {
			t.Fatalf("Verify: %+v, %v", s, err)
		}
	}
	s, err := c.Verify(ctx, a.Reference, oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{k1.Public(), k2.Public()}})
	if err != nil || s.Verified != 2 {
		t.Fatalf("Verify with both keys: %+v, %v", s, err)
	}
}

// TestVerifyFailsClosed: each way a signature can be wrong is refused, with
// its own error.
func TestVerifyFailsClosed(t *testing.T) {
	key := ecdsaKey(t)
	other := digest.FromString("another module")
	for _, tc := range []struct {
		name   string
		layers func(reg *ocitest.Registry, a *oci.Artifact) [][2]string
		want   error
	}{
		{"no signature manifest", nil, oci.ErrNoSignature},
		{"no simple-signing layer", func(*ocitest.Registry, *oci.Artifact) [][2]string { return nil }, oci.ErrNoSignature},
		{"another key", func(reg *ocitest.Registry, a *oci.Artifact) [][2]string {
			p := cosignPayload(reg.Host+"/wasp/selection", a.ManifestDigest)
			return [][2]string{{string(p), signECDSA(t, ecdsaKey(t), p)}}
		}, oci.ErrBadSignature},
		{"payload changed after signing", func(reg *ocitest.Registry, a *oci.Artifact) [][2]string {
			p := cosignPayload(reg.Host+"/wasp/selection", a.ManifestDigest)
			sig := signECDSA(t, key, p)
			return [][2]string{{string(cosignPayload(reg.Host+"/wasp/selection", other)), sig}}
		}, oci.ErrBadSignature},
		{"signed payload of another digest", func(reg *ocitest.Registry, a *oci.Artifact) [][2]string {
			p := cosignPayload(reg.Host+"/wasp/selection", other)
			return [][2]string{{string(p), signECDSA(t, key, p)}}
		}, oci.ErrSignatureMismatch},
		{"garbage annotation", func(reg *ocitest.Registry, a *oci.Artifact) [][2]string {
			return [][2]string{{string(cosignPayload(reg.Host+"/wasp/selection", a.ManifestDigest)), "not base64!"}}
		}, oci.ErrMalformedSignature},
		{"signed payload of another type", func(reg *ocitest.Registry, a *oci.Artifact) [][2]string {
			p := []byte(strings.Replace(string(cosignPayload(reg.Host+"/wasp/selection", a.ManifestDigest)), "cosign container image signature", "atomic container signature", 1))
			return [][2]string{{string(p), signECDSA(t, key, p)}}
		}, oci.ErrMalformedSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := ocitest.New(t)
			a := push(t, reg)
			if tc.layers != nil {
				putSignatures(t, reg, "wasp/selection", a.ManifestDigest, tc.layers(reg, a)...)
			}
			_, err := newClient(t, oci.Options{}).Verify(context.Background(), a.Reference, oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{key.Public()}})
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			for _, e := range []error{oci.ErrNoSignature, oci.ErrBadSignature, oci.ErrSignatureMismatch, oci.ErrMalformedSignature} {
				if e != tc.want && errors.Is(err, e) {
					t.Fatalf("%v is also %v", err, e)
				}
			}

			// A pull that requires signatures refuses the module, and
			// caches nothing of it.
			dir := t.TempDir()
			_, err = newClient(t, oci.Options{CacheDir: dir, Signatures: []oci.SignaturePolicy{{PublicKeys: []crypto.PublicKey{key.Public()}}}}).Pull(context.Background(), a.Reference)
			if !errors.Is(err, tc.want) {
				t.Fatalf("pull: got %v, want %v", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "blobs", "sha256", a.WasmDigest.Encoded())); !os.IsNotExist(err) {
				t.Fatalf("the module was cached: %v", err)
			}
		})
	}
}

// TestVerifyAnySignature: one valid signature among broken ones is enough.
func TestVerifyAnySignature(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	key := ecdsaKey(t)
	p := cosignPayload(reg.Host+"/wasp/selection", a.ManifestDigest)
	putSignatures(t, reg, "wasp/selection", a.ManifestDigest,
		[2]string{string(p), "garbage"}, [2]string{string(p), signECDSA(t, ecdsaKey(t), p)}, [2]string{string(p), signECDSA(t, key, p)})
	s, err := newClient(t, oci.Options{}).Verify(context.Background(), a.Reference, oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{key.Public()}})
	if err != nil || s.Found != 3 || s.Verified != 1 {
		t.Fatalf("Verify: %+v, %v", s, err)
	}
}

// TestPullVerifiesSignatures: a pull with keys verifies before it returns,
// and serves a pinned module from the cache with its cached signatures,
// verified again, while the registry is down.
func TestPullVerifiesSignatures(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	key := ecdsaKey(t)
	ctx := context.Background()
	if _, err := newClient(t, oci.Options{}).Sign(ctx, a.Reference, key); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keys := []crypto.PublicKey{key.Public()}
	got, err := newClient(t, oci.Options{CacheDir: dir, Signatures: []oci.SignaturePolicy{{PublicKeys: keys}}}).Pull(ctx, a.Reference)
	if err != nil || got.Signatures == nil || got.Signatures.Verified != 1 || got.Signatures.Cached {
		t.Fatalf("pull: %+v, %v", got, err)
	}
	// Tags too, if allowed: the digest the tag resolves to is verified.
	if _, err := newClient(t, oci.Options{Signatures: []oci.SignaturePolicy{{PublicKeys: keys}}, AllowTags: true}).Pull(ctx, "oci://"+reg.Host+"/wasp/selection:v1"); err != nil {
		t.Fatal(err)
	}

	reg.Close()
	down, err := newClient(t, oci.Options{CacheDir: dir, Signatures: []oci.SignaturePolicy{{PublicKeys: keys}}}).Pull(ctx, a.Reference)
	if err != nil || !down.Cached || !down.Signatures.Cached || down.Signatures.Verified != 1 {
		t.Fatalf("pull with the registry down: %+v, %v", down, err)
	}
	_, err = newClient(t, oci.Options{CacheDir: dir, Signatures: []oci.SignaturePolicy{{PublicKeys: []crypto.PublicKey{ecdsaKey(t).Public()}}}}).Pull(ctx, a.Reference)
	if !errors.Is(err, oci.ErrBadSignature) {
		t.Fatalf("pull with the registry down, another key: %v", err)
	}
	// Without cached signatures, a registry that is down fails the pull.
	_, err = newClient(t, oci.Options{CacheDir: t.TempDir(), Signatures: []oci.SignaturePolicy{{PublicKeys: keys}}}).Pull(ctx, a.Reference)
	if err == nil {
		t.Fatal("pull with the registry down and nothing cached succeeded")
	}
}

func TestParseKeys(t *testing.T) {
	k := ecdsaKey(t)
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	keys, err := oci.ParsePublicKeys(append(append([]byte{}, pub...), pub...))
	if err != nil || len(keys) != 2 || !k.PublicKey.Equal(keys[0]) {
		t.Fatalf("ParsePublicKeys: %v, %v", keys, err)
	}
	for _, bad := range []string{"", "not pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))} {
		if _, err := oci.ParsePublicKeys([]byte(bad)); err == nil {
			t.Errorf("ParsePublicKeys(%q) succeeded", bad)
		}
	}

	sec1, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*pem.Block{{Type: "EC PRIVATE KEY", Bytes: sec1}, {Type: "PRIVATE KEY", Bytes: pkcs8}} {
		s, err := oci.ParsePrivateKey(pem.EncodeToMemory(b))
		if err != nil || !k.PublicKey.Equal(s.Public()) {
			t.Fatalf("ParsePrivateKey(%s): %v", b.Type, err)
		}
	}
	_, err = oci.ParsePrivateKey(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED COSIGN PRIVATE KEY", Bytes: []byte("x")}))
	if err == nil || !strings.Contains(err.Error(), "encrypted") {
		t.Fatalf("cosign's encrypted key: %v", err)
	}
}

// TestSaveLoadSignatures: an archive carries the modules' signatures, so an
// air-gapped node verifies what it loaded.
func TestSaveLoadSignatures(t *testing.T) {
	reg := ocitest.New(t)
	signed, unsigned := push(t, reg), pushOther(t, reg)
	key := ecdsaKey(t)
	ctx := context.Background()
	if _, err := newClient(t, oci.Options{}).Sign(ctx, signed.Reference, key); err != nil {
		t.Fatal(err)
	}
	dir := saveLoadOffline(t, reg, signed, unsigned)
	keys := []crypto.PublicKey{key.Public()}
	a, err := newClient(t, oci.Options{CacheDir: dir, Signatures: []oci.SignaturePolicy{{PublicKeys: keys}}}).Pull(ctx, signed.Reference)
	if err != nil || !a.Cached || a.Signatures == nil || !a.Signatures.Cached || a.Signatures.Verified != 1 {
		t.Fatalf("pull of the signed module: %+v, %v", a, err)
	}
	if _, err := newClient(t, oci.Options{CacheDir: dir, Signatures: []oci.SignaturePolicy{{PublicKeys: keys}}}).Pull(ctx, unsigned.Reference); err == nil {
		t.Fatal("the unsigned module was pulled with public keys")
	}
	_, err = newClient(t, oci.Options{CacheDir: dir, Signatures: []oci.SignaturePolicy{{PublicKeys: []crypto.PublicKey{ecdsaKey(t).Public()}}}}).Pull(ctx, signed.Reference)
	if !errors.Is(err, oci.ErrBadSignature) {
		t.Fatalf("pull with another key: %v", err)
	}
}

// saveLoadOffline saves the modules of reg to an archive, stops reg,
// loads the archive into a new cache and returns the cache's directory.
func saveLoadOffline(t *testing.T, reg *ocitest.Registry, modules ...*oci.Artifact) string {
	t.Helper()
	ctx := context.Background()
	var refs []string
	for _, a := range modules {
		refs = append(refs, a.Reference)
	}
	var archive bytes.Buffer
	if _, err := newClient(t, oci.Options{}).Save(ctx, refs, &archive); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "modules.tar")
	if err := os.WriteFile(path, archive.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	reg.Close()
	dir := t.TempDir()
	if loaded, err := newClient(t, oci.Options{CacheDir: dir}).Load(ctx, path); err != nil || len(loaded) != len(refs) {
		t.Fatalf("load: %v, %v", loaded, err)
	}
	return dir
}

// pushOther pushes the topology module to oci://HOST/wasp/topology:v1.
func pushOther(t *testing.T, reg *ocitest.Registry) *oci.Artifact {
	t.Helper()
	wasm, err := modules.Wasm("topology")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := runtime.Inspect(wasm)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newClient(t, oci.Options{}).Push(context.Background(), "oci://"+reg.Host+"/wasp/topology:v1", wasm, meta)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
