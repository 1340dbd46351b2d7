package peertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test, writing PEM files into
// a temporary directory.
type CA struct {
	File string // the CA certificate
	Pool *x509.CertPool

	t      testing.TB
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

// NewCA makes a CA valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca := &CA{t: t, dir: t.TempDir(), key: newKey(t), Pool: x509.NewCertPool(), serial: 1}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.Pool.AddCert(ca.cert)
	ca.File = filepath.Join(ca.dir, name+"-ca.crt")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Cert is an issued certificate's files and the pair, loaded.
type Cert struct {
	CertFile, KeyFile string
	Pair              tls.Certificate
}

// Issue writes a certificate named name for both server and client
// authentication (as the one Envoy Gateway's rate limit Deployment uses for
// its own gRPC listener and for its xDS client), valid for dns and ips.
func (ca *CA) Issue(name string, dns []string, ips ...net.IP) Cert {
	ca.t.Helper()
	ca.serial++
	key := newKey(ca.t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	c := Cert{CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key")}
	writePEM(ca.t, c.CertFile, "CERTIFICATE", der)
	writePEM(ca.t, c.KeyFile, "PRIVATE KEY", keyDER)
	if c.Pair, err = tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		ca.t.Fatal(err)
	}
	return c
}

// ServerTLS is a server configuration presenting c and requiring a client
// certificate this CA issued.
func (ca *CA) ServerTLS(c Cert) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{c.Pair}, ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
