package oci

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// ParsePublicKeys returns the public keys of the PEM "PUBLIC KEY" blocks
// (PKIX, as `cosign generate-key-pair` and `openssl pkey -pubout` write
// them) in data. A file may hold several keys; one without any is an error.
func ParsePublicKeys(data []byte) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("PEM block %q: want PUBLIC KEY", b.Type)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key: %w", err)
		}
		if err := checkKeyType(k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM PUBLIC KEY block")
	}
	return keys, nil
}

// ParsePrivateKey returns the signer of an unencrypted PEM private key:
// PKCS #8 ("PRIVATE KEY"), SEC 1 ("EC PRIVATE KEY") or PKCS #1 ("RSA PRIVATE
// KEY"). cosign's own password-encrypted format ("ENCRYPTED COSIGN PRIVATE
// KEY") is refused with a message saying so.
func ParsePrivateKey(data []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	var (
		k   any
		err error
	)
	switch b.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	case "ENCRYPTED COSIGN PRIVATE KEY", "ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED PRIVATE KEY":
		return nil, fmt.Errorf("PEM block %q: password-encrypted keys are not supported; give an unencrypted PKCS #8 or SEC 1 key", b.Type)
	default:
		return nil, fmt.Errorf("PEM block %q: want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", k)
	}
	if err := checkKeyType(s.Public()); err != nil {
		return nil, err
	}
	return s, nil
}

// checkKeyType accepts the key types cosign signs and verifies with:
// ECDSA (P-256 by default), RSA and Ed25519.
func checkKeyType(k crypto.PublicKey) error {
	switch k.(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey, ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("key of type %T: want ECDSA, RSA or Ed25519", k)
}
