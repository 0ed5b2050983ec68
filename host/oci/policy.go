package oci

import (
	"crypto"
	"errors"
	"fmt"
	"strings"

	"github.com/sigstore/sigstore-go/pkg/root"
	sgverify "github.com/sigstore/sigstore-go/pkg/verify"
)

// SignaturePolicy says who must have signed a module. A module satisfies
// it when at least one of its signatures verifies under it:
//
//   - a signature in cosign's key-based layout (SignatureTag), or a
//     Sigstore bundle signed with a key, that verifies with one of
//     PublicKeys;
//   - a keyless Sigstore bundle (a short-lived certificate from Fulcio, its
//     signature logged in Rekor) that Keyless accepts.
//
// A Client given several policies requires every one of them: a node-wide
// policy cannot be weakened by a module's own.
type SignaturePolicy struct {
	// PublicKeys are trusted signing keys (ECDSA, RSA or Ed25519;
	// ParsePublicKeys reads them from PEM); optional.
	PublicKeys []crypto.PublicKey
	// Keyless accepts keyless signatures; optional.
	Keyless *KeylessPolicy
}

// empty reports whether the policy could accept no signature at all.
func (p SignaturePolicy) empty() bool { return len(p.PublicKeys) == 0 && p.Keyless == nil }

// describe names the policy's trust in an error: "2 keys" or
// "1 key, or keyless as ops@example.com (https://issuer)".
func (p SignaturePolicy) describe() string {
	var parts []string
	switch n := len(p.PublicKeys); n {
	case 0:
	case 1:
		parts = append(parts, "1 key")
	default:
		parts = append(parts, fmt.Sprintf("%d keys", n))
	}
	if p.Keyless != nil {
		ids := make([]string, len(p.Keyless.identities))
		for i, id := range p.Keyless.identities {
			ids[i] = id.String()
		}
		parts = append(parts, "keyless as "+strings.Join(ids, " or "))
	}
	return strings.Join(parts, ", or ")
}

// KeylessPolicy accepts Sigstore bundles whose certificate chains to a
// certificate authority of a trusted root, names one of its identities,
// and whose signature a transparency log of the root has logged while the
// certificate was valid. Build one with NewKeylessPolicy.
type KeylessPolicy struct {
	verifier   *sgverify.Verifier
	identities []Identity
	policies   []sgverify.PolicyOption
}

// Identity is a signer's certificate identity, as `cosign verify` takes
// it: the OIDC issuer and the subject (the certificate's SAN: an email, a
// URI such as a CI workflow), each given exactly or as a regular
// expression (RE2, matched anywhere unless anchored). One form of each is
// required.
type Identity struct {
	Issuer, IssuerRegExp   string
	Subject, SubjectRegExp string
}

func (id Identity) String() string {
	s, i := id.Subject, id.Issuer
	if s == "" {
		s = "~" + id.SubjectRegExp
	}
	if i == "" {
		i = "~" + id.IssuerRegExp
	}
	return s + " (" + i + ")"
}

// ErrTrustedRoot: a trusted root that cannot be read or used.
var ErrTrustedRoot = errors.New("invalid trusted root")

// NewKeylessPolicy returns the policy of a Sigstore trusted root (the JSON
// of trusted_root.json, as `cosign trusted-root create` writes it or as
// Sigstore's TUF repository serves it) and the identities it accepts.
//
// A signature must have been logged in one of the root's transparency logs
// (an inclusion promise or proof, checked offline against the log's key),
// and the certificate must have been valid at the time logged. When the
// root lists certificate transparency logs, the certificate must also
// carry a signed certificate timestamp from one of them, as `cosign verify`
// requires; a private Sigstore without a CT log lists none.
func NewKeylessPolicy(trustedRoot []byte, identities []Identity) (*KeylessPolicy, error) {
	if len(identities) == 0 {
		return nil, errors.New("keyless: no identity to accept")
	}
	tr, err := root.NewTrustedRootFromJSON(trustedRoot)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTrustedRoot, err)
	}
	if len(tr.FulcioCertificateAuthorities()) == 0 {
		return nil, fmt.Errorf("%w: no certificate authority", ErrTrustedRoot)
	}
	if len(tr.RekorLogs()) == 0 {
		return nil, fmt.Errorf("%w: no transparency log", ErrTrustedRoot)
	}
	opts := []sgverify.VerifierOption{sgverify.WithTransparencyLog(1), sgverify.WithIntegratedTimestamps(1)}
	if len(tr.CTLogs()) > 0 {
		opts = append(opts, sgverify.WithSignedCertificateTimestamps(1))
	}
	v, err := sgverify.NewVerifier(tr, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTrustedRoot, err)
	}
	p := &KeylessPolicy{verifier: v, identities: identities}
	for i, id := range identities {
		if (id.Issuer == "") == (id.IssuerRegExp == "") {
			return nil, fmt.Errorf("keyless identity %d: want an issuer or an issuer regular expression, exactly one", i)
		}
		if (id.Subject == "") == (id.SubjectRegExp == "") {
			return nil, fmt.Errorf("keyless identity %d: want a subject or a subject regular expression, exactly one", i)
		}
		ci, err := sgverify.NewShortCertificateIdentity(id.Issuer, id.IssuerRegExp, id.Subject, id.SubjectRegExp)
		if err != nil {
			return nil, fmt.Errorf("keyless identity %d: %w", i, err)
		}
		p.policies = append(p.policies, sgverify.WithCertificateIdentity(ci))
	}
	return p, nil
}
