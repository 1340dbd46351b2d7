package redisstore_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/fielderr"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// Connecting to Redis: Options' validation, Dial's choice of client and its
// settings, AUTH and ACLs, TLS, Sentinel, and the errors a misconfigured
// server causes, told with their fix.

// TestValidateReportsEveryProblemByField: all of them at once, each an
// ErrOptions naming its field, so the config loader can put each at its line.
func TestValidateReportsEveryProblemByField(t *testing.T) {
	err := redisstore.Options{
		Addresses:   []string{"127.0.0.1:0", "a:1", "a:1"},
		Username:    "app",
		DialTimeout: -time.Second,
		Prefix:      "fg{x}:",
		TLS:         &redisstore.TLSOptions{KeyFile: "k.pem"},
	}.Validate()
	var fes fielderr.List
	if !errors.As(err, &fes) || !errors.Is(err, redisstore.ErrOptions) {
		t.Fatalf("Validate = %v, want a fielderr.List wrapping ErrOptions", err)
	}
	var fields []string
	for _, fe := range fes {
		fields = append(fields, fe.Path)
	}
	want := []string{"addresses[0]", "addresses[2]", "username", "timeout", "dial_timeout", "prefix", "tls.cert_file"}
	if len(fields) != len(want) {
		t.Fatalf("fields %q, want %q\n%v", fields, want, err)
	}
	for i := range want {
		if fields[i] != want[i] {
			t.Errorf("field %d is %s, want %s", i, fields[i], want[i])
		}
	}
	if err := (redisstore.Options{Addresses: []string{"127.0.0.1:6379"}, Timeout: time.Millisecond, DialTimeout: time.Millisecond}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestDialRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := redistest.NewCA(t)
	one := []string{"127.0.0.1:6379"}
	// (The TLS files are read once the options are otherwise valid: those
	// cases give the timeouts.)
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
		{"a negative timeout", redisstore.Options{Addresses: one, Timeout: -time.Millisecond, DialTimeout: time.Second}, "timeout must be positive: it bounds each decision's Redis work, e.g. 50ms (got -1ms)"},
		{"no timeout", redisstore.Options{Addresses: one, DialTimeout: time.Second}, "timeout must be positive: it bounds each decision's Redis work, e.g. 50ms (got 0s)"},
		{"a negative dial timeout", redisstore.Options{Addresses: one, Timeout: time.Second, DialTimeout: -time.Second}, "dial timeout must be positive: it bounds opening a connection, e.g. 250ms (got -1s)"},
		{"no dial timeout", redisstore.Options{Addresses: one, Timeout: time.Second}, "dial timeout must be positive: it bounds opening a connection, e.g. 250ms (got 0s)"},
		{"a negative pool", redisstore.Options{Addresses: one, PoolSize: -1}, "pool size"},
		{"more idle than the pool", redisstore.Options{Addresses: one, PoolSize: 2, MinIdleConns: 3}, "exceed the pool size"},
		{"a prefix with a brace", redisstore.Options{Addresses: one, Prefix: "fg{x}:"}, "hash tag"},
		{"a certificate without key", redisstore.Options{Addresses: one, TLS: &redisstore.TLSOptions{CertFile: ca.ClientCert}}, "go together"},
		{"skip-verify with a CA", redisstore.Options{Addresses: one, TLS: &redisstore.TLSOptions{CAFile: ca.CAFile, InsecureSkipVerify: true}}, "insecure_skip_verify"},
		{"a missing CA file", redisstore.Options{Addresses: one, Timeout: time.Second, DialTimeout: time.Second, TLS: &redisstore.TLSOptions{CAFile: filepath.Join(dir, "nope.crt")}}, "nope.crt"},
		{"a CA file without certificates", redisstore.Options{Addresses: one, Timeout: time.Second, DialTimeout: time.Second, TLS: &redisstore.TLSOptions{CAFile: notPEM}}, notPEM + " holds no PEM certificate"},
		{"a key that is not the certificate's", redisstore.Options{Addresses: one, Timeout: time.Second, DialTimeout: time.Second, TLS: &redisstore.TLSOptions{CertFile: ca.ClientCert, KeyFile: ca.ServerKey}}, ca.ClientCert + " with key " + ca.ServerKey},
		{"a missing key file", redisstore.Options{Addresses: one, Timeout: time.Second, DialTimeout: time.Second, TLS: &redisstore.TLSOptions{CertFile: ca.ClientCert, KeyFile: filepath.Join(dir, "gone.key")}}, "gone.key"},
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
	// The timeouts are taken as given: no default replaces them.
	c := mustClient(t, redisstore.Options{Addresses: []string{"127.0.0.1:1"}, Timeout: 40 * time.Millisecond, DialTimeout: 300 * time.Millisecond, PoolSize: 7,
		TLS: &redisstore.TLSOptions{CAFile: ca.CAFile, CertFile: ca.ClientCert, KeyFile: ca.ClientKey, ServerName: "redis.internal"}})
	single, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("one address made a %T", c)
	}
	o := single.Options()
	if o.Addr != "127.0.0.1:1" || o.ReadTimeout != 40*time.Millisecond || o.WriteTimeout != 40*time.Millisecond ||
		o.PoolTimeout != 40*time.Millisecond || o.DialTimeout != 300*time.Millisecond ||
		!o.ContextTimeoutEnabled || o.MaxRetries != 0 || o.DialerRetries != 1 || o.PoolSize != 7 {
		t.Errorf("standalone options: addr %s read %v write %v pool-timeout %v dial %v ctx %v retries %d dial-retries %d pool %d",
			o.Addr, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.DialTimeout, o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries, o.PoolSize)
	}
	if tc := o.TLSConfig; tc == nil || tc.MinVersion != tls.VersionTLS12 || tc.ServerName != "redis.internal" || tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Errorf("TLS config %+v", tc)
	}

	// (The cluster client dials no node until its first command, so idle
	// connections can be asked for without dialling a closed port.)
	c = mustClient(t, redisstore.Options{Addresses: []string{"127.0.0.1:1", "127.0.0.1:2"}, Timeout: 30 * time.Millisecond, DialTimeout: time.Second, PoolSize: 9, MinIdleConns: 2})
	cluster, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("two addresses made a %T", c)
	}
	co := cluster.Options()
	if co.ReadTimeout != 30*time.Millisecond || co.PoolTimeout != 30*time.Millisecond || !co.ContextTimeoutEnabled || co.MaxRetries != -1 || co.DialerRetries != 1 || co.PoolSize != 9 || co.MinIdleConns != 2 {
		t.Errorf("cluster options: read %v pool-timeout %v ctx %v retries %d dial-retries %d pool %d idle %d", co.ReadTimeout, co.PoolTimeout, co.ContextTimeoutEnabled, co.MaxRetries, co.DialerRetries, co.PoolSize, co.MinIdleConns)
	}

	c = mustClient(t, redisstore.Options{Addresses: []string{"127.0.0.1:1"}, Cluster: true, Timeout: time.Second, DialTimeout: time.Second})
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Errorf("one address with Cluster made a %T", c)
	}

	c = mustClient(t, redisstore.Options{Addresses: []string{"127.0.0.1:1", "127.0.0.1:2"}, SentinelMaster: "m", Timeout: time.Second, DialTimeout: time.Second})
	if f, ok := c.(*redis.Client); !ok || f.Options().Addr != "FailoverClient" {
		t.Errorf("Sentinel options made a %T, want a failover *redis.Client", c)
	}
}

// TestAContextDeadlineCutsAStalledCall: with a Timeout far longer than the
// caller's deadline, a paused server still costs the caller no more than
// its deadline (ContextTimeoutEnabled).
func TestAContextDeadlineCutsAStalledCall(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: 10 * time.Second, DialTimeout: 2 * time.Second})
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

// dialStore dials o and returns a store on it; the client closes with the test.
func dialStore(t *testing.T, o redisstore.Options) *redisstore.Store {
	t.Helper()
	return redisstore.New(mustClient(t, o), o.Prefix)
}

// tryTake makes one decision with a bounded context and reports how long
// it took.
func tryTake(s *redisstore.Store, reqs ...limiter.Request) (bool, []limiter.Result, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	res := make([]limiter.Result, len(reqs))
	start := time.Now()
	ok, err := s.Take(ctx, reqs, res)
	return ok, res, time.Since(start), err
}

// requireDecides takes r (cost 1) from s until its bucket is empty: as
// many allowed decisions as its capacity, then a denial.
func requireDecides(t *testing.T, s *redisstore.Store, r limiter.Request) {
	t.Helper()
	for i := int64(0); i <= r.Limit.Capacity; i++ {
		ok, _, _, err := tryTake(s, r)
		if want := i < r.Limit.Capacity; err != nil || ok != want {
			t.Fatalf("decision %d: allowed %v, err %v; want %v", i, ok, err, want)
		}
	}
}

// requireRefused requires s to fail r with an error that mentions every
// want, and at once rather than after a wait.
func requireRefused(t *testing.T, s *redisstore.Store, r limiter.Request, want ...string) {
	t.Helper()
	_, _, took, err := tryTake(s, r)
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

func TestAuthAndACL(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Config{
		Password: "default-pw",
		ACL:      []string{"user app on >app-pw ~fg:* +@all"},
	})
	r := limiter.Request{Name: "auth", ID: "a", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}
	base := redisstore.Options{Addresses: []string{srv.Addr}, Timeout: time.Second, DialTimeout: 2 * time.Second, Prefix: "fg:"}

	decides := func(t *testing.T, o redisstore.Options) {
		t.Helper()
		r := r
		r.ID = o.Username + "-decides"
		requireDecides(t, dialStore(t, o), r)
	}
	refused := func(t *testing.T, o redisstore.Options, want string) {
		t.Helper()
		requireRefused(t, dialStore(t, o), r, want)
	}

	t.Run("the default user's password", func(t *testing.T) {
		o := base
		o.Password = "default-pw"
		decides(t, o)
	})
	t.Run("an ACL user", func(t *testing.T) {
		o := base
		o.Username, o.Password = "app", "app-pw"
		decides(t, o)
		if err := redisstore.CheckServer(context.Background(), mustClient(t, o)); err != nil {
			t.Errorf("CheckServer as the ACL user: %v", err)
		}
	})
	t.Run("the ACL user outside its key pattern", func(t *testing.T) {
		o := base
		o.Username, o.Password, o.Prefix = "app", "app-pw", "other:"
		refused(t, o, "NOPERM")
	})
	t.Run("a wrong password", func(t *testing.T) {
		o := base
		o.Password = "guess"
		refused(t, o, "WRONGPASS")
	})
	t.Run("a wrong ACL password", func(t *testing.T) {
		o := base
		o.Username, o.Password = "app", "default-pw"
		refused(t, o, "WRONGPASS")
	})
	t.Run("an unknown user", func(t *testing.T) {
		o := base
		o.Username, o.Password = "nobody", "app-pw"
		refused(t, o, "WRONGPASS")
	})
	t.Run("no password", func(t *testing.T) {
		refused(t, base, "NOAUTH")
	})
	t.Run("no password, pipelined decisions of many buckets", func(t *testing.T) {
		// A script call of more than ten parts from a connection that has
		// not authenticated gets a protocol error instead of NOAUTH; the
		// store says what it means.
		s := redisstore.NewPipelined(mustClient(t, base), "", pipelineOptions())
		defer s.Close()
		reqs := []limiter.Request{r}
		for i := 2; i <= 8; i++ { // 3 + 8 keys + 1 argument: 12 parts
			ri := r
			ri.Name = fmt.Sprint("auth", i)
			reqs = append(reqs, ri)
		}
		_, _, _, err := tryTake(s, reqs...)
		if !errors.Is(err, redisstore.ErrNoAuth) {
			t.Errorf("err = %v; want one wrapping ErrNoAuth", err)
		}
	})
}

// mustClient dials o; the client closes with the test.
func mustClient(t *testing.T, o redisstore.Options) redis.UniversalClient {
	t.Helper()
	c, err := redisstore.Dial(o)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

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
		requireDecides(t, s, r)
	}
	refused := func(t *testing.T, o redisstore.Options, want ...string) {
		t.Helper()
		requireRefused(t, dialStore(t, o), r, want...)
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

// TestSentinel: a master with a password, watched by a Sentinel with its
// own password; a store dialled through the Sentinel decides on the master.
func TestSentinel(t *testing.T) {
	master := redistest.StartWith(t, redistest.Config{Password: "master-pw"})
	sentinel := redistest.StartSentinel(t, master.Addr, "fg-master", "requirepass sentinel-pw", "sentinel auth-pass fg-master master-pw")
	o := redisstore.Options{
		Addresses:        []string{sentinel.Addr},
		SentinelMaster:   "fg-master",
		Password:         "master-pw",
		SentinelPassword: "sentinel-pw",
		Timeout:          time.Second,
		DialTimeout:      2 * time.Second,
	}
	c := mustClient(t, o)
	if err := redisstore.CheckServer(context.Background(), c); err != nil {
		t.Fatalf("CheckServer through the Sentinel: %v", err)
	}
	s := redisstore.New(c, "")
	r := limiter.Request{Name: "sentinel", ID: "a", Limit: limiter.MustLimit(3, "1/60"), Cost: 1}
	requireDecides(t, s, r)
	// The decisions landed on the master.
	if n := master.Client().Exists(context.Background(), s.Key("sentinel", "a")).Val(); n != 1 {
		t.Error("the bucket's key is not on the master the Sentinel names")
	}

	for _, tc := range []struct {
		name string
		edit func(*redisstore.Options)
		want string
	}{
		{"a wrong sentinel password", func(o *redisstore.Options) { o.SentinelPassword = "guess" }, "WRONGPASS"},
		{"no sentinel password", func(o *redisstore.Options) { o.SentinelPassword = "" }, "NOAUTH"},
		{"a master the Sentinel does not watch", func(o *redisstore.Options) { o.SentinelMaster = "other" }, "know no master by the configured name"},
		{"a wrong master password", func(o *redisstore.Options) { o.Password = "guess" }, "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := o
			tc.edit(&o)
			requireRefused(t, dialStore(t, o), r, tc.want)
		})
	}
}

// sentinelTilt is how long a Sentinel in TILT mode stays in it
// (SENTINEL_TILT_PERIOD in Redis' sentinel.c).
const sentinelTilt = 30 * time.Second

// TestSentinelFailover: a master, its replica and a Sentinel. The master
// dies; the Sentinel promotes the replica; the same store keeps deciding,
// on the new master, with the state the replica had copied.
func TestSentinelFailover(t *testing.T) {
	ctx := context.Background()
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0") // sync at once
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port))
	// Start the Sentinel once the replica is in sync, so that its first
	// INFO of the master lists the replica (the next comes 10s later).
	redistest.Eventually(t, 10*time.Second, "the replica to sync", func() error {
		info, err := master.Client().Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, fmt.Sprintf("port=%d,state=online", replica.Port)) {
			return fmt.Errorf("master replication info: %s", info)
		}
		return nil
	})
	sentinel := redistest.StartSentinel(t, master.Addr, "fg-master")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sentinel log:\n%s", sentinel.Log())
		}
	})
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr})
	defer sc.Close()
	redistest.Eventually(t, 10*time.Second, "the Sentinel to see the replica in sync", func() error {
		reps, err := sc.Replicas(ctx, "fg-master").Result()
		if err != nil {
			return err
		}
		for _, r := range reps {
			if net.JoinHostPort(r["ip"], r["port"]) == replica.Addr && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("replicas: %v", reps)
	})

	s := redisstore.New(mustClient(t, redisstore.Options{Addresses: []string{sentinel.Addr}, SentinelMaster: "fg-master", Timeout: 500 * time.Millisecond, DialTimeout: 2 * time.Second}), "")
	r := limiter.Request{Name: "failover", ID: "a", Limit: limiter.MustLimit(5, "1/3600"), Cost: 2}
	if ok, _, _, err := tryTake(s, r); err != nil || !ok {
		t.Fatalf("before the failover: %v %v", ok, err)
	}
	if n, err := master.Client().Wait(ctx, 1, 2*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d %v", n, err)
	}

	master.Kill()
	start := time.Now()
	r.Cost = 1
	var errs int
	decided := func() error {
		ok, res, _, err := tryTake(s, r)
		if err != nil {
			errs++
			return err
		}
		if !ok || res[0].Remaining != 2 {
			return fmt.Errorf("allowed %v, %+v: want the replicated bucket (3 left) paying 1", ok, res[0])
		}
		return nil
	}
	within, tilted := 15*time.Second, false
	for deadline := start.Add(within); ; time.Sleep(20 * time.Millisecond) {
		err := decided()
		if err == nil {
			break
		}
		if time.Now().Before(deadline) {
			continue
		}
		// A Sentinel whose own timer ran over 2 s late (the machine
		// stalled it) enters TILT mode and takes no action for 30 s
		// (sentinel.c, sentinelCheckTiltCondition): the failover waits
		// for it to end.
		if !tilted && strings.Contains(sentinel.Log(), "+tilt") {
			tilted, within = true, within+sentinelTilt+5*time.Second
			deadline = start.Add(within)
			t.Logf("the Sentinel entered TILT mode: waiting its %v out", sentinelTilt)
			continue
		}
		t.Fatalf("waiting for a decision on the new master: still not so after %v: %v", within, err)
	}
	t.Logf("decisions resumed %v after the master died (%d failed meanwhile)", time.Since(start), errs)
	addr, err := sc.GetMasterAddrByName(ctx, "fg-master").Result()
	if err != nil || net.JoinHostPort(addr[0], addr[1]) != replica.Addr {
		t.Errorf("the Sentinel names %v (%v) as master, want the replica %s", addr, err, replica.Addr)
	}
}

// TestPermanentErrorsAreTold: each misconfiguration is made real against a
// real redis-server, and the store's error is classified with its fix;
// outages (a dead server, a timeout) are not.
func TestPermanentErrorsAreTold(t *testing.T) {
	auth := redistest.StartWith(t, redistest.Config{
		Password: "default-pw",
		ACL:      []string{"user app on >app-pw ~fg:* +@all", "user weak on >weak-pw ~fg:* +info +ping"},
	})
	plain := redistest.Start(t)
	renamed := redistest.Start(t, "--rename-command", "EVALSHA", "", "--rename-command", "EVAL", "")
	r := limiter.Request{Name: "perm", ID: "a", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}
	base := func(addr string) redisstore.Options {
		return redisstore.Options{Addresses: []string{addr}, Timeout: time.Second, DialTimeout: time.Second, Prefix: "fg:"}
	}
	for _, tc := range []struct {
		name string
		o    func() redisstore.Options
		kind string
	}{
		{"no password", func() redisstore.Options { return base(auth.Addr) }, "noauth"},
		{"wrong password", func() redisstore.Options { o := base(auth.Addr); o.Password = "nope"; return o }, "wrongpass"},
		{"an ACL user without the script commands", func() redisstore.Options {
			o := base(auth.Addr)
			o.Username, o.Password = "weak", "weak-pw"
			return o
		}, "noperm"},
		{"two standalone addresses taken as a Cluster", func() redisstore.Options {
			o := base(plain.Addr)
			o.Addresses = []string{plain.Addr, renamed.Addr}
			return o
		}, "cluster_disabled"},
		{"scripting renamed away", func() redisstore.Options { return base(renamed.Addr) }, "unknown_command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dialStore(t, tc.o())
			_, _, _, err := tryTake(s, r)
			kind, fix, ok := redisstore.Permanent(err)
			t.Logf("%v → %s: %s", err, kind, fix)
			if !ok || kind != tc.kind || fix == "" {
				t.Errorf("Permanent(%v) = %q, %v; want kind %q", err, kind, ok, tc.kind)
			}
			// Wrapped as the resilient store wraps it, the same.
			if k, _, ok := redisstore.Permanent(fmt.Errorf("%w: %w", limiter.ErrUnavailable, err)); !ok || k != tc.kind {
				t.Errorf("wrapped: %q %v", k, ok)
			}
		})
	}
	t.Run("outages are not permanent", func(t *testing.T) {
		dead := redistest.Start(t)
		s := dialStore(t, base(dead.Addr))
		dead.Kill()
		_, _, _, err := tryTake(s, r)
		if _, _, ok := redisstore.Permanent(err); ok || err == nil {
			t.Errorf("a dead server: %v classified permanent=%v", err, ok)
		}
		paused := redistest.Start(t)
		o := base(paused.Addr)
		o.Timeout = 100 * time.Millisecond
		s = dialStore(t, o)
		paused.Pause()
		defer paused.Resume()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = s.Take(ctx, []limiter.Request{r}, make([]limiter.Result, 1))
		if _, _, ok := redisstore.Permanent(err); ok || err == nil {
			t.Errorf("a paused server: %v classified permanent=%v", err, ok)
		}
		if _, _, ok := redisstore.Permanent(syscall.ECONNREFUSED); ok {
			t.Error("ECONNREFUSED classified permanent")
		}
		if _, _, ok := redisstore.Permanent(errors.New("LOADING Redis is loading the dataset in memory")); ok {
			t.Error("LOADING classified permanent")
		}
	})
}

// InfoField reads a field of INFO's text, whose lines end in CRLF, and
// nothing of a field whose name only ends in the one asked for.
func TestInfoField(t *testing.T) {
	info := "# Memory\r\nused_memory:1024\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n"
	for name, want := range map[string]string{"maxmemory": "0", "maxmemory_policy": "noeviction", "memory": "", "redis_version": ""} {
		if got := redisstore.InfoField(info, name); got != want {
			t.Errorf("InfoField(%q) = %q, want %q", name, got, want)
		}
	}
}
