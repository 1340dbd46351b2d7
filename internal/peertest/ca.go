package peertest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/limiter/redistest/testca"
)

// CA is a certificate authority made for one test, writing PEM files into
// a temporary directory.
type CA struct {
	File string // the CA certificate
	Pool *x509.CertPool

	t   testing.TB
	dir string
	ca  *testca.CA
}

// NewCA makes a CA valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	dir := t.TempDir()
	ca := testca.New(t, name, filepath.Join(dir, name+"-ca.crt"))
	return &CA{File: ca.File, Pool: ca.Pool, t: t, dir: dir, ca: ca}
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
	c := Cert{CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key")}
	ca.ca.Issue(ca.t, testca.Leaf{
		Name: name, CertFile: c.CertFile, KeyFile: c.KeyFile,
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNS:   dns, IPs: ips,
	})
	var err error
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
