package oci_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/internal/ocitest"
	"github.com/wasp-proxy/wasp/internal/sigstoretest"
)

const (
	signer = "release@example.com"
	issuer = "https://issuer.example.com"
)

// keyless returns the keyless policy trusting ids under root.
func keyless(t *testing.T, root []byte, ids ...oci.Identity) oci.SignaturePolicy {
	t.Helper()
	p, err := oci.NewKeylessPolicy(root, ids)
	if err != nil {
		t.Fatal(err)
	}
	return oci.SignaturePolicy{Keyless: p}
}

// signKeyless attaches a keyless bundle signing statement to the module
// ref, as subject of the instance's issuer.
func signKeyless(t *testing.T, s *sigstoretest.Sigstore, ref, subject string, statement []byte) {
	t.Helper()
	if statement == nil {
		var err error
		if statement, err = oci.SignStatement(ref); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := newClient(t, oci.Options{}).AttachBundle(context.Background(), ref, s.Sign(t, subject, issuer, statement)); err != nil {
		t.Fatal(err)
	}
}

// TestKeyless: a keyless bundle verifies under the trusted root of the
// Sigstore that issued it, for the identity it names, exactly or by
// regular expression; anything else fails closed with its reason.
func TestKeyless(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	store := sigstoretest.New(t)
	root := store.TrustedRoot(t)
	ctx := context.Background()
	c := newClient(t, oci.Options{})

	_, err := c.Verify(ctx, a.Reference, keyless(t, root, oci.Identity{Issuer: issuer, Subject: signer}))
	if !errors.Is(err, oci.ErrNoSignature) {
		t.Fatalf("unsigned: %v", err)
	}
	signKeyless(t, store, a.Reference, signer, nil)

	for _, id := range []oci.Identity{
		{Issuer: issuer, Subject: signer},
		{IssuerRegExp: `^https://issuer\.example\.com$`, SubjectRegExp: `@example\.com$`},
	} {
		s, err := c.Verify(ctx, a.Reference, keyless(t, root, oci.Identity{Issuer: issuer, Subject: "someone@else"}, id))
		if err != nil {
			t.Fatalf("%v: %v", id, err)
		}
		if want := signer + " (" + issuer + ")"; s.Bundles != 1 || len(s.Signers) != 1 || s.Signers[0] != want {
			t.Fatalf("%v: %+v, want one bundle signed by %s", id, s, want)
		}
	}

	for name, tc := range map[string]struct {
		policy oci.SignaturePolicy
		want   error
		msg    string
	}{
		"another subject":  {keyless(t, root, oci.Identity{Issuer: issuer, Subject: "mallory@example.com"}), oci.ErrBadSignature, "mallory@example.com"},
		"another issuer":   {keyless(t, root, oci.Identity{Issuer: "https://accounts.example.org", Subject: signer}), oci.ErrBadSignature, "accounts.example.org"},
		"another Sigstore": {keyless(t, sigstoretest.New(t).TrustedRoot(t), oci.Identity{Issuer: issuer, Subject: signer}), oci.ErrBadSignature, ""},
		"keys only":        {oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{ecdsaKey(t).Public()}}, oci.ErrBadSignature, "no keyless identity is trusted"},
	} {
		_, err := c.Verify(ctx, a.Reference, tc.policy)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %v mentioning %q", name, err, tc.want, tc.msg)
		}
	}
}

// TestKeylessStatement: a keyless bundle must be a signature of this very
// manifest: one for another module, or an attestation of another
// predicate, is refused even from the trusted signer.
func TestKeylessStatement(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	store := sigstoretest.New(t)
	policy := keyless(t, store.TrustedRoot(t), oci.Identity{Issuer: issuer, Subject: signer})
	ctx := context.Background()

	other, err := oci.SignStatement("oci://" + reg.Host + "/wasp/other@sha256:" + strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	signKeyless(t, store, a.Reference, signer, other)
	_, err = newClient(t, oci.Options{}).Verify(ctx, a.Reference, policy)
	if !errors.Is(err, oci.ErrSignatureMismatch) {
		t.Fatalf("a signature of another manifest: %v", err)
	}

	mine, err := oci.SignStatement(a.Reference)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(mine, &st); err != nil {
		t.Fatal(err)
	}
	st["predicateType"] = "https://slsa.dev/provenance/v1"
	provenance, _ := json.Marshal(st)
	signKeyless(t, store, a.Reference, signer, provenance)
	_, err = newClient(t, oci.Options{}).Verify(ctx, a.Reference, policy)
	if !errors.Is(err, oci.ErrMalformedSignature) || !errors.Is(err, oci.ErrSignatureMismatch) {
		t.Fatalf("an attestation and a signature of another manifest: %v", err)
	}

	// One good signature among them is enough.
	signKeyless(t, store, a.Reference, signer, nil)
	if s, err := newClient(t, oci.Options{}).Verify(ctx, a.Reference, policy); err != nil || s.Bundles != 3 || len(s.Signers) != 1 {
		t.Fatalf("with a good one too: %+v, %v", s, err)
	}
}

// TestKeylessPull: a pull with a keyless policy verifies before it
// fetches the module, caches the bundles that verified, and verifies them
// again from the cache while the registry is down.
func TestKeylessPull(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	store := sigstoretest.New(t)
	policy := keyless(t, store.TrustedRoot(t), oci.Identity{Issuer: issuer, Subject: signer})
	ctx := context.Background()
	dir := t.TempDir()
	opts := oci.Options{CacheDir: dir, Signatures: []oci.SignaturePolicy{policy}}

	if _, err := newClient(t, opts).Pull(ctx, a.Reference); !errors.Is(err, oci.ErrNoSignature) {
		t.Fatalf("unsigned: %v", err)
	}
	signKeyless(t, store, a.Reference, signer, nil)
	got, err := newClient(t, opts).Pull(ctx, a.Reference)
	if err != nil || got.Signatures == nil || len(got.Signatures.Signers) != 1 || got.Signatures.Cached {
		t.Fatalf("pull: %+v, %v", got, err)
	}

	reg.Close()
	down, err := newClient(t, opts).Pull(ctx, a.Reference)
	if err != nil || !down.Cached || !down.Signatures.Cached {
		t.Fatalf("pull with the registry down: %+v, %v", down, err)
	}
	opts.Signatures = []oci.SignaturePolicy{keyless(t, store.TrustedRoot(t), oci.Identity{Issuer: issuer, Subject: "mallory@example.com"})}
	if _, err := newClient(t, opts).Pull(ctx, a.Reference); !errors.Is(err, oci.ErrBadSignature) {
		t.Fatalf("pull with the registry down, another identity: %v", err)
	}
	opts.CacheDir = t.TempDir()
	opts.Signatures = []oci.SignaturePolicy{policy}
	if _, err := newClient(t, opts).Pull(ctx, a.Reference); err == nil {
		t.Fatal("pull with the registry down and nothing cached succeeded")
	}
}

// TestSignBundle: what SignBundle writes (cosign 3's layout, signed with
// a key) verifies with that key only, for each key type.
func TestSignBundle(t *testing.T) {
	for _, tc := range signers(t) {
		key := tc.key
		t.Run(tc.name, func(t *testing.T) {
			reg := ocitest.New(t)
			a := push(t, reg)
			c := newClient(t, oci.Options{})
			ctx := context.Background()
			if _, err := c.SignBundle(ctx, a.Reference, key); err != nil {
				t.Fatal(err)
			}
			s, err := c.Verify(ctx, a.Reference, oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{ecdsaKey(t).Public(), key.Public()}})
			if err != nil || s.Found != 0 || s.Bundles != 1 || len(s.Signers) != 1 || s.Signers[0] != "key "+keyHint(t, key.Public()) {
				t.Fatalf("Verify: %+v, %v", s, err)
			}
			_, err = c.Verify(ctx, a.Reference, oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{ecdsaKey(t).Public()}})
			if !errors.Is(err, oci.ErrBadSignature) {
				t.Fatalf("another key: %v", err)
			}
			_, err = c.Verify(ctx, a.Reference, keyless(t, sigstoretest.New(t).TrustedRoot(t), oci.Identity{Issuer: issuer, Subject: signer}))
			if !errors.Is(err, oci.ErrBadSignature) || !strings.Contains(err.Error(), "no key is trusted") {
				t.Fatalf("keyless only: %v", err)
			}
		})
	}
}

// TestEveryPolicy: several policies (a node-wide one and a module's own)
// must all be satisfied.
func TestEveryPolicy(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	store := sigstoretest.New(t)
	ctx := context.Background()
	key := ecdsaKey(t)
	byKey := oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{key.Public()}}
	byRelease := keyless(t, store.TrustedRoot(t), oci.Identity{Issuer: issuer, Subject: signer})

	signKeyless(t, store, a.Reference, signer, nil)
	c := newClient(t, oci.Options{})
	if _, err := c.Verify(ctx, a.Reference, byRelease, byKey); !errors.Is(err, oci.ErrBadSignature) || !strings.Contains(err.Error(), "no keyless identity is trusted") {
		t.Fatalf("keyless signature only: %v", err)
	}
	if _, err := c.Sign(ctx, a.Reference, key); err != nil {
		t.Fatal(err)
	}
	s, err := c.Verify(ctx, a.Reference, byRelease, byKey)
	if err != nil || s.Verified != 1 || len(s.Signers) != 1 {
		t.Fatalf("both: %+v, %v", s, err)
	}
	if _, err := c.Verify(ctx, a.Reference, byKey, oci.SignaturePolicy{}); err == nil {
		t.Fatal("an empty policy was satisfied")
	}
}

func TestNewKeylessPolicy(t *testing.T) {
	root := sigstoretest.New(t).TrustedRoot(t)
	for name, tc := range map[string]struct {
		root []byte
		ids  []oci.Identity
		want string
	}{
		"no identity":    {root, nil, "no identity"},
		"two issuers":    {root, []oci.Identity{{Issuer: issuer, IssuerRegExp: "x", Subject: signer}}, "exactly one"},
		"no subject":     {root, []oci.Identity{{Issuer: issuer}}, "subject"},
		"bad expression": {root, []oci.Identity{{Issuer: issuer, SubjectRegExp: "("}}, "identity 0"},
		"not a root":     {[]byte(`{"mediaType": "x"}`), []oci.Identity{{Issuer: issuer, Subject: signer}}, "trusted root"},
		"not JSON":       {[]byte("-----BEGIN"), []oci.Identity{{Issuer: issuer, Subject: signer}}, "trusted root"},
	} {
		_, err := oci.NewKeylessPolicy(tc.root, tc.ids)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %q", name, err, tc.want)
		}
	}
}

// TestFindSignatures: every signature of a module is listed, in both
// layouts, with the signer a bundle claims, before any verification.
func TestFindSignatures(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	ctx := context.Background()
	c := newClient(t, oci.Options{})
	if found, err := c.FindSignatures(ctx, a.Reference); err != nil || len(found) != 0 {
		t.Fatalf("unsigned: %+v, %v", found, err)
	}
	key := ecdsaKey(t)
	if _, err := c.Sign(ctx, a.Reference, key); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SignBundle(ctx, a.Reference, key); err != nil {
		t.Fatal(err)
	}
	signKeyless(t, sigstoretest.New(t), a.Reference, signer, nil)
	found, err := c.FindSignatures(ctx, a.Reference)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		if f.Digest == "" || f.Problem != "" {
			t.Errorf("%+v", f)
		}
		got = append(got, f.Layout+" "+f.Signer)
	}
	want := []string{"simplesigning ", "bundle key " + keyHint(t, key.Public()), "bundle " + signer + " (" + issuer + ")"}
	if len(got) != len(want) {
		t.Fatalf("found %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("found %q, want %q", got, want)
		}
	}
}

// TestSaveLoadBundles: an archive carries the modules' Sigstore bundles,
// so an air-gapped node verifies a keyless signature of what it loaded.
func TestSaveLoadBundles(t *testing.T) {
	reg := ocitest.New(t)
	signed, unsigned := push(t, reg), pushOther(t, reg)
	store := sigstoretest.New(t)
	signKeyless(t, store, signed.Reference, signer, nil)
	ctx := context.Background()
	dir := saveLoadOffline(t, reg, signed, unsigned)
	policy := []oci.SignaturePolicy{keyless(t, store.TrustedRoot(t), oci.Identity{Issuer: issuer, Subject: signer})}
	a, err := newClient(t, oci.Options{CacheDir: dir, Signatures: policy}).Pull(ctx, signed.Reference)
	if err != nil || !a.Cached || a.Signatures == nil || !a.Signatures.Cached || len(a.Signatures.Signers) != 1 {
		t.Fatalf("pull of the signed module: %+v, %v", a, err)
	}
	if _, err := newClient(t, oci.Options{CacheDir: dir, Signatures: policy}).Pull(ctx, unsigned.Reference); err == nil {
		t.Fatal("the unsigned module was pulled with a keyless policy")
	}
}

// keyHint is cosign's hint of a key: the base64 SHA-256 of its PKIX form.
func keyHint(t *testing.T, key crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(der)
	return base64.StdEncoding.EncodeToString(h[:])
}

// BenchmarkVerify times the verification of a module's signatures, once
// per load, from a registry on loopback: a keyless bundle (certificate
// chain, log promise and proof, identity) against the baseline of a
// key-based .sig signature, measured in the same run.
func BenchmarkVerify(b *testing.B) {
	reg := ocitest.New(b)
	wasm, meta := ocitest.Module(b)
	ctx := context.Background()
	c, err := oci.New(oci.Options{})
	if err != nil {
		b.Fatal(err)
	}
	keyed, err := c.Push(ctx, "oci://"+reg.Host+"/wasp/keyed:v1", wasm, meta)
	if err != nil {
		b.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Sign(ctx, keyed.Reference, key); err != nil {
		b.Fatal(err)
	}
	keyless, err := c.Push(ctx, "oci://"+reg.Host+"/wasp/keyless:v1", wasm, meta)
	if err != nil {
		b.Fatal(err)
	}
	store := sigstoretest.New(b)
	st, err := oci.SignStatement(keyless.Reference)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.AttachBundle(ctx, keyless.Reference, store.Sign(b, signer, issuer, st)); err != nil {
		b.Fatal(err)
	}
	kp, err := oci.NewKeylessPolicy(store.TrustedRoot(b), []oci.Identity{{Issuer: issuer, Subject: signer}})
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, ref string, p oci.SignaturePolicy) float64 {
		start := time.Now()
		for range b.N {
			if _, err := c.Verify(ctx, ref, p); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(b.N)
	}
	var base float64
	b.Run("key", func(b *testing.B) {
		base = run(b, keyed.Reference, oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{key.Public()}})
	})
	b.Run("keyless", func(b *testing.B) {
		ns := run(b, keyless.Reference, oci.SignaturePolicy{Keyless: kp})
		if base > 0 {
			b.ReportMetric(ns/base, "x-key")
		}
	})
}

// TestUnusableBundleReferrer: a bundle referrer that cannot be read (its
// blob gone from the registry) is reported, and does not hide a good
// signature beside it.
func TestUnusableBundleReferrer(t *testing.T) {
	reg := ocitest.New(t)
	a := push(t, reg)
	ctx := context.Background()
	c := newClient(t, oci.Options{})
	store := sigstoretest.New(t)
	st, err := oci.SignStatement(a.Reference)
	if err != nil {
		t.Fatal(err)
	}
	gone := store.Sign(t, "other@example.com", issuer, st)
	if _, err := c.AttachBundle(ctx, a.Reference, gone); err != nil {
		t.Fatal(err)
	}
	reg.Delete(digest.FromBytes(gone))
	policy := keyless(t, store.TrustedRoot(t), oci.Identity{Issuer: issuer, Subject: signer})
	_, err = c.Verify(ctx, a.Reference, policy)
	if !errors.Is(err, oci.ErrNotFound) || !strings.Contains(err.Error(), digest.FromBytes(gone).String()) {
		t.Fatalf("only an unusable bundle: %v, want it named, not found", err)
	}

	signKeyless(t, store, a.Reference, signer, nil)
	if s, err := c.Verify(ctx, a.Reference, policy); err != nil || len(s.Signers) != 1 {
		t.Fatalf("a good bundle beside it: %+v, %v", s, err)
	}
	found, err := c.FindSignatures(ctx, a.Reference)
	if err != nil || len(found) != 2 || found[0].Problem == "" || found[1].Signer != signer+" ("+issuer+")" {
		t.Fatalf("FindSignatures: %+v, %v", found, err)
	}
}
