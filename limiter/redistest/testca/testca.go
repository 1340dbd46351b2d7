// Package testca is a certificate authority made for one test, writing PEM
// files: the one implementation redistest, peertest and envoy's tests issue
// their certificates from. It lives under limiter/ so that limiter's tests
// may use it too (limiter imports nothing under internal/).
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA signs the certificates a test needs. Keys are ECDSA P-256 and every
// certificate is valid from an hour ago for a day, so that clock skew
// between the test and a server it starts does not matter.
type CA struct {
	File string         // the CA certificate
	Pool *x509.CertPool // the CA alone

	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

// New writes a CA certificate with common name name to file (its directory
// made if missing).
func New(t testing.TB, name, file string) *CA {
	t.Helper()
	ca := &CA{File: file, Pool: x509.NewCertPool(), key: newKey(t), serial: 1}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.Pool.AddCert(ca.cert)
	writePEM(t, file, "CERTIFICATE", der)
	return ca
}

// Leaf is a certificate to issue and where its files go.
type Leaf struct {
	Name              string // the common name
	CertFile, KeyFile string // written, directories made if missing; an existing file is replaced (a rotation)
	Usage             []x509.ExtKeyUsage
	DNS               []string
	IPs               []net.IP
	URIs              []string // URI SANs, such as SPIFFE IDs
}

// Issue writes l's certificate, with the CA's next serial number, and its
// PKCS #8 key.
func (ca *CA) Issue(t testing.TB, l Leaf) {
	t.Helper()
	ca.serial++
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: l.Name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: l.Usage,
		DNSNames: l.DNS, IPAddresses: l.IPs,
	}
	for _, u := range l.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, l.CertFile, "CERTIFICATE", der)
	writePEM(t, l.KeyFile, "PRIVATE KEY", keyDER)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
