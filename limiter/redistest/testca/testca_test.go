package testca_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/limiter/redistest/testca"
)

// A leaf verifies against the CA's pool for the usage and names it was
// issued with, and against no other CA.
func TestIssuedLeafVerifiesAgainstItsCA(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, "test CA", filepath.Join(dir, "ca", "ca.crt"))
	other := testca.New(t, "other CA", filepath.Join(dir, "other.crt"))
	l := testca.Leaf{Name: "srv", CertFile: filepath.Join(dir, "leaf", "srv.crt"), KeyFile: filepath.Join(dir, "leaf", "srv.key"),
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs: []string{"spiffe://floodgate.test/srv"}}
	ca.Issue(t, l)
	pair, err := tls.LoadX509KeyPair(l.CertFile, l.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "srv" || len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://floodgate.test/srv" {
		t.Fatalf("issued %q with URIs %v", leaf.Subject.CommonName, leaf.URIs)
	}
	opts := x509.VerifyOptions{Roots: ca.Pool, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := leaf.Verify(opts); err != nil {
		t.Fatalf("the leaf does not verify against its CA: %v", err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if _, err := leaf.Verify(opts); err == nil {
		t.Error("a server certificate verified for client authentication")
	}
	opts.Roots, opts.KeyUsages = other.Pool, nil
	if _, err := leaf.Verify(opts); err == nil {
		t.Error("the leaf verified against another CA")
	}
}
