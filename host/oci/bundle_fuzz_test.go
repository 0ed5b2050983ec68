package oci

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/wasp-proxy/wasp/internal/sigstoretest"
)

// FuzzCheckBundle: whatever a registry serves as a bundle, checking it
// returns an error or a signer, never panics, and accepts nothing but
// bundles signed for the manifest by a trusted signer: the seeds' bytes.
func FuzzCheckBundle(f *testing.F) {
	r := Reference{Registry: "registry.example", Repository: "wasp/m"}
	d := digest.FromString("manifest")
	st, err := signStatement(r, d)
	if err != nil {
		f.Fatal(err)
	}
	store := sigstoretest.New(f)
	keylessBundle := store.Sign(f, "release@example.com", "https://issuer.example.com", st)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	keyBundle, err := keyBundle(r, d, key)
	if err != nil {
		f.Fatal(err)
	}
	kp, err := NewKeylessPolicy(store.TrustedRoot(f), []Identity{{Issuer: "https://issuer.example.com", Subject: "release@example.com"}})
	if err != nil {
		f.Fatal(err)
	}
	policy := SignaturePolicy{PublicKeys: []crypto.PublicKey{key.Public()}, Keyless: kp}
	for _, seed := range [][]byte{keylessBundle, keyBundle, nil, []byte("{}"), []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}`)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		who, err := checkBundle(data, d, policy)
		if err == nil && who == "" {
			t.Fatal("accepted without a signer")
		}
		if err == nil && string(data) != string(keylessBundle) && string(data) != string(keyBundle) {
			// JSON allows other spellings of the same bundle (spaces,
			// field order); they must still sign this manifest.
			if _, err := checkBundle(data, digest.FromString("another manifest"), policy); err == nil {
				t.Fatal("a bundle verified for two manifests")
			}
		}
	})
}
