package redisstore_test

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

func TestDialRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := redistest.NewCA(t)
	one := []string{"127.0.0.1:6379"}
	for _, tc := range []struct {
		name string
		o    redisstore.Options
		want string // in the error
	}{
		{"no address", redisstore.Options{}, "no address"},
		{"sentinel without addresses", redisstore.Options{SentinelMaster: "mymaster"}, `sentinel master "mymaster" is set but no Sentinel address`},
		{"an address without a port", redisstore.Options{Addresses: []string{"redis"}}, `address "redis": want host:port`},
		{"an empty host", redisstore.Options{Addresses: []string{":6379"}}, "the host is empty"},
		{"a port out of range", redisstore.Options{Addresses: []string{"redis:70000"}}, `port "70000"`},
		{"a port that is a name", redisstore.Options{Addresses: []string{"redis:redis"}}, `port "redis"`},
		{"one address twice", redisstore.Options{Addresses: []string{"a:1", "b:1", "a:1"}}, `"a:1" is listed twice`},
		{"sentinel and cluster", redisstore.Options{Addresses: one, SentinelMaster: "m", Cluster: true}, "choose one"},
		{"a master name with spaces", redisstore.Options{Addresses: one, SentinelMaster: " m"}, "surrounding spaces"},
		{"a sentinel password without sentinel", redisstore.Options{Addresses: one, SentinelPassword: "x"}, "no sentinel master"},
		{"a username without password", redisstore.Options{Addresses: one, Username: "app"}, `username "app" has no password`},
		{"a negative timeout", redisstore.Options{Addresses: one, Timeout: -time.Millisecond}, "timeout must not be negative"},
		{"a negative dial timeout", redisstore.Options{Addresses: one, DialTimeout: -time.Second}, "dial timeout must not be negative"},
		{"a negative pool", redisstore.Options{Addresses: one, PoolSize: -1}, "pool size"},
		{"more idle than the pool", redisstore.Options{Addresses: one, PoolSize: 2, MinIdleConns: 3}, "exceed the pool size"},
		{"a prefix with a brace", redisstore.Options{Addresses: one, Prefix: "fg{x}:"}, "hash tag"},
		{"a certificate without key", redisstore.Options{Addresses: one, TLS: &redisstore.TLSOptions{CertFile: ca.ClientCert}}, "go together"},
		{"skip-verify with a CA", redisstore.Options{Addresses: one, TLS: &redisstore.TLSOptions{CAFile: ca.CAFile, InsecureSkipVerify: true}}, "insecure_skip_verify"},
		{"a missing CA file", redisstore.Options{Addresses: one, TLS: &redisstore.TLSOptions{CAFile: filepath.Join(dir, "nope.crt")}}, "nope.crt"},
		{"a CA file without certificates", redisstore.Options{Addresses: one, TLS: &redisstore.TLSOptions{CAFile: notPEM}}, notPEM + " holds no PEM certificate"},
		{"a key that is not the certificate's", redisstore.Options{Addresses: one, TLS: &redisstore.TLSOptions{CertFile: ca.ClientCert, KeyFile: ca.ServerKey}}, ca.ClientCert + " with key " + ca.ServerKey},
		{"a missing key file", redisstore.Options{Addresses: one, TLS: &redisstore.TLSOptions{CertFile: ca.ClientCert, KeyFile: filepath.Join(dir, "gone.key")}}, "gone.key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisstore.Dial(tc.o)
			if err == nil {
				c.Close()
				t.Fatalf("Dial(%+v) succeeded", tc.o)
			}
			if !errors.Is(err, redisstore.ErrOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q; want one wrapping ErrOptions and containing %q", err, tc.want)
			}
		})
	}
}

func TestDialChoosesTheClientAndItsSettings(t *testing.T) {
	ca := redistest.NewCA(t)
	c, err := redisstore.Dial(redisstore.Options{Addresses: []string{"127.0.0.1:1"}, PoolSize: 7,
		TLS: &redisstore.TLSOptions{CAFile: ca.CAFile, CertFile: ca.ClientCert, KeyFile: ca.ClientKey, ServerName: "redis.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	single, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("one address made a %T", c)
	}
	o := single.Options()
	if o.Addr != "127.0.0.1:1" || o.ReadTimeout != redisstore.DefaultTimeout || o.WriteTimeout != redisstore.DefaultTimeout ||
		o.PoolTimeout != redisstore.DefaultTimeout || o.DialTimeout != redisstore.DefaultDialTimeout ||
		!o.ContextTimeoutEnabled || o.MaxRetries != 0 || o.DialerRetries != 1 || o.PoolSize != 7 {
		t.Errorf("standalone options: addr %s read %v write %v pool-timeout %v dial %v ctx %v retries %d dial-retries %d pool %d",
			o.Addr, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.DialTimeout, o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries, o.PoolSize)
	}
	if tc := o.TLSConfig; tc == nil || tc.MinVersion != tls.VersionTLS12 || tc.ServerName != "redis.internal" || tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Errorf("TLS config %+v", tc)
	}

	// (The cluster client dials no node until its first command, so idle
	// connections can be asked for without dialling a closed port.)
	c, err = redisstore.Dial(redisstore.Options{Addresses: []string{"127.0.0.1:1", "127.0.0.1:2"}, Timeout: 30 * time.Millisecond, PoolSize: 9, MinIdleConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cluster, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("two addresses made a %T", c)
	}
	co := cluster.Options()
	if co.ReadTimeout != 30*time.Millisecond || co.PoolTimeout != 30*time.Millisecond || !co.ContextTimeoutEnabled || co.MaxRetries != -1 || co.DialerRetries != 1 || co.PoolSize != 9 || co.MinIdleConns != 2 {
		t.Errorf("cluster options: read %v pool-timeout %v ctx %v retries %d dial-retries %d pool %d idle %d", co.ReadTimeout, co.PoolTimeout, co.ContextTimeoutEnabled, co.MaxRetries, co.DialerRetries, co.PoolSize, co.MinIdleConns)
	}

	c, err = redisstore.Dial(redisstore.Options{Addresses: []string{"127.0.0.1:1"}, Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Errorf("one address with Cluster made a %T", c)
	}

	c, err = redisstore.Dial(redisstore.Options{Addresses: []string{"127.0.0.1:1", "127.0.0.1:2"}, SentinelMaster: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if f, ok := c.(*redis.Client); !ok || f.Options().Addr != "FailoverClient" {
		t.Errorf("Sentinel options made a %T, want a failover *redis.Client", c)
	}
}

// TestAContextDeadlineCutsAStalledCall: with a Timeout far longer than the
// caller's deadline, a paused server still costs the caller no more than
// its deadline (ContextTimeoutEnabled).
func TestAContextDeadlineCutsAStalledCall(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := redisstore.New(c, "")
	r := limiter.Request{Name: "stall", ID: "a", Limit: limiter.MustLimit(5, "1"), Cost: 1}
	take(t, s, r) // a pooled connection, the script loaded
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Take(ctx, []limiter.Request{r}, make([]limiter.Result, 1))
	if took := time.Since(start); err == nil || took > time.Second {
		t.Fatalf("Take on a paused server: err %v after %v; want an error near the 100ms deadline", err, took)
	}
}

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withNewline := file("pw", "s3cret\n")
	crlf := file("pw-crlf", "s3cret\r\n")
	empty := file("empty", "\n")
	t.Setenv("FG_TEST_SECRET", "from-env")
	t.Setenv("FG_TEST_EMPTY", "")
	for _, tc := range []struct {
		file, env string
		want      string
		err       string
	}{
		{"", "", "", ""},
		{withNewline, "", "s3cret", ""},
		{crlf, "", "s3cret", ""},
		{"", "FG_TEST_SECRET", "from-env", ""},
		{empty, "", "", empty + " is empty"},
		{filepath.Join(dir, "missing"), "", "", "missing"},
		{"", "FG_TEST_UNSET_VARIABLE", "", "FG_TEST_UNSET_VARIABLE is not set"},
		{"", "FG_TEST_EMPTY", "", "FG_TEST_EMPTY is empty"},
		{withNewline, "FG_TEST_SECRET", "", "give one"},
	} {
		got, err := redisstore.ReadSecret(tc.file, tc.env)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("ReadSecret(%q, %q) = %q, %v; want %q", tc.file, tc.env, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ReadSecret(%q, %q) = %q, %v; want an error containing %q", tc.file, tc.env, got, err, tc.err)
		}
	}
}
