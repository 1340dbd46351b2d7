package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestServeReachesRedisWithACLAndMutualTLS: the configuration's
// credentials and TLS settings reach the connection. A Redis that accepts
// only TLS with client certificates and an ACL user decides through the
// built binary; with a wrong password, the failure mode answers instead.
func TestServeReachesRedisWithACLAndMutualTLS(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.StartWith(t, redistest.Config{
		TLS: &redistest.TLS{CA: ca, AuthClients: "yes"},
		ACL: []string{"user default off", "user floodgate on >s3cret-pass ~fg:* +@all"},
	})
	dir := t.TempDir()
	pw := filepath.Join(dir, "redis-password")
	os.WriteFile(pw, []byte("s3cret-pass\n"), 0o600)
	cfg := func(passwordFile string) string {
		return fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", admin: ""}
store:
  backend: redis
  redis:
    addresses: ["%s"]
    username: floodgate
    password_file: %s
    dial_timeout: 2s
    tls: {ca_file: %s, cert_file: %s, key_file: %s}
  on_failure: deny
policies:
  - {name: api, key: [client_ip], capacity: 2, refill_per_second: 1/60}
`, srv.Addr, passwordFile, ca.CAFile, ca.ClientCert, ca.ClientKey)
	}
	p := startFloodgate(t, cfg(pw))
	req := request(t, "/x", "203.0.113.1")
	for i, want := range []bool{true, true, false} {
		resp := p.Check(t, req)
		if isAllowed(resp) != want || hdr(resp, "x-ratelimit-degraded") != "" {
			t.Fatalf("request %d over TLS+ACL: allowed %v, degraded %q", i+1, isAllowed(resp), hdr(resp, "x-ratelimit-degraded"))
		}
	}
	wrong := filepath.Join(dir, "wrong")
	os.WriteFile(wrong, []byte("nope-nope-nope"), 0o600)
	p2 := startFloodgate(t, cfg(wrong))
	if resp := p2.Check(t, req); isAllowed(resp) || hdr(resp, "x-ratelimit-degraded") != "true" {
		t.Fatalf("with a wrong password: %v", resp)
	}
}
