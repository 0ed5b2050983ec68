// Package sigstoretest is a Sigstore of its own for tests, in memory and
// offline: a Fulcio certificate authority, a Rekor transparency log and a
// timestamp authority, the trusted root (trusted_root.json) that trusts
// them, and keyless signing of in-toto statements into Sigstore bundles as
// cosign writes them.
package sigstoretest

import (
	"encoding/base64"
	"encoding/hex"
	"testing"
	"time"

	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
)

// Sigstore is one self-made Sigstore instance.
type Sigstore struct {
	vs *ca.VirtualSigstore
}

// New returns a new instance, with its own keys.
func New(t testing.TB) *Sigstore {
	t.Helper()
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	return &Sigstore{vs}
}

// TrustedRoot returns the trusted root of the instance, as the JSON of a
// trusted_root.json: its certificate authority, transparency log and
// timestamp authority, and no certificate transparency log (its
// certificates carry no SCT).
func (s *Sigstore) TrustedRoot(t testing.TB) []byte {
	t.Helper()
	logs := map[string]*root.TransparencyLog{}
	for id, l := range s.vs.RekorLogs() {
		// The virtual log keeps its ID as hex text; a trusted root holds
		// the raw bytes.
		c := *l
		raw, err := hex.DecodeString(id)
		if err != nil {
			t.Fatal(err)
		}
		c.ID = raw
		logs[id] = &c
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, s.vs.FulcioCertificateAuthorities(), nil, s.vs.TimestampingAuthorities(), logs)
	if err != nil {
		t.Fatal(err)
	}
	data, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Sign signs an in-toto statement as subject (an email or URI) of OIDC
// issuer and returns the Sigstore bundle (v0.3, JSON): a DSSE envelope,
// the short-lived certificate, and the log entry with its inclusion
// promise and proof.
func (s *Sigstore) Sign(t testing.TB, subject, issuer string, statement []byte) []byte {
	t.Helper()
	e, err := s.vs.AttestAtTime(subject, issuer, statement, time.Now().Add(5*time.Minute), true)
	if err != nil {
		t.Fatal(err)
	}
	vc, err := e.VerificationContent()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := e.SignatureContent()
	if err != nil {
		t.Fatal(err)
	}
	env := sc.EnvelopeContent().RawEnvelope()
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	pe := &protodsse.Envelope{Payload: payload, PayloadType: env.PayloadType}
	for _, sig := range env.Signatures {
		raw, err := base64.StdEncoding.DecodeString(sig.Sig)
		if err != nil {
			t.Fatal(err)
		}
		pe.Signatures = append(pe.Signatures, &protodsse.Signature{Sig: raw, Keyid: sig.KeyID})
	}
	entries, err := e.TlogEntries()
	if err != nil {
		t.Fatal(err)
	}
	var tles []*protorekor.TransparencyLogEntry
	for _, entry := range entries {
		tle := entry.TransparencyLogEntry()
		tle.KindVersion = &protorekor.KindVersion{Kind: "dsse", Version: "0.0.1"}
		set, err := s.vs.RekorSignPayload(tlog.RekorPayload{
			Body:           base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
			IntegratedTime: tle.IntegratedTime,
			LogIndex:       tle.LogIndex,
			LogID:          hex.EncodeToString(tle.LogId.KeyId),
		})
		if err != nil {
			t.Fatal(err)
		}
		tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
		tles = append(tles, tle)
	}
	b := &bundle.Bundle{Bundle: &protobundle.Bundle{
		MediaType: "application/vnd.dev.sigstore.bundle.v0.3+json",
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content:     &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: vc.Certificate().Raw}},
			TlogEntries: tles,
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: pe},
	}}
	data, err := b.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return data
}
