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
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a throwaway certificate authority made for one test, with a server
// certificate for 127.0.0.1 and localhost and a client certificate, all
// written as PEM files in a temporary directory. Issue makes more.
type CA struct {
	CAFile                string // the CA certificate
	ServerCert, ServerKey string // valid for 127.0.0.1, ::1 and localhost
	ClientCert, ClientKey string // for servers with tls-auth-clients yes
	pool                  *x509.CertPool
	client                tls.Certificate

	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

// NewCA generates a CA, a server and a client certificate (ECDSA P-256,
// valid for a day) into a temporary directory.
func NewCA(t testing.TB) *CA {
	t.Helper()
	now := time.Now()
	ca := &CA{dir: t.TempDir(), key: newKey(t), pool: x509.NewCertPool(), serial: 1}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "floodgate test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.pool.AddCert(ca.cert)
	ca.CAFile = filepath.Join(ca.dir, "ca.crt")
	writePEM(t, ca.CAFile, "CERTIFICATE", der)
	ca.ServerCert, ca.ServerKey = ca.Issue(t, "server", false)
	ca.ClientCert, ca.ClientKey = ca.Issue(t, "client", true)
	if ca.client, err = tls.LoadX509KeyPair(ca.ClientCert, ca.ClientKey); err != nil {
		t.Fatal(err)
	}
	return ca
}

// Issue writes a new certificate and key named name (the common name and
// the files' base name, so issuing a name again replaces its files: a
// rotation). A server certificate is valid for 127.0.0.1, ::1 and
// localhost; a client certificate carries uris as URI SANs (SPIFFE IDs).
// Each has a new serial number.
func (ca *CA) Issue(t testing.TB, name string, client bool, uris ...string) (certFile, keyFile string) {
	t.Helper()
	ca.serial++
	now := time.Now()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		for _, u := range uris {
			pu, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.URIs = append(tmpl.URIs, pu)
		}
	} else {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
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
