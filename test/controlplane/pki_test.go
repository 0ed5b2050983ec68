package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"slices"
	"testing"
)

func TestPKI(t *testing.T) {
	p, err := newPKI()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.CA) {
		t.Fatal("CA certificate does not parse")
	}
	tests := []struct {
		name      string
		cert, key []byte
		usage     x509.ExtKeyUsage
		cn        string
		org       []string
	}{
		{name: "apiserver", cert: p.ServerCert, key: p.ServerKey, usage: x509.ExtKeyUsageServerAuth, cn: "kube-apiserver"},
		{name: "admin", cert: p.AdminCert, key: p.AdminKey, usage: x509.ExtKeyUsageClientAuth, cn: adminUser, org: []string{"system:masters"}},
		{name: "kube-proxy", cert: p.ProxyCert, key: p.ProxyKey, usage: x509.ExtKeyUsageClientAuth, cn: kubeProxyUser},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pair, err := tls.X509KeyPair(tt.cert, tt.key)
			if err != nil {
				t.Fatalf("key pair: %v", err)
			}
			c := pair.Leaf
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tt.usage}}); err != nil {
				t.Errorf("verify against the CA: %v", err)
			}
			if c.Subject.CommonName != tt.cn || !slices.Equal(c.Subject.Organization, tt.org) {
				t.Errorf("subject CN=%q O=%q, want CN=%q O=%q", c.Subject.CommonName, c.Subject.Organization, tt.cn, tt.org)
			}
		})
	}

	server, _ := pem.Decode(p.ServerCert)
	c, err := x509.ParseCertificate(server.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if err := c.VerifyHostname(host); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}
	if !slices.ContainsFunc(c.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
		t.Errorf("serving certificate IPs %v lack 127.0.0.1", c.IPAddresses)
	}
	if b, _ := pem.Decode(p.SAPublic); b == nil || b.Type != "PUBLIC KEY" {
		t.Errorf("service-account public key is not a PEM PUBLIC KEY")
	}
	if b, _ := pem.Decode(p.SAPrivate); b == nil || b.Type != "EC PRIVATE KEY" {
		t.Errorf("service-account private key is not a PEM EC PRIVATE KEY")
	}
}
