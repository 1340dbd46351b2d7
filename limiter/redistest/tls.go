package redistest

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

// CA is a throwaway certificate authority made for one test, with a server
// certificate for 127.0.0.1 and localhost and a client certificate, all
// written as PEM files in a temporary directory.
type CA struct {
	CAFile                string // the CA certificate
	ServerCert, ServerKey string // valid for 127.0.0.1, ::1 and localhost
	ClientCert, ClientKey string // for servers with tls-auth-clients yes
	pool                  *x509.CertPool
	client                tls.Certificate
}

// NewCA generates a CA, a server and a client certificate (ECDSA P-256,
// valid for a day) into a temporary directory.
func NewCA(t testing.TB) *CA {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "floodgate test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{CAFile: filepath.Join(dir, "ca.crt"), pool: x509.NewCertPool()}
	ca.pool.AddCert(caCert)
	writePEM(t, ca.CAFile, "CERTIFICATE", caDER)

	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, server bool) (certFile, keyFile string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if server {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	ca.ServerCert, ca.ServerKey = leaf(2, "server", x509.ExtKeyUsageServerAuth, true)
	ca.ClientCert, ca.ClientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth, false)
	if ca.client, err = tls.LoadX509KeyPair(ca.ClientCert, ca.ClientKey); err != nil {
		t.Fatal(err)
	}
	return ca
}

// ClientConfig returns a client TLS configuration that trusts the CA and,
// with withCert, presents the client certificate.
func (ca *CA) ClientConfig(withCert bool) *tls.Config {
	c := &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
	if withCert {
		c.Certificates = []tls.Certificate{ca.client}
	}
	return c
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
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
