package redisstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

func TestTLS(t *testing.T) {
	ca := redistest.NewCA(t)
	mutual := redistest.StartWith(t, redistest.Config{TLS: &redistest.TLS{CA: ca, AuthClients: "yes"}})
	optional := redistest.StartWith(t, redistest.Config{TLS: &redistest.TLS{CA: ca, AuthClients: "optional"}})
	r := limiter.Request{Name: "tls", ID: "a", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}
	opts := func(srv *redistest.Server, tls *redisstore.TLSOptions) redisstore.Options {
		return redisstore.Options{Addresses: []string{srv.Addr}, Timeout: time.Second, DialTimeout: 2 * time.Second, TLS: tls}
	}
	decides := func(t *testing.T, o redisstore.Options) {
		t.Helper()
		s := dialStore(t, o)
		if err := redisstore.CheckServer(t.Context(), mustClient(t, o)); err != nil {
			t.Fatalf("CheckServer: %v", err)
		}
		for i, want := range []bool{true, true, false} {
			ok, _, _, err := tryTake(s, r)
			if err != nil || ok != want {
				t.Fatalf("decision %d: allowed %v, err %v; want %v", i, ok, err, want)
			}
		}
	}
	refused := func(t *testing.T, o redisstore.Options, want ...string) {
		t.Helper()
		_, _, took, err := tryTake(dialStore(t, o), r)
		t.Logf("refused after %v: %v", took, err)
		if err == nil {
			t.Fatal("no error")
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
		if took > 2*time.Second {
			t.Errorf("refused after %v: want an answer, not a wait", took)
		}
	}

	t.Run("with the CA and a client certificate", func(t *testing.T) {
		decides(t, opts(mutual, &redisstore.TLSOptions{CAFile: ca.CAFile, CertFile: ca.ClientCert, KeyFile: ca.ClientKey}))
	})
	t.Run("with the CA, where a client certificate is optional", func(t *testing.T) {
		decides(t, opts(optional, &redisstore.TLSOptions{CAFile: ca.CAFile, ServerName: "localhost"}))
	})
	t.Run("without a client certificate where one is required", func(t *testing.T) {
		refused(t, opts(mutual, &redisstore.TLSOptions{CAFile: ca.CAFile}), "certificate")
	})
	t.Run("without the CA", func(t *testing.T) {
		refused(t, opts(optional, &redisstore.TLSOptions{}), "failed to verify certificate")
	})
	t.Run("a server name the certificate does not carry", func(t *testing.T) {
		refused(t, opts(optional, &redisstore.TLSOptions{CAFile: ca.CAFile, ServerName: "redis.example"}), "failed to verify certificate", "redis.example")
	})
	t.Run("plain TCP to a TLS port", func(t *testing.T) {
		refused(t, opts(optional, nil))
	})
}
