package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/limiter/redistest/testca"
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

	dir string
	ca  *testca.CA
}

// NewCA generates a CA, a server and a client certificate (ECDSA P-256,
// valid for a day) into a temporary directory.
func NewCA(t testing.TB) *CA {
	t.Helper()
	dir := t.TempDir()
	ca := &CA{dir: dir, ca: testca.New(t, "floodgate test CA", filepath.Join(dir, "ca.crt"))}
	ca.CAFile, ca.pool = ca.ca.File, ca.ca.Pool
	ca.ServerCert, ca.ServerKey = ca.Issue(t, "server", false)
	ca.ClientCert, ca.ClientKey = ca.Issue(t, "client", true)
	var err error
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
	l := testca.Leaf{Name: name, CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key")}
	if client {
		l.Usage, l.URIs = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, uris
	} else {
		l.Usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		l.DNS, l.IPs = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	ca.ca.Issue(t, l)
	return l.CertFile, l.KeyFile
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
