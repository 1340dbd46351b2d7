// Package config loads and validates Floodgate's YAML configuration. Every
// problem is reported as FILE:LINE: what is wrong, all of them at once, so
// `floodgate validate` fixes a file in one pass.
package config

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/limiter/redisstore"
)

// Config is the whole configuration file. The key names are fixed by the
// product design; the schema may grow around them.
type Config struct {
	Listen   Listen                `yaml:"listen"`
	Store    Store                 `yaml:"store"`
	ClientIP extauthz.ClientIPSpec `yaml:"client_ip"`
	// Headers lists the RateLimit header families: legacy, structured.
	Headers  []string              `yaml:"headers"`
	Identity Identity              `yaml:"identity"`
	Log      Log                   `yaml:"log"`
	Reload   Reload                `yaml:"reload"`
	Runtime  Runtime               `yaml:"runtime"`
	Policies []extauthz.PolicySpec `yaml:"policies"`

	// Engine is the compiled policies, set by Load.
	Engine *extauthz.Engine `yaml:"-"`
	// Source names where the configuration came from (a path, or "embedded default").
	Source string `yaml:"-"`
	// Digest is the SHA-256 (hex) of the bytes it was parsed from: a reload
	// compares it with the file's content now.
	Digest string `yaml:"-"`
}

// Listen is where the servers listen, and the gRPC server's limits.
type Listen struct {
	GRPC  string `yaml:"grpc"`  // ext_authz Check and grpc.health.v1
	Admin string `yaml:"admin"` // HTTP /metrics, /healthz, /readyz; "" disables

	// TLS, when set, serves gRPC over TLS; with client_ca_file, mTLS.
	TLS *ListenTLS `yaml:"tls"`
	// MaxRequestBytes bounds one CheckRequest (default 32 MiB): a request
	// larger than this is refused by gRPC before any work is done, and
	// Envoy takes that refusal for an outage (failure_mode_allow lets the
	// request through). The default exceeds the largest request Envoy can
	// send without a body (max_request_headers_kb at its maximum, 8192 KiB,
	// whose :path and :authority Envoy repeats as fields: about 16 MiB) with
	// 15 MiB to spare for with_request_body; see the README to size it.
	MaxRequestBytes int `yaml:"max_request_bytes"`
	// MaxConcurrentStreams bounds Checks in flight per connection (default 1024).
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// KeepaliveMinTime: clients pinging more often are disconnected (default 10s).
	KeepaliveMinTime Duration `yaml:"keepalive_min_time"`
	// DrainDelay is how long, after SIGTERM, Floodgate keeps answering while
	// reporting NOT_SERVING, so Envoy's health checks move traffic away
	// before the listener closes: at least the health check's interval ×
	// unhealthy_threshold + timeout. Default 0: that value belongs to the
	// Envoy configuration, which Floodgate cannot see (the README says why;
	// every shipped config beside an Envoy one sets it).
	DrainDelay Duration `yaml:"drain_delay"`
	// Decoder reads CheckRequests and writes CheckResponses: fast (default;
	// extauthz/decode.go and encode.go, which hand anything unusual to
	// protobuf-go) or protobuf (protobuf-go for every message: the way back
	// should the fast ones ever misread or miswrite one).
	Decoder string `yaml:"decoder"`
}

// ListenTLS is the gRPC listener's certificate and, for mTLS, the clients'
// CA and an optional allow-list of client identities (URI or DNS SANs, such
// as Envoy's SPIFFE ID in Istio). Files are re-read when they change, so a
// rotated certificate is served without a restart.
type ListenTLS struct {
	CertFile     string   `yaml:"cert_file"`
	KeyFile      string   `yaml:"key_file"`
	ClientCAFile string   `yaml:"client_ca_file"`
	AllowedSANs  []string `yaml:"allowed_sans"`
}

// Reload configures how a running server notices a changed file. SIGHUP
// always reloads.
type Reload struct {
	// Watch polls the configuration file (following symlinks, so a
	// Kubernetes ConfigMap's ..data swap is seen) every Interval. Default on.
	Watch    *bool    `yaml:"watch"`
	Interval Duration `yaml:"interval"` // default 2s
}

// Store chooses and tunes the bucket store.
type Store struct {
	Backend string `yaml:"backend"` // redis | memory
	Redis   Redis  `yaml:"redis"`
	Memory  Memory `yaml:"memory"`
	// OnFailure is what decides while Redis cannot: allow (fail open,
	// marked x-ratelimit-degraded), deny (429, short Retry-After) or local
	// (per-replica in-memory buckets, each given LocalShare of every limit).
	OnFailure  string   `yaml:"on_failure"`
	LocalShare *float64 `yaml:"local_share"` // (0, 1], default 1
	// FailureRetryAfter is the Retry-After of on_failure: deny (default 1s).
	FailureRetryAfter Duration       `yaml:"failure_retry_after"`
	Breaker           Breaker        `yaml:"breaker"`
	OverLimitCache    OverLimitCache `yaml:"over_limit_cache"`
}

// Breaker tunes the circuit breaker on Redis.
type Breaker struct {
	Failures int      `yaml:"failures"` // consecutive failures that open it (default 5)
	OpenFor  Duration `yaml:"open_for"` // before a probe (default 500ms)
}

// OverLimitCache tunes the cache that denies, without a Redis call, requests
// that cannot pass before their Retry-After.
type OverLimitCache struct {
	MaxEntries *int `yaml:"max_entries"` // default 100000; 0 turns it off
}

// Redis is the Redis connection.
type Redis struct {
	Addresses      []string `yaml:"addresses"`       // one: standalone; several: Redis Cluster (or Sentinels)
	Cluster        bool     `yaml:"cluster"`         // one address that is a Cluster seed (a managed cluster's endpoint)
	SentinelMaster string   `yaml:"sentinel_master"` // use Sentinel: the master's name
	Timeout        Duration `yaml:"timeout"`         // per decision (default 50ms)
	Prefix         string   `yaml:"prefix"`          // key prefix (default fg:)

	Username             string `yaml:"username"`
	PasswordFile         string `yaml:"password_file"`
	PasswordEnv          string `yaml:"password_env"`
	SentinelPasswordFile string `yaml:"sentinel_password_file"`
	SentinelPasswordEnv  string `yaml:"sentinel_password_env"`

	TLS *RedisTLS `yaml:"tls"`

	PoolSize     int      `yaml:"pool_size"`      // per node (default 10 × CPUs)
	MinIdleConns int      `yaml:"min_idle_conns"` // kept warm (default 0)
	DialTimeout  Duration `yaml:"dial_timeout"`   // default 250ms

	// Pipeline sends decisions that are in flight at the same time to Redis
	// together, as one pipeline per round trip: still one script call per
	// decision, far fewer system calls on both sides (default true).
	// PipelineMaxBatch bounds the decisions in one pipeline (default 128).
	// PipelineFlushers is how many pipelines may be on the wire at once
	// (default 1: the deepest batches, best when Redis shares cores with
	// its clients; 2 or more for a Redis far away, with cores of its own).
	Pipeline         *bool `yaml:"pipeline"`
	PipelineMaxBatch int   `yaml:"pipeline_max_batch"`
	PipelineFlushers int   `yaml:"pipeline_flushers"`
}

// RedisTLS enables TLS to Redis.
type RedisTLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// Memory tunes the in-memory store.
type Memory struct {
	MaxBuckets int `yaml:"max_buckets"` // default 1048576
}

// Identity keys the hash that turns identities (API keys, IPs) into bucket
// keys. Give every replica the same secret.
type Identity struct {
	HashSecretFile string `yaml:"hash_secret_file"`
	HashSecretEnv  string `yaml:"hash_secret_env"`
}

// Runtime tunes Go's garbage collector, at start (a reload does not change
// it). Floodgate's live heap is small and every Check allocates afresh, so
// collecting less often saves CPU on every decision for a few tens of MB.
type Runtime struct {
	// GOGC is the collector's target heap growth in percent (default
	// DefaultGOGC). The GOGC environment variable, when set, wins.
	GOGC *int `yaml:"gogc"`
	// MemoryLimitRatio sets Go's soft memory limit to this fraction of the
	// container's memory limit (its cgroup's), so the larger heap GOGC
	// allows yields to the limit instead of meeting the OOM killer (default
	// DefaultMemoryLimitRatio; 0 sets none). The GOMEMLIMIT environment
	// variable, when set, wins; without a cgroup limit none is set.
	MemoryLimitRatio *float64 `yaml:"memory_limit_ratio"`
}

// Runtime defaults: `make bench` measured about a fifth less CPU per decision
// at GOGC 400 than at Go's 100, for peak RSS of about 42 MB instead of 31.
const (
	DefaultGOGC             = 400
	DefaultMemoryLimitRatio = 0.9
)

// Log chooses the log output.
type Log struct {
	Format string `yaml:"format"` // json (default) | console
	Level  string `yaml:"level"`  // debug | info (default) | warn | error
}

// Duration is a YAML duration such as 50ms or 1.5s.
type Duration struct {
	time.Duration
	set bool
}

// UnmarshalYAML reads a Go duration string. An invalid one is left unset;
// the validator reports it with its path.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if v, err := time.ParseDuration(strings.TrimSpace(n.Value)); err == nil && n.Kind == yaml.ScalarNode {
		d.Duration, d.set = v, true
	}
	return nil
}

// IsSet reports whether the file gave a value.
func (d Duration) IsSet() bool { return d.set }

// Defaults.
const (
	DefaultGRPC         = "127.0.0.1:9191"
	DefaultAdmin        = "127.0.0.1:9192"
	DefaultRedisTimeout = 50 * time.Millisecond
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML is the embedded default configuration: in-memory store, one
// sample policy, loopback only.
func DefaultYAML() []byte { return append([]byte(nil), defaultYAML...) }

// Default returns the embedded default configuration, loaded.
func Default() *Config {
	c, err := Parse("embedded default", defaultYAML)
	if err != nil {
		panic("the embedded default configuration is invalid: " + err.Error())
	}
	return c
}

// Load reads, validates and compiles the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(path, data)
}

// Problem is one thing wrong with a configuration.
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
	}
	return p.File + ": " + p.Msg
}

// Problems is every problem found, in file order. It is the error Parse and
// Load return for an invalid file.
type Problems []Problem

func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "\n")
}

// Parse validates and compiles a configuration read from file (the name is
// used in messages only).
func Parse(file string, data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Problems{yamlProblem(file, err.Error())}
	}
	sum := sha256.Sum256(data)
	c := &Config{Source: file, Digest: hex.EncodeToString(sum[:])}
	v := &validator{file: file, lines: map[string]int{}}
	if len(doc.Content) == 0 {
		v.problem(0, "is empty: a configuration needs at least policies")
		return nil, v.problems
	}
	root := doc.Content[0]
	v.walk(root, reflect.TypeOf(c), "")
	if err := root.Decode(c); err != nil {
		if te, ok := err.(*yaml.TypeError); ok {
			for _, e := range te.Errors {
				v.problems = append(v.problems, yamlProblem(file, e))
			}
		} else {
			v.problems = append(v.problems, yamlProblem(file, err.Error()))
		}
	}
	v.check(c)
	if len(v.problems) > 0 {
		sort.SliceStable(v.problems, func(i, j int) bool { return v.problems[i].Line < v.problems[j].Line })
		return nil, v.problems
	}
	return c, nil
}

// yamlProblem turns yaml.v3's "line N: msg" (or "yaml: line N: msg") into a Problem.
func yamlProblem(file, msg string) Problem {
	msg = strings.TrimPrefix(msg, "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				return Problem{File: file, Line: n, Msg: text}
			}
		}
	}
	return Problem{File: file, Msg: msg}
}

// check validates what the YAML types cannot, and compiles the policies.
func (v *validator) check(c *Config) {
	if c.Listen.GRPC == "" {
		c.Listen.GRPC = DefaultGRPC
	} else if err := checkHostPort(c.Listen.GRPC); err != nil {
		v.at("listen.grpc", "%v", err)
	}
	if c.Listen.Admin != "" {
		if err := checkHostPort(c.Listen.Admin); err != nil {
			v.at("listen.admin", "%v", err)
		}
	}
	v.checkListen(&c.Listen)
	if !c.Reload.Interval.IsSet() {
		c.Reload.Interval.Duration = 2 * time.Second
	} else if d := c.Reload.Interval.Duration; d < 100*time.Millisecond || d > time.Hour {
		v.at("reload.interval", "must be between 100ms and 1h (got %v)", d)
	}
	if c.Reload.Watch == nil {
		on := true
		c.Reload.Watch = &on
	}
	switch c.Store.Backend {
	case "":
		c.Store.Backend = "memory"
	case "memory":
	case "redis":
		if len(c.Store.Redis.Addresses) == 0 {
			v.at("store.redis.addresses", "must list at least one host:port when store.backend is redis")
		}
		for i, a := range c.Store.Redis.Addresses {
			if err := checkHostPort(a); err != nil {
				v.at(fmt.Sprintf("store.redis.addresses[%d]", i), "%v", err)
			}
		}
	default:
		v.at("store.backend", "must be redis or memory (got %q)", c.Store.Backend)
	}
	switch c.Store.OnFailure {
	case "":
		c.Store.OnFailure = "allow"
	case "allow", "deny", "local":
	default:
		v.at("store.on_failure", "must be allow, deny or local (got %q)", c.Store.OnFailure)
	}
	if s := c.Store.LocalShare; s != nil && (!(*s > 0) || *s > 1) {
		v.at("store.local_share", "must be a fraction in (0, 1], e.g. 0.5 for two replicas (got %v)", *s)
	}
	if c.Store.LocalShare != nil && c.Store.OnFailure != "local" {
		v.at("store.local_share", "only applies with on_failure: local")
	}
	if !c.Store.FailureRetryAfter.IsSet() {
		c.Store.FailureRetryAfter.Duration = time.Second
	} else if d := c.Store.FailureRetryAfter.Duration; d < time.Second || d > time.Hour {
		v.at("store.failure_retry_after", "must be between 1s and 1h (got %v)", d)
	}
	if c.Store.Breaker.Failures < 0 {
		v.at("store.breaker.failures", "must be >= 1 (got %d)", c.Store.Breaker.Failures)
	}
	if d := c.Store.Breaker.OpenFor; d.IsSet() && (d.Duration < time.Millisecond || d.Duration > time.Minute) {
		v.at("store.breaker.open_for", "must be between 1ms and 1m (got %v)", d.Duration)
	}
	if m := c.Store.OverLimitCache.MaxEntries; m != nil && *m < 0 {
		v.at("store.over_limit_cache.max_entries", "must be >= 0 (got %d)", *m)
	}
	v.checkRedis(&c.Store.Redis, c.Store.Backend == "redis")
	if c.Store.Memory.MaxBuckets < 0 {
		v.at("store.memory.max_buckets", "must be > 0 (got %d)", c.Store.Memory.MaxBuckets)
	}
	switch c.Log.Format {
	case "", "json", "console":
	default:
		v.at("log.format", "must be json or console (got %q)", c.Log.Format)
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		v.at("log.level", "must be debug, info, warn or error (got %q)", c.Log.Level)
	}
	if g := c.Runtime.GOGC; g == nil {
		d := DefaultGOGC
		c.Runtime.GOGC = &d
	} else if *g < 10 || *g > 10000 {
		v.at("runtime.gogc", "must be between 10 and 10000 percent (got %d; set GOGC=off in the environment to turn the collector off)", *g)
	}
	if r := c.Runtime.MemoryLimitRatio; r == nil {
		d := DefaultMemoryLimitRatio
		c.Runtime.MemoryLimitRatio = &d
	} else if !(*r >= 0 && *r <= 1) {
		v.at("runtime.memory_limit_ratio", "must be a fraction in [0, 1], e.g. 0.9; 0 sets no limit (got %v)", *r)
	}
	secret, err := c.Identity.secret()
	if err != nil {
		v.at("identity", "%v", err)
	}
	if len(c.Policies) == 0 {
		v.at("policies", "must list at least one policy")
	}
	eng, err := extauthz.Compile(c.Policies, extauthz.Options{ClientIP: c.ClientIP, Headers: c.Headers, HashSecret: secret})
	if errs, ok := err.(extauthz.Errors); ok {
		for _, e := range errs {
			v.at(e.Path, "%s", e.Msg)
		}
	} else if err != nil {
		v.at("policies", "%v", err)
	}
	c.Engine = eng
}

// secret reads the identity hash secret from its file or environment
// variable; it must be long enough to resist guessing.
func (id Identity) secret() ([]byte, error) {
	var s string
	switch {
	case id.HashSecretFile != "" && id.HashSecretEnv != "":
		return nil, fmt.Errorf("set hash_secret_file or hash_secret_env, not both")
	case id.HashSecretFile != "":
		b, err := os.ReadFile(id.HashSecretFile)
		if err != nil {
			return nil, fmt.Errorf("hash_secret_file: %v", err)
		}
		s = string(b)
	case id.HashSecretEnv != "":
		v, ok := os.LookupEnv(id.HashSecretEnv)
		if !ok {
			return nil, fmt.Errorf("hash_secret_env: environment variable %s is not set", id.HashSecretEnv)
		}
		s = v
	default:
		return nil, nil
	}
	if s = strings.TrimSpace(s); len(s) < 16 {
		return nil, fmt.Errorf("the hash secret holds %d characters; use at least 16", len(s))
	}
	return []byte(s), nil
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port (got %q)", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("has an invalid port in %q", s)
	}
	if host == "" {
		return fmt.Errorf("must name a host or address, as in 127.0.0.1:9191 (got %q)", s)
	}
	return nil
}

// checkRedis validates store.redis (credentials and TLS files only when the
// backend is redis: an unused block is not read).
func (v *validator) checkRedis(r *Redis, used bool) {
	if !r.Timeout.IsSet() {
		r.Timeout.Duration = DefaultRedisTimeout
	} else if t := r.Timeout.Duration; t < time.Millisecond || t > 10*time.Second {
		v.at("store.redis.timeout", "must be between 1ms and 10s, and well under Envoy's ext_authz timeout (got %v)", t)
	}
	if d := r.DialTimeout; d.IsSet() && (d.Duration < time.Millisecond || d.Duration > time.Minute) {
		v.at("store.redis.dial_timeout", "must be between 1ms and 1m (got %v)", d.Duration)
	}
	if r.PoolSize < 0 {
		v.at("store.redis.pool_size", "must be >= 1 (got %d)", r.PoolSize)
	}
	if r.MinIdleConns < 0 {
		v.at("store.redis.min_idle_conns", "must be >= 0 (got %d)", r.MinIdleConns)
	}
	if r.SentinelMaster != "" && len(r.Addresses) == 0 {
		v.at("store.redis.sentinel_master", "needs the Sentinels' host:port in store.redis.addresses")
	}
	if r.Pipeline == nil {
		on := true
		r.Pipeline = &on
	}
	if n := r.PipelineMaxBatch; n < 0 || n > MaxPipelineBatch {
		v.at("store.redis.pipeline_max_batch", "must be between 1 and %d (got %d)", MaxPipelineBatch, n)
	} else if n > 0 && !*r.Pipeline {
		v.at("store.redis.pipeline_max_batch", "only applies with pipeline: true")
	}
	if n := r.PipelineFlushers; n < 0 || n > MaxPipelineFlushers {
		v.at("store.redis.pipeline_flushers", "must be between 1 and %d (got %d)", MaxPipelineFlushers, n)
	} else if n > 0 && !*r.Pipeline {
		v.at("store.redis.pipeline_flushers", "only applies with pipeline: true")
	}
	if !used {
		return
	}
	if _, err := redisstore.ReadSecret(r.PasswordFile, r.PasswordEnv); err != nil {
		v.at("store.redis.password_file", "%v", err)
	}
	if _, err := redisstore.ReadSecret(r.SentinelPasswordFile, r.SentinelPasswordEnv); err != nil {
		v.at("store.redis.sentinel_password_file", "%v", err)
	}
	if t := r.TLS; t != nil {
		for path, f := range map[string]string{"ca_file": t.CAFile, "cert_file": t.CertFile, "key_file": t.KeyFile} {
			if f == "" {
				continue
			}
			if _, err := os.Stat(f); err != nil {
				v.at("store.redis.tls."+path, "%v", err)
			}
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			v.at("store.redis.tls", "cert_file and key_file go together")
		}
	}
}

// MaxPipelineBatch bounds store.redis.pipeline_max_batch: a batch of this
// many script calls is tens of milliseconds of Redis' time.
const MaxPipelineBatch = 4096

// MaxPipelineFlushers bounds store.redis.pipeline_flushers: each flusher
// holds a connection while its batch is on the wire.
const MaxPipelineFlushers = 64

// RedisOptions returns the connection settings for redisstore.Dial, reading
// the secrets now (a rotated password file takes effect on restart).
func (c *Config) RedisOptions() (redisstore.Options, error) {
	r := c.Store.Redis
	pw, err := redisstore.ReadSecret(r.PasswordFile, r.PasswordEnv)
	if err != nil {
		return redisstore.Options{}, fmt.Errorf("store.redis password: %w", err)
	}
	spw, err := redisstore.ReadSecret(r.SentinelPasswordFile, r.SentinelPasswordEnv)
	if err != nil {
		return redisstore.Options{}, fmt.Errorf("store.redis sentinel password: %w", err)
	}
	o := redisstore.Options{
		Addresses: r.Addresses, Cluster: r.Cluster, SentinelMaster: r.SentinelMaster,
		Username: r.Username, Password: pw, SentinelPassword: spw,
		Timeout: r.Timeout.Duration, DialTimeout: r.DialTimeout.Duration,
		PoolSize: r.PoolSize, MinIdleConns: r.MinIdleConns, Prefix: r.Prefix,
	}
	if t := r.TLS; t != nil {
		o.TLS = &redisstore.TLSOptions{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	return o, nil
}

// Listener defaults.
const (
	DefaultMaxRequestBytes      = 32 << 20
	MaxMaxRequestBytes          = 256 << 20
	DefaultMaxConcurrentStreams = 1024
	DefaultKeepaliveMinTime     = 10 * time.Second
)

func (v *validator) checkListen(l *Listen) {
	switch {
	case l.MaxRequestBytes == 0:
		l.MaxRequestBytes = DefaultMaxRequestBytes
	case l.MaxRequestBytes < 4096 || l.MaxRequestBytes > MaxMaxRequestBytes:
		v.at("listen.max_request_bytes", "must be between 4096 and %d (got %d)", MaxMaxRequestBytes, l.MaxRequestBytes)
	}
	switch {
	case l.MaxConcurrentStreams == 0:
		l.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	case l.MaxConcurrentStreams < 1:
		v.at("listen.max_concurrent_streams", "must be >= 1 (got %d)", l.MaxConcurrentStreams)
	}
	if !l.KeepaliveMinTime.IsSet() {
		l.KeepaliveMinTime.Duration = DefaultKeepaliveMinTime
	} else if l.KeepaliveMinTime.Duration < time.Second {
		v.at("listen.keepalive_min_time", "must be at least 1s (got %v)", l.KeepaliveMinTime.Duration)
	}
	switch l.Decoder {
	case "":
		l.Decoder = "fast"
	case "fast", "protobuf":
	default:
		v.at("listen.decoder", "must be fast or protobuf (got %q)", l.Decoder)
	}
	if d := l.DrainDelay.Duration; d < 0 || d > 5*time.Minute {
		v.at("listen.drain_delay", "must be between 0s and 5m (got %v)", d)
	}
	if t := l.TLS; t != nil {
		if t.CertFile == "" || t.KeyFile == "" {
			v.at("listen.tls", "needs cert_file and key_file")
		}
		for path, f := range map[string]string{"cert_file": t.CertFile, "key_file": t.KeyFile, "client_ca_file": t.ClientCAFile} {
			if f == "" {
				continue
			}
			if _, err := os.Stat(f); err != nil {
				v.at("listen.tls."+path, "%v", err)
			}
		}
		if len(t.AllowedSANs) > 0 && t.ClientCAFile == "" {
			v.at("listen.tls.allowed_sans", "needs client_ca_file: without mTLS there is no client identity to check")
		}
	}
}
