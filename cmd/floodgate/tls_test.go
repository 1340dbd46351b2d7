package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate/floodgate/limiter/redistest"
)

func TestMTLSAdmitsOnlyAllowedClientsAndReloadsTheCertificate(t *testing.T) {
	ca, other := redistest.NewCA(t), redistest.NewCA(t) // other: somebody else's CA
	caFile, serverCert, serverKey := ca.CAFile, ca.ServerCert, ca.ServerKey
	envoy := "spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway"
	goodCert, goodKey := ca.Issue(t, "envoy", true, envoy)
	strangerCert, strangerKey := ca.Issue(t, "stranger", true, "spiffe://cluster.local/ns/x/sa/y")
	forgedCert, forgedKey := other.Issue(t, "envoy", true, envoy)

	p := startFloodgate(t, fmt.Sprintf(`
listen:
  grpc: "127.0.0.1:0"
  admin: ""
  tls: {cert_file: %s, key_file: %s, client_ca_file: %s, allowed_sans: ["%s"]}
policies:
  - {name: api, key: [client_ip], capacity: 5, refill_per_second: 1}
`, serverCert, serverKey, caFile, envoy))

	dial := func(certFile, keyFile string) (*tls.ConnectionState, error) {
		cfg := ca.ClientConfig(false)
		cfg.ServerName = "127.0.0.1"
		var state tls.ConnectionState
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { state = cs; return nil }
		if certFile != "" {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
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
	before, err := dial(goodCert, goodKey)
	if err != nil || len(before.PeerCertificates) == 0 {
		t.Fatalf("dial: %v", err)
	}
	first := before.PeerCertificates[0].SerialNumber
	ca.Issue(t, "server", false)
	waitFor(t, 5*time.Second, "the rotated certificate to be served", func() bool {
		st, err := dial(goodCert, goodKey)
		return err == nil && len(st.PeerCertificates) > 0 && st.PeerCertificates[0].SerialNumber.Cmp(first) != 0
	})
}
