package oci

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
	sgverify "github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"
	"k8s.io/klog/v2"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
)

// cosign's Sigstore bundle layout (its specs/BUNDLE_SPEC.md), the default
// of cosign 3: a signature is a Sigstore bundle (JSON) stored as the single
// layer of a manifest whose subject is the signed manifest, found through
// the registry's referrers API or, on a registry without one, the
// referrers tag (sha256-HEX). The bundle holds a DSSE envelope of an
// in-toto statement whose subject is the signed manifest's digest and
// whose predicate type is SignPredicateType.
const (
	// BundleMediaType is the artifact type and layer media type cosign
	// writes; BundleMediaTypePrefix matches every bundle version on read.
	BundleMediaType       = "application/vnd.dev.sigstore.bundle.v0.3+json"
	BundleMediaTypePrefix = "application/vnd.dev.sigstore.bundle"
	// SignPredicateType is the predicate of an image signature, as opposed
	// to an attestation (SLSA provenance, an SBOM) signed the same way.
	SignPredicateType = "https://sigstore.dev/cosign/sign/v1"
	// InTotoPayloadType is the DSSE payload type of an in-toto statement.
	InTotoPayloadType = "application/vnd.in-toto+json"
	inTotoStatementV1 = "https://in-toto.io/Statement/v1"
)

// maxBundleSize caps one bundle: a certificate chain, a log entry with its
// proof and a timestamp are a few KiB.
const maxBundleSize = 1 << 20

// statement is the part of an in-toto statement a signature check reads.
type statement struct {
	Type          string             `json:"_type"`
	Subject       []statementSubject `json:"subject"`
	PredicateType string             `json:"predicateType"`
	Predicate     map[string]any     `json:"predicate"`
}

type statementSubject struct {
	Name   string            `json:"name,omitempty"`
	Digest map[string]string `json:"digest"`
}

// signStatement returns the statement cosign signs for manifest d of
// repository REGISTRY/REPOSITORY.
func signStatement(r Reference, d digest.Digest) ([]byte, error) {
	return json.Marshal(statement{
		Type:          inTotoStatementV1,
		Subject:       []statementSubject{{Name: r.Registry + "/" + r.Repository, Digest: map[string]string{d.Algorithm().String(): d.Encoded()}}},
		PredicateType: SignPredicateType,
		Predicate:     map[string]any{},
	})
}

// SignStatement returns the in-toto statement that signs the module ref
// (pinned by digest) in the bundle layout: what a keyless signer (cosign,
// or a test's own Sigstore) wraps in a DSSE envelope.
func SignStatement(ref string) ([]byte, error) {
	r, err := ParseReference(ref)
	if err != nil {
		return nil, err
	}
	if r.Digest == "" {
		return nil, fmt.Errorf("module %q: %w", ref, ErrNotPinned)
	}
	return signStatement(r, digest.Digest(r.Digest))
}

// bundleSigner names who made a bundle that verified.
func bundleSigner(res *sgverify.VerificationResult, key crypto.PublicKey) string {
	if key != nil {
		return "key " + keyID(key)
	}
	if res != nil && res.Signature != nil && res.Signature.Certificate != nil {
		c := res.Signature.Certificate
		return c.SubjectAlternativeName + " (" + c.Issuer + ")"
	}
	return "keyless"
}

// keyID is the hint cosign writes in a key-signed bundle: the base64
// SHA-256 of the key's PKIX form.
func keyID(key crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return fmt.Sprintf("%T", key)
	}
	h := sha256.Sum256(der)
	return base64.StdEncoding.EncodeToString(h[:])
}

// checkBundle checks one bundle against policy p for manifest d and
// returns who signed it.
func checkBundle(data []byte, d digest.Digest, p SignaturePolicy) (string, error) {
	var b bundle.Bundle
	if err := b.UnmarshalJSON(data); err != nil {
		return "", fmt.Errorf("%w: %w", ErrMalformedSignature, err)
	}
	env := b.GetDsseEnvelope()
	if env == nil {
		return "", fmt.Errorf("%w: a message-signature bundle, not an image signature (a DSSE envelope of an in-toto statement)", ErrMalformedSignature)
	}
	if env.PayloadType != InTotoPayloadType {
		return "", fmt.Errorf("%w: DSSE payload of type %q, want %q", ErrMalformedSignature, env.PayloadType, InTotoPayloadType)
	}
	var st statement
	if err := json.Unmarshal(env.Payload, &st); err != nil {
		return "", fmt.Errorf("%w: in-toto statement: %w", ErrMalformedSignature, err)
	}
	if st.PredicateType != SignPredicateType {
		return "", fmt.Errorf("%w: an attestation of predicate type %q, not a signature (%s)", ErrMalformedSignature, st.PredicateType, SignPredicateType)
	}
	var names []string
	found := false
	for _, s := range st.Subject {
		if s.Digest[d.Algorithm().String()] == d.Encoded() {
			found = true
		}
		for alg, hex := range s.Digest {
			names = append(names, alg+":"+hex)
		}
	}
	if !found {
		return "", fmt.Errorf("%w: it signs %s, not %s", ErrSignatureMismatch, strings.Join(names, ", "), d)
	}
	raw, err := hex.DecodeString(d.Encoded())
	if err != nil {
		return "", err
	}
	artifact := sgverify.WithArtifactDigest(d.Algorithm().String(), raw)
	if b.VerificationMaterial.GetPublicKey() != nil {
		if len(p.PublicKeys) == 0 {
			return "", fmt.Errorf("%w: signed with a key, and no key is trusted", ErrBadSignature)
		}
		for _, k := range p.PublicKeys {
			if keyVerifies(&b, k, artifact) == nil {
				return bundleSigner(nil, k), nil
			}
		}
		return "", fmt.Errorf("%w: tried %d", ErrBadSignature, len(p.PublicKeys))
	}
	if p.Keyless == nil {
		return "", fmt.Errorf("%w: a keyless signature, and no keyless identity is trusted", ErrBadSignature)
	}
	res, err := p.Keyless.verifier.Verify(&b, sgverify.NewPolicy(artifact, p.Keyless.policies...))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	return bundleSigner(res, nil), nil
}

// keyVerifies checks a key-signed bundle with key. A key is not bound to
// a time, so its signature is checked as of now; log entries the bundle
// may carry are not required.
func keyVerifies(b *bundle.Bundle, key crypto.PublicKey, artifact sgverify.ArtifactPolicyOption) error {
	sv, err := signature.LoadVerifier(key, crypto.SHA256)
	if err != nil {
		return err
	}
	material := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) {
		return root.NewExpiringKey(sv, time.Time{}, time.Time{}), nil
	})
	v, err := sgverify.NewVerifier(material, sgverify.WithCurrentTime())
	if err != nil {
		return err
	}
	_, err = v.Verify(b, sgverify.NewPolicy(artifact, sgverify.WithKey()))
	return err
}

// keyBundle signs manifest d of r with key as a Sigstore bundle: a DSSE
// envelope of the signing statement and the key's hint, no log entry.
func keyBundle(r Reference, d digest.Digest, key crypto.Signer) ([]byte, error) {
	st, err := signStatement(r, d)
	if err != nil {
		return nil, err
	}
	sig, err := signPayload(key, dssePAE(InTotoPayloadType, st))
	if err != nil {
		return nil, err
	}
	b := &protobundle.Bundle{
		MediaType: BundleMediaType,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{Hint: keyID(key.Public())}},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: st, PayloadType: InTotoPayloadType,
			Signatures: []*protodsse.Signature{{Sig: sig}},
		}},
	}
	return (&bundle.Bundle{Bundle: b}).MarshalJSON()
}

// dssePAE is DSSE's pre-authentication encoding, the bytes signed.
func dssePAE(payloadType string, payload []byte) []byte {
	return fmt.Appendf(nil, "DSSEv1 %d %s %d %s", len(payloadType), payloadType, len(payload), payload)
}

// SignBundle signs the module ref with key in the Sigstore bundle layout
// (cosign 3's default; `cosign verify --key` accepts it) and attaches the
// bundle to the module. It returns the bundle's referrer manifest.
func (c *Client) SignBundle(ctx context.Context, ref string, key crypto.Signer) (digest.Digest, error) {
	if key == nil {
		return "", fmt.Errorf("sign %q: no key", ref)
	}
	if err := checkKeyType(key.Public()); err != nil {
		return "", fmt.Errorf("sign %q: %w", ref, err)
	}
	r, repo, d, err := c.target(ctx, ref)
	if err != nil {
		return "", err
	}
	data, err := keyBundle(r, d, key)
	if err != nil {
		return "", fmt.Errorf("sign %q: %w", ref, err)
	}
	m, err := attachBundle(ctx, repo, d, data)
	if err != nil {
		return "", fmt.Errorf("sign %q: %w", ref, err)
	}
	return m, nil
}

// AttachBundle attaches a Sigstore bundle (JSON) to the module ref, as
// `cosign sign` does: a manifest of artifact type BundleMediaType whose
// subject is the module. It returns that manifest's digest.
func (c *Client) AttachBundle(ctx context.Context, ref string, data []byte) (digest.Digest, error) {
	_, repo, d, err := c.target(ctx, ref)
	if err != nil {
		return "", err
	}
	m, err := attachBundle(ctx, repo, d, data)
	if err != nil {
		return "", fmt.Errorf("attach a bundle to %q: %w", ref, err)
	}
	return m, nil
}

func attachBundle(ctx context.Context, repo *remote.Repository, d digest.Digest, data []byte) (digest.Digest, error) {
	if len(data) > maxBundleSize {
		return "", fmt.Errorf("%w: bundle of %d bytes", ErrTooLarge, len(data))
	}
	subject, err := repo.Manifests().Resolve(ctx, d.String())
	if err != nil {
		return "", fmt.Errorf("manifest %s: %w", d, registryError("resolve", err))
	}
	layer := newBlob(BundleMediaType, data)
	layer.desc.Annotations = map[string]string{ocispec.AnnotationTitle: d.Algorithm().String() + "-" + layer.desc.Digest.Encoded() + ".sigstore.json"}
	if err := pushBlob(ctx, repo, layer); err != nil {
		return "", err
	}
	desc, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, BundleMediaType, oras.PackManifestOptions{
		Subject: &subject,
		Layers:  []ocispec.Descriptor{layer.desc},
		ManifestAnnotations: map[string]string{
			"dev.sigstore.bundle.content":       "dsse-envelope",
			"dev.sigstore.bundle.predicateType": SignPredicateType,
			ocispec.AnnotationCreated:           time.Now().UTC().Format(time.RFC3339),
		},
	})
	if err != nil {
		return "", fmt.Errorf("bundle manifest: %w", registryError("push", err))
	}
	return desc.Digest, nil
}

func pushBlob(ctx context.Context, repo *remote.Repository, b blob) error {
	ok, err := repo.Exists(ctx, b.desc)
	if err == nil && !ok {
		err = repo.Push(ctx, b.desc, bytes.NewReader(b.data))
	}
	if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return fmt.Errorf("blob %s: %w", b.desc.Digest, registryError("push", err))
	}
	return nil
}

// fetchBundles returns the Sigstore bundles attached to manifest d, each
// checked against its descriptor and size cap. Referrers of another
// artifact type (attestations stored otherwise, other tools' artifacts)
// are skipped. A bundle referrer that cannot be used (malformed, too
// large, not what its digest says, gone) is one of problems, and the
// others are still read: whoever can push a referrer cannot hide the good
// signatures. err is set only when the registry could not be read (then
// a cache may serve).
func fetchBundles(ctx context.Context, repo *remote.Repository, d digest.Digest) (bundles []blob, problems []error, err error) {
	var refs []ocispec.Descriptor
	err = repo.Referrers(ctx, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: d}, "", func(page []ocispec.Descriptor) error {
		for _, r := range page {
			if strings.HasPrefix(r.ArtifactType, BundleMediaTypePrefix) {
				refs = append(refs, r)
			}
		}
		if len(refs) > maxSignatureLayers {
			return fmt.Errorf("%w: over %d bundles", ErrTooLarge, maxSignatureLayers)
		}
		return nil
	})
	if err != nil {
		return nil, nil, registryError("list referrers of "+d.String(), err)
	}
	// unusable tells a referrer's own problem from the registry's.
	unusable := func(err error) bool {
		return errors.Is(err, ErrMalformedSignature) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrDigestMismatch) || errors.Is(err, ErrNotFound)
	}
	for _, r := range refs {
		data, err := fetchChecked(ctx, repo.Manifests(), r, maxManifestSize)
		if err != nil {
			err = fmt.Errorf("bundle manifest %s: %w", r.Digest, err)
			if unusable(err) {
				problems = append(problems, err)
				continue
			}
			return nil, nil, err
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(data, &m); err != nil || len(m.Layers) != 1 || !strings.HasPrefix(m.Layers[0].MediaType, BundleMediaTypePrefix) {
			problems = append(problems, fmt.Errorf("bundle manifest %s: %w: want one layer of type %s", r.Digest, ErrMalformedSignature, BundleMediaType))
			continue
		}
		l := m.Layers[0]
		b, err := fetchChecked(ctx, repo.Blobs(), l, maxBundleSize)
		if err != nil {
			err = fmt.Errorf("bundle %s: %w", l.Digest, err)
			if unusable(err) {
				problems = append(problems, err)
				continue
			}
			return nil, nil, err
		}
		bundles = append(bundles, blob{l, b})
	}
	return bundles, problems, nil
}

// Verified bundles are cached like key-based signatures: the bundle blobs
// by digest, and under bundles/ALGORITHM/HEX (the module's manifest) the
// digests of those that verified, one per line.

func (c *cache) bundlesPath(d digest.Digest) string {
	return filepath.Join(c.dir, "bundles", d.Algorithm().String(), d.Encoded())
}

func (c *Client) cacheBundles(d digest.Digest, bundles []blob) error {
	var list bytes.Buffer
	for _, b := range bundles {
		if err := c.cache.put(b.desc.Digest, b.data); err != nil {
			return err
		}
		fmt.Fprintln(&list, b.desc.Digest)
	}
	return writeFile(c.cache.bundlesPath(d), list.Bytes())
}

func (c *Client) cachedBundles(d digest.Digest) ([]blob, error) {
	if c.cache == nil {
		return nil, errors.New("no cache")
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	list, err := os.ReadFile(c.cache.bundlesPath(d))
	if err != nil {
		return nil, err
	}
	var out []blob
	for _, line := range strings.Fields(string(list)) {
		bd, err := digest.Parse(line)
		if err != nil {
			return nil, fmt.Errorf("cached bundles of %s: %w", d, err)
		}
		data, err := c.cache.get(bd, maxBundleSize)
		if err != nil {
			return nil, err
		}
		out = append(out, blob{ocispec.Descriptor{MediaType: BundleMediaType, Digest: bd, Size: int64(len(data))}, data})
	}
	return out, nil
}

// bundleSet is the bundles of one module, read once per check.
type bundleSet struct {
	bundles  []blob
	problems []error // bundle referrers that could not be used
	cached   bool
	err      error // why they could not be read
}

// readBundles reads the bundles of manifest d from the registry, or from
// the cache when the registry cannot be reached.
func (c *Client) readBundles(ctx context.Context, getRepo func() (*remote.Repository, error), d digest.Digest) bundleSet {
	repo, err := getRepo()
	if err == nil {
		var (
			bs       []blob
			problems []error
		)
		if bs, problems, err = fetchBundles(ctx, repo, d); err == nil || errors.Is(err, ErrNotFound) {
			return bundleSet{bundles: bs, problems: problems}
		}
	}
	if errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrTooLarge) {
		return bundleSet{err: err}
	}
	cached, cerr := c.cachedBundles(d)
	if cerr != nil {
		return bundleSet{err: err}
	}
	klog.FromContext(ctx).Info("Registry unreachable: verifying the module's cached signature bundles again", "manifest", d, "err", err)
	return bundleSet{bundles: cached, cached: true}
}

// verifyBundles checks the bundles against p and returns who signed those
// that verify, and the bundles that did.
func verifyBundles(set bundleSet, d digest.Digest, p SignaturePolicy) (signers []string, ok []blob, failures []error) {
	failures = append(failures, set.problems...)
	for _, b := range set.bundles {
		who, err := checkBundle(b.data, d, p)
		if err != nil {
			failures = append(failures, fmt.Errorf("bundle %s: %w", b.desc.Digest, err))
			continue
		}
		signers = append(signers, who)
		ok = append(ok, b)
	}
	return signers, ok, failures
}

// FoundSignature is a signature attached to a module as read from the
// registry, before any verification: what `wasp module inspect` lists.
type FoundSignature struct {
	// Layout is "bundle" (a Sigstore bundle referrer) or "simplesigning"
	// (a layer of the sha256-HEX.sig manifest).
	Layout string `json:"layout"`
	// Digest is the bundle's or the signature layer's.
	Digest digest.Digest `json:"digest"`
	// Signer is who the bundle says signed it, unverified: "key HINT",
	// or a keyless certificate's "SUBJECT (ISSUER)"; empty for simple
	// signing, which names no signer.
	Signer string `json:"signer,omitempty"`
	// Problem says why the signature cannot be read, if it cannot.
	Problem string `json:"problem,omitempty"`
}

// FindSignatures lists the signatures attached to the module ref in
// either layout, without verifying them.
func (c *Client) FindSignatures(ctx context.Context, ref string) ([]FoundSignature, error) {
	_, repo, d, err := c.target(ctx, ref)
	if err != nil {
		return nil, err
	}
	var out []FoundSignature
	_, data, err := fetchSignatureManifest(ctx, repo, SignatureTag(d))
	switch {
	case err == nil:
		var m ocispec.Manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", SignatureTag(d), ErrMalformedSignature, err)
		}
		for _, l := range m.Layers {
			if l.MediaType == SignatureMediaType {
				out = append(out, FoundSignature{Layout: "simplesigning", Digest: l.Digest})
			}
		}
	case !errors.Is(err, ErrNotFound):
		return nil, err
	}
	bundles, problems, err := fetchBundles(ctx, repo, d)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	for _, p := range problems {
		out = append(out, FoundSignature{Layout: "bundle", Problem: p.Error()})
	}
	for _, b := range bundles {
		f := FoundSignature{Layout: "bundle", Digest: b.desc.Digest}
		f.Signer, err = claimedSigner(b.data)
		if err != nil {
			f.Problem = err.Error()
		}
		out = append(out, f)
	}
	return out, nil
}

// claimedSigner returns who a bundle says signed it, unverified.
func claimedSigner(data []byte) (string, error) {
	var b bundle.Bundle
	if err := b.UnmarshalJSON(data); err != nil {
		return "", err
	}
	if pk := b.VerificationMaterial.GetPublicKey(); pk != nil {
		return "key " + pk.GetHint(), nil
	}
	vc, err := b.VerificationContent()
	if err != nil {
		return "", err
	}
	cert := vc.Certificate()
	if cert == nil {
		return "", errors.New("no certificate")
	}
	sum, err := certificate.SummarizeCertificate(cert)
	if err != nil {
		return "", err
	}
	return sum.SubjectAlternativeName + " (" + sum.Issuer + ")", nil
}
