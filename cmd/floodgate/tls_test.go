package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testCA issues certificates for tests, generated at test time.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

var serial int64 = 100

// issue writes a leaf certificate and key for cn with the given SANs to
// dir/name.crt and dir/name.key.
func (ca *testCA) issue(t *testing.T, dir, name, cn string, uris []string, client bool) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, u := range uris {
		pu, _ := url.Parse(u)
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

func TestMTLSAdmitsOnlyAllowedClientsAndReloadsTheCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, other := newTestCA(t, "floodgate test CA"), newTestCA(t, "somebody else's CA")
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.pem, 0o600)
	serverCert, serverKey := ca.issue(t, dir, "server", "floodgate-1", nil, false)
	envoy := "spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway"
	goodCert, goodKey := ca.issue(t, dir, "envoy", "envoy", []string{envoy}, true)
	strangerCert, strangerKey := ca.issue(t, dir, "stranger", "stranger", []string{"spiffe://cluster.local/ns/x/sa/y"}, true)
	forgedCert, forgedKey := other.issue(t, dir, "forged", "envoy", []string{envoy}, true)

	p := startFloodgate(t, fmt.Sprintf(`
listen:
  grpc: "127.0.0.1:0"
  admin: ""
  tls: {cert_file: %s, key_file: %s, client_ca_file: %s, allowed_sans: ["%s"]}
policies:
  - {name: api, key: [client_ip], capacity: 5, refill_per_second: 1}
`, serverCert, serverKey, caFile, envoy))

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	dial := func(certFile, keyFile string) (*tls.ConnectionState, error) {
		cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
		var state tls.ConnectionState
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { state = cs; return nil }
		if certFile != "" {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = authv3.NewAuthorizationClient(conn).Check(ctx, request(t, "/x", "203.0.113.1"))
		return &state, err
	}
	if _, err := dial(goodCert, goodKey); err != nil {
		t.Fatalf("the allowed client was refused: %v", err)
	}
	for name, files := range map[string][2]string{
		"no client certificate":               {"", ""},
		"a certificate from another CA":       {forgedCert, forgedKey},
		"a valid certificate not on the list": {strangerCert, strangerKey},
	} {
		if _, err := dial(files[0], files[1]); err == nil {
			t.Errorf("%s: served", name)
		}
	}

	// Rotate the server certificate in place: new connections get the new one.
	before, _ := dial(goodCert, goodKey)
	ca.issue(t, dir, "server", "floodgate-2", nil, false)
	waitFor(t, 5*time.Second, "the rotated certificate to be served", func() bool {
		st, err := dial(goodCert, goodKey)
		return err == nil && len(st.PeerCertificates) > 0 && st.PeerCertificates[0].Subject.CommonName == "floodgate-2"
	})
	if before.PeerCertificates[0].Subject.CommonName != "floodgate-1" {
		t.Errorf("first certificate %q", before.PeerCertificates[0].Subject.CommonName)
	}
}
