package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names in the pki directory of a control plane.
const (
	caCertFile       = "ca.crt"
	serverCertFile   = "apiserver.crt"
	serverKeyFile    = "apiserver.key"
	saPublicKeyFile  = "sa.pub"
	saPrivateKeyFile = "sa.key"
)

const (
	adminUser     = "admin"             // in group system:masters
	kubeProxyUser = "system:kube-proxy" // bound to system:node-proxier by bootstrap RBAC
	// certValidity covers the longest test run by far; every run has its own CA.
	certValidity = 24 * time.Hour
)

// pki holds PEM-encoded credentials of one control plane. Keys are ECDSA
// P-256: cheaper to generate than RSA, and accepted by kube-apiserver for
// serving, client and service-account tokens (ES256) alike.
type pki struct {
	CA         []byte // CA certificate
	ServerCert []byte // kube-apiserver serving certificate
	ServerKey  []byte
	AdminCert  []byte // CN=admin, O=system:masters
	AdminKey   []byte
	ProxyCert  []byte // CN=system:kube-proxy (bootstrap RBAC: system:node-proxier)
	ProxyKey   []byte
	SAPublic   []byte // service-account token verification key
	SAPrivate  []byte // service-account token signing key
}

type certKey struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newPKI generates a CA and the certificates a loopback control plane needs.
func newPKI() (*pki, error) {
	ca, caPEM, _, err := newCert(nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "wasp-e2e-ca"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	})
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	p := &pki{CA: caPEM}
	_, p.ServerCert, p.ServerKey, err = newCert(ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		// "kubernetes.default.svc" is the in-cluster name of the apiserver;
		// harmless here and lets tests reuse the certificate through a tunnel.
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
	if err != nil {
		return nil, fmt.Errorf("apiserver serving certificate: %w", err)
	}
	client := func(cn string, org ...string) ([]byte, []byte, error) {
		_, c, k, err := newCert(ca, &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn, Organization: org},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("client certificate %q: %w", cn, err)
		}
		return c, k, nil
	}
	// O=system:masters is bound to cluster-admin by bootstrap RBAC.
	if p.AdminCert, p.AdminKey, err = client(adminUser, "system:masters"); err != nil {
		return nil, err
	}
	if p.ProxyCert, p.ProxyKey, err = client(kubeProxyUser); err != nil {
		return nil, err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if p.SAPrivate, err = encodeKey(sa); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	p.SAPublic = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	return p, nil
}

// newCert creates a key and a certificate from template, signed by parent, or
// self-signed when parent is nil.
func newCert(parent *certKey, template *x509.Certificate) (ck *certKey, certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, nil, err
	}
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(certValidity)
	signer, signerCert := key, template
	if parent != nil {
		signer, signerCert = parent.key, parent.cert
	}
	der, err := x509.CreateCertificate(rand.Reader, template, signerCert, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &certKey{cert: cert, key: key}, certPEM, keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// write stores the files kube-apiserver reads into dir.
func (p *pki) write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		caCertFile:       p.CA,
		serverCertFile:   p.ServerCert,
		serverKeyFile:    p.ServerKey,
		saPublicKeyFile:  p.SAPublic,
		saPrivateKeyFile: p.SAPrivate,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
