package oci

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/klog/v2"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
)

// cosign's signature layout (its specs/SIGNATURE_SPEC.md): the signatures
// of manifest sha256:HEX are the layers of the image manifest tagged
// sha256-HEX.sig in the same repository. Each layer is a simple-signing
// payload naming the signed manifest's digest; the layer's annotation
// SignatureAnnotation holds the base64 signature of the payload's bytes.
const (
	SignatureMediaType   = "application/vnd.dev.cosign.simplesigning.v1+json"
	SignatureAnnotation  = "dev.cosignproject.cosign/signature"
	SignaturePayloadType = "cosign container image signature"
)

// Limits on signature content: a simple-signing payload is a few hundred
// bytes, and a module is signed by a handful of keys.
const (
	maxPayloadSize     = 64 << 10
	maxSignatureLayers = 256
)

// Errors of signature verification; the returned errors wrap them with the
// signature manifest and each signature's layer. When several signatures
// fail, the error wraps the category of each.
var (
	// ErrNoSignature: no signature manifest, or one without a
	// simple-signing layer.
	ErrNoSignature = errors.New("no signature")
	// ErrBadSignature: the signature is not trusted: it does not verify
	// with any of the keys (another key, or a payload changed after
	// signing), or a keyless signature of another identity, by a
	// certificate authority not trusted, or not in a trusted log.
	ErrBadSignature = errors.New("signature not trusted")
	// ErrSignatureMismatch: a valid signature of a payload that names
	// another manifest.
	ErrSignatureMismatch = errors.New("signed payload is for another artifact")
	// ErrMalformedSignature: no or undecodable signature annotation, or a
	// signed payload that is not a cosign simple-signing document.
	ErrMalformedSignature = errors.New("malformed signature")
)

// SignatureTag returns the tag under which cosign keeps the signatures of
// manifest d: sha256-HEX.sig.
func SignatureTag(d digest.Digest) string {
	return d.Algorithm().String() + "-" + d.Encoded() + ".sig"
}

// Signatures reports the signatures of a module.
type Signatures struct {
	// Reference is the signed module, pinned by digest.
	Reference string
	// SignatureReference is where its signatures are:
	// oci://REGISTRY/REPOSITORY:sha256-HEX.sig.
	SignatureReference string
	// SignatureManifest is the digest of the signature manifest read.
	SignatureManifest digest.Digest
	// Found counts the simple-signing layers, Verified those that verify
	// with one of the keys and name the module's manifest.
	Found, Verified int
	// Bundles counts the Sigstore bundles attached to the module (read
	// only when the key-based signatures do not satisfy a policy);
	// Signers names who signed those that verify: "key HINT" (cosign's: the base64 SHA-256 of the key) or a
	// keyless identity, "SUBJECT (ISSUER)".
	Bundles int
	Signers []string
	// Cached reports that the registry could not be reached and the
	// signatures verified on an earlier pull were verified again from the
	// cache.
	Cached bool
}

// simpleSigning is the payload cosign signs ("simple signing", from
// containers/image). Field order and names give the bytes cosign writes.
type simpleSigning struct {
	Critical simpleSigningCritical `json:"critical"`
	Optional map[string]any        `json:"optional"`
}

type simpleSigningCritical struct {
	Identity struct {
		DockerReference string `json:"docker-reference"`
	} `json:"identity"`
	Image struct {
		DockerManifestDigest string `json:"docker-manifest-digest"`
	} `json:"image"`
	Type string `json:"type"`
}

// signaturePayload returns the payload that signs manifest d of repository
// REGISTRY/REPOSITORY, as cosign writes it.
func signaturePayload(r Reference, d digest.Digest) ([]byte, error) {
	var p simpleSigning
	p.Critical.Identity.DockerReference = r.Registry + "/" + r.Repository
	p.Critical.Image.DockerManifestDigest = d.String()
	p.Critical.Type = SignaturePayloadType
	return json.Marshal(p)
}

// Verify checks that the module ref satisfies every policy (see
// SignaturePolicy), in cosign's key-based layout or the Sigstore bundle
// layout. A tag is resolved only if Options.AllowTags is set. It fails
// closed: no policy, no signature, or a registry it cannot read is an
// error.
func (c *Client) Verify(ctx context.Context, ref string, policies ...SignaturePolicy) (*Signatures, error) {
	r, repo, d, err := c.target(ctx, ref)
	if err != nil {
		return nil, err
	}
	if len(policies) == 0 {
		return nil, fmt.Errorf("module %q: no key or keyless identity to verify with", ref)
	}
	s, err := c.verifyPolicies(ctx, func() (*remote.Repository, error) { return repo, nil }, r, d, policies)
	if err != nil {
		return nil, fmt.Errorf("module %q: %w", ref, err)
	}
	return s, nil
}

// verifyPolicies checks that manifest d of r satisfies every policy. The
// key-based signatures are read for each policy with keys, the bundles
// once; bundles that verify are cached.
func (c *Client) verifyPolicies(ctx context.Context, getRepo func() (*remote.Repository, error), r Reference, d digest.Digest, policies []SignaturePolicy) (*Signatures, error) {
	s := &Signatures{Reference: r.Pinned(d.String()), SignatureReference: Scheme + r.Registry + "/" + r.Repository + ":" + SignatureTag(d)}
	var (
		bundles *bundleSet
		good    []blob
	)
	for i, p := range policies {
		if p.empty() {
			return nil, fmt.Errorf("signature policy %d trusts no key and no keyless identity", i)
		}
		var errs []error
		satisfied := false
		if len(p.PublicKeys) > 0 {
			ls, err := c.verifySignatures(ctx, getRepo, r, d, p.PublicKeys)
			switch {
			case err == nil:
				satisfied = true
				s.SignatureManifest, s.Found, s.Verified = ls.SignatureManifest, ls.Found, max(s.Verified, ls.Verified)
				s.Cached = s.Cached || ls.Cached
			case !errors.Is(err, ErrNoSignature):
				errs = append(errs, err)
			}
		}
		if !satisfied {
			if bundles == nil {
				b := c.readBundles(ctx, getRepo, d)
				bundles = &b
				s.Bundles = len(b.bundles)
			}
			if bundles.err != nil {
				errs = append(errs, fmt.Errorf("signature bundles: %w", bundles.err))
			}
			signers, ok, failures := verifyBundles(*bundles, d, p)
			if len(ok) > 0 {
				satisfied = true
				s.Signers = appendNew(s.Signers, signers...)
				good = append(good, ok...)
				s.Cached = s.Cached || bundles.cached
			}
			errs = append(errs, failures...)
		}
		if satisfied {
			continue
		}
		if len(errs) == 0 {
			return nil, fmt.Errorf("%w: neither %s nor a signature bundle (referrer of type %s)", ErrNoSignature, s.SignatureReference, BundleMediaType)
		}
		return nil, fmt.Errorf("no signature is trusted by %s: %w", p.describe(), errors.Join(errs...))
	}
	if len(good) > 0 && c.cache != nil && !bundles.cached {
		if err := c.cacheBundles(d, dedupe(good)); err != nil {
			klog.FromContext(ctx).Error(err, "Caching a module's signature bundles failed; a pull with the registry down will fail", "reference", s.Reference)
		}
	}
	return s, nil
}

// appendNew appends the values of vs that list does not hold.
func appendNew(list []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}

// dedupe drops repeated blobs (a bundle that verified under two
// policies).
func dedupe(bs []blob) []blob {
	seen := map[digest.Digest]bool{}
	out := bs[:0:0]
	for _, b := range bs {
		if !seen[b.desc.Digest] {
			seen[b.desc.Digest] = true
			out = append(out, b)
		}
	}
	return out
}

// Sign signs the module ref with key and adds the signature to its
// signature manifest, in cosign's layout, so that `cosign verify --key` and
// Verify accept it. Signing again with a key that already signed the module
// changes nothing. Two signers racing on one module can lose a signature:
// the manifest is read, extended and written back, as cosign does.
func (c *Client) Sign(ctx context.Context, ref string, key crypto.Signer) (*Signatures, error) {
	if key == nil {
		return nil, fmt.Errorf("sign %q: no key", ref)
	}
	if err := checkKeyType(key.Public()); err != nil {
		return nil, fmt.Errorf("sign %q: %w", ref, err)
	}
	r, repo, d, err := c.target(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := c.sign(ctx, repo, r, d, key); err != nil {
		return nil, fmt.Errorf("sign %q: %w", ref, err)
	}
	// Read back what a verifier will read.
	s, err := c.verifySignatures(ctx, func() (*remote.Repository, error) { return repo, nil }, r, d, []crypto.PublicKey{key.Public()})
	if err != nil {
		return nil, fmt.Errorf("sign %q: the signature written does not verify: %w", ref, err)
	}
	return s, nil
}

func (c *Client) sign(ctx context.Context, repo *remote.Repository, r Reference, d digest.Digest, key crypto.Signer) error {
	if _, err := repo.Manifests().Resolve(ctx, d.String()); err != nil {
		return fmt.Errorf("manifest %s: %w", d, registryError("resolve", err))
	}
	payload, err := signaturePayload(r, d)
	if err != nil {
		return err
	}
	sig, err := signPayload(key, payload)
	if err != nil {
		return err
	}
	tag := SignatureTag(d)
	var m ocispec.Manifest
	_, old, err := fetchSignatureManifest(ctx, repo, tag)
	switch {
	case err == nil:
		if err := json.Unmarshal(old, &m); err != nil {
			return fmt.Errorf("signature manifest %s: %w: %w", tag, ErrMalformedSignature, err)
		}
	case errors.Is(err, ErrNotFound):
	default:
		return err
	}
	layer := newBlob(SignatureMediaType, payload)
	for _, l := range m.Layers {
		// The same payload signed by the same key: nothing to add. (An
		// ECDSA signature differs at each signing, so compare by verifying.)
		if l.MediaType == SignatureMediaType && l.Digest == layer.desc.Digest {
			if old, err := base64.StdEncoding.DecodeString(l.Annotations[SignatureAnnotation]); err == nil && verifySignature(key.Public(), payload, old) == nil {
				return nil
			}
		}
	}
	layer.desc.Annotations = map[string]string{SignatureAnnotation: base64.StdEncoding.EncodeToString(sig)}
	m.Layers = append(m.Layers, layer.desc)
	if len(m.Layers) > maxSignatureLayers {
		return fmt.Errorf("signature manifest %s: %w: %d layers", tag, ErrTooLarge, len(m.Layers))
	}
	// The config of an image with the payloads as its layers, as cosign
	// writes it, so that image tools can show the signature manifest.
	diffIDs := make([]digest.Digest, len(m.Layers))
	for i, l := range m.Layers {
		diffIDs[i] = l.Digest
	}
	cfg, err := json.Marshal(ocispec.Image{RootFS: ocispec.RootFS{Type: "layers", DiffIDs: diffIDs}})
	if err != nil {
		return err
	}
	config := newBlob(ocispec.MediaTypeImageConfig, cfg)
	m.Versioned, m.MediaType, m.Config = specs.Versioned{SchemaVersion: 2}, ocispec.MediaTypeImageManifest, config.desc
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	for _, b := range []blob{layer, config} {
		ok, err := repo.Exists(ctx, b.desc)
		if err == nil && !ok {
			err = repo.Push(ctx, b.desc, bytes.NewReader(b.data))
		}
		if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return fmt.Errorf("blob %s: %w", b.desc.Digest, registryError("push", err))
		}
	}
	manifest := newBlob(ocispec.MediaTypeImageManifest, data)
	if err := repo.PushReference(ctx, manifest.desc, bytes.NewReader(data), tag); err != nil {
		return fmt.Errorf("signature manifest %s: %w", tag, registryError("push", err))
	}
	return nil
}

// target parses ref and returns its repository and manifest digest,
// resolving a tag if Options.AllowTags is set.
func (c *Client) target(ctx context.Context, ref string) (Reference, *remote.Repository, digest.Digest, error) {
	r, err := c.parsePinned(ref)
	if err != nil {
		return Reference{}, nil, "", err
	}
	repo, err := c.repository(r)
	if err != nil {
		return Reference{}, nil, "", fmt.Errorf("module %q: %w", ref, err)
	}
	if r.Digest != "" {
		return r, repo, digest.Digest(r.Digest), nil
	}
	desc, err := repo.Resolve(ctx, r.Tag)
	if err != nil {
		return Reference{}, nil, "", fmt.Errorf("module %q: %w", ref, registryError("resolve tag "+r.Tag, err))
	}
	return r, repo, desc.Digest, nil
}

// verifySignatures checks the signatures of manifest d of r's repository
// against keys, reading the signature manifest from the registry, or from
// the cache when the registry cannot be reached. Signatures that verify are
// cached; nothing is cached before they do.
func (c *Client) verifySignatures(ctx context.Context, getRepo func() (*remote.Repository, error), r Reference, d digest.Digest, keys []crypto.PublicKey) (*Signatures, error) {
	tag := SignatureTag(d)
	s := &Signatures{Reference: r.Pinned(d.String()), SignatureReference: Scheme + r.Registry + "/" + r.Repository + ":" + tag}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no public key to verify with", s.SignatureReference)
	}
	for _, k := range keys {
		if err := checkKeyType(k); err != nil {
			return nil, err
		}
	}
	var (
		data         []byte
		fetch        func(ocispec.Descriptor) ([]byte, error)
		fromRegistry = true
	)
	repo, err := getRepo()
	if err == nil {
		s.SignatureManifest, data, err = fetchSignatureManifest(ctx, repo, tag)
	}
	if err == nil {
		fetch = func(desc ocispec.Descriptor) ([]byte, error) {
			return fetchChecked(ctx, repo.Blobs(), desc, maxPayloadSize)
		}
	} else {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%s: %w: %w", s.SignatureReference, ErrNoSignature, err)
		}
		cached, cerr := c.cachedSignatures(d)
		if cerr != nil || errors.Is(err, ErrUnauthorized) {
			return nil, fmt.Errorf("%s: %w", s.SignatureReference, err)
		}
		s.SignatureManifest, data, fetch, fromRegistry = cached.manifest, cached.data, c.cachedBlob, false
		s.Cached = true
		klog.FromContext(ctx).Info("Registry unreachable: verifying the module's cached signatures again", "reference", s.Reference, "err", err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w: manifest: %w", s.SignatureReference, ErrMalformedSignature, err)
	}
	if len(m.Layers) > maxSignatureLayers {
		return nil, fmt.Errorf("%s: %w: %d layers, the limit is %d", s.SignatureReference, ErrTooLarge, len(m.Layers), maxSignatureLayers)
	}
	var (
		failures []error
		payloads []blob
	)
	for _, l := range m.Layers {
		if l.MediaType != SignatureMediaType {
			continue
		}
		s.Found++
		if l.Size > maxPayloadSize {
			failures = append(failures, fmt.Errorf("signature %s: %w: payload of %d bytes", l.Digest, ErrMalformedSignature, l.Size))
			continue
		}
		payload, err := fetch(l)
		if err != nil {
			failures = append(failures, fmt.Errorf("signature %s: payload: %w", l.Digest, err))
			continue
		}
		if err := checkSignature(l, payload, d, keys); err != nil {
			failures = append(failures, fmt.Errorf("signature %s: %w", l.Digest, err))
			continue
		}
		s.Verified++
		payloads = append(payloads, blob{l, payload})
	}
	if s.Found == 0 {
		return nil, fmt.Errorf("%s: %w: no %s layer", s.SignatureReference, ErrNoSignature, SignatureMediaType)
	}
	if s.Verified == 0 {
		return nil, fmt.Errorf("%s: none of %d signatures verifies: %w", s.SignatureReference, s.Found, errors.Join(failures...))
	}
	if fromRegistry && c.cache != nil {
		if err := c.cacheSignatures(d, s.SignatureManifest, data, payloads); err != nil {
			klog.FromContext(ctx).Error(err, "Caching a module's signatures failed; a pull with the registry down will fail", "reference", s.Reference)
		}
	}
	return s, nil
}

// checkSignature checks one simple-signing layer: its signature over
// payload with any of keys, then that the payload names manifest d.
func checkSignature(layer ocispec.Descriptor, payload []byte, d digest.Digest, keys []crypto.PublicKey) error {
	enc, ok := layer.Annotations[SignatureAnnotation]
	if !ok {
		return fmt.Errorf("%w: no %s annotation", ErrMalformedSignature, SignatureAnnotation)
	}
	sig, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(sig) == 0 {
		return fmt.Errorf("%w: annotation %s is not base64: %q", ErrMalformedSignature, SignatureAnnotation, truncate(enc, 40))
	}
	var verr error
	for _, k := range keys {
		if verr = verifySignature(k, payload, sig); verr == nil {
			break
		}
	}
	if verr != nil {
		return fmt.Errorf("%w: tried %d", ErrBadSignature, len(keys))
	}
	var p simpleSigning
	if err := json.Unmarshal(payload, &p); err != nil {
		return fmt.Errorf("%w: signed payload: %w", ErrMalformedSignature, err)
	}
	if p.Critical.Type != SignaturePayloadType {
		return fmt.Errorf("%w: signed payload of type %q, want %q", ErrMalformedSignature, p.Critical.Type, SignaturePayloadType)
	}
	// critical.identity.docker-reference is not compared, as cosign does
	// not: the digest pins the content, and a signature copied with its
	// module to a mirror still holds.
	if got := p.Critical.Image.DockerManifestDigest; got != d.String() {
		return fmt.Errorf("%w: it signs %s (%s), not %s", ErrSignatureMismatch, got, p.Critical.Identity.DockerReference, d)
	}
	return nil
}

// signPayload signs payload as cosign does: ECDSA and RSA (PKCS #1 v1.5)
// over its SHA-256 digest, Ed25519 over the payload itself.
func signPayload(key crypto.Signer, payload []byte) ([]byte, error) {
	if _, ok := key.Public().(ed25519.PublicKey); ok {
		return key.Sign(rand.Reader, payload, crypto.Hash(0))
	}
	h := sha256.Sum256(payload)
	return key.Sign(rand.Reader, h[:], crypto.SHA256)
}

// verifySignature is the counterpart of signPayload.
func verifySignature(key crypto.PublicKey, payload, sig []byte) error {
	h := sha256.Sum256(payload)
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		if ecdsa.VerifyASN1(k, h[:], sig) {
			return nil
		}
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, h[:], sig)
	case ed25519.PublicKey:
		if ed25519.Verify(k, payload, sig) {
			return nil
		}
	default:
		return fmt.Errorf("key of type %T", key)
	}
	return errors.New("invalid signature")
}

// fetchSignatureManifest reads the manifest tagged tag; a missing one is
// ErrNotFound.
func fetchSignatureManifest(ctx context.Context, repo *remote.Repository, tag string) (digest.Digest, []byte, error) {
	_, rc, err := repo.Manifests().FetchReference(ctx, tag)
	if err != nil {
		return "", nil, registryError("fetch "+tag, err)
	}
	defer rc.Close()
	data, err := readLimited(rc, maxManifestSize)
	if err != nil {
		return "", nil, fmt.Errorf("fetch %s: %w", tag, err)
	}
	return digest.FromBytes(data), data, nil
}

func readLimited(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
	}
	return data, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
