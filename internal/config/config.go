// Package config is Floodgate's YAML configuration: its schema, the
// reflective validator that checks a file against it, and the defaults of
// every setting the file leaves out (the libraries the settings are handed
// to take their values as given). Every problem is reported as FILE:LINE:
// what is wrong, all of them at once, so `floodgate validate` fixes a file
// in one pass: the error of Parse and Resolve for an invalid file is
// a fielderr.List, each problem with its file, line and setting, in file
// order.
//
// What a section configures is compiled by the code that owns it: each
// front end's part by internal/door (the policies by extauthz, the rate
// limit files by internal/door/ratelimit/rls), the store by internal/store. Problems they
// find are put at their lines here (Config.Problem).
package config

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/safefile"
	"github.com/floodgate/floodgate/limiter/fielderr"
	"github.com/floodgate/floodgate/limiter/redisstore"
)

// Config is the whole configuration file. The key names are fixed by the
// product design; the schema may grow around them.
type Config struct {
	Listen   Listen                `yaml:"listen"`
	Store    Store                 `yaml:"store"`
	ClientIP extauthz.ClientIPSpec `yaml:"client_ip"`
	// Headers lists the RateLimit header families: legacy, structured.
	Headers  []string `yaml:"headers"`
	Identity Identity `yaml:"identity"`
	Log      Log      `yaml:"log"`
	Reload   Reload   `yaml:"reload"`
	Runtime  Runtime  `yaml:"runtime"`
	RLS      RLS      `yaml:"rls"`
	// HTTPAuthz reads the requests of the HTTP authorization door
	// (listen.http).
	HTTPAuthz HTTPAuthz             `yaml:"http_authz"`
	Policies  []extauthz.PolicySpec `yaml:"policies"`

	// AdminAPI turns on the admin port's /v1/ API (balances, explain).
	AdminAPI *AdminAPI `yaml:"admin_api"`

	// Source names where the configuration came from (a path, or "embedded default").
	Source string `yaml:"-"`
	// Digest is the SHA-256 (hex) of the bytes it was parsed from.
	Digest string `yaml:"-"`
	data   []byte // those bytes
	// lines holds the line of every path in the file, so that a problem
	// found after Parse (a secret that cannot be read, a policy that does
	// not compile) is reported at the line that sets it.
	lines map[string]int
	// hashSecret is the identity hash secret Resolve read (nil: none).
	hashSecret []byte
	// SecretReplaced, set by ResolveOffline only, says why the identity hash
	// secret could not be read and a random one was used instead ("" when
	// the configuration's own was read, or it names none).
	SecretReplaced string `yaml:"-"`

	// asRead keeps the sections a reload cannot change as the file set
	// them (serve may override some, --log-format for one).
	asRead restartOnly
}

// restartOnly is what a running server reads at start only, each named in
// messages by its section tag or, without one, its field's name in lower
// case.
type restartOnly struct {
	Listen   Listen
	Store    Store
	Identity Identity
	Log      Log
	Runtime  Runtime
	Reload   Reload
	XDS      *XDS `section:"rls.xds"`
}

// Bytes returns the content the configuration was parsed from (not to be
// modified): a reload compares the file's content now with it.
func (c *Config) Bytes() []byte { return c.data }

// RestartOnlyChanges names the sections that next sets differently from c
// and that a running server reads at start only (listen, store, identity,
// log, runtime, reload, rls.xds): a reload to next leaves them as they are until a
// restart. A secret rewritten behind an unchanged identity section is
// found by ResolveReload, which reads it.
func (c *Config) RestartOnlyChanges(next *Config) []string {
	var changed []string
	a, b := reflect.ValueOf(c.asRead), reflect.ValueOf(next.asRead)
	for i := 0; i < a.NumField(); i++ {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			changed = append(changed, sectionName(a.Type().Field(i)))
		}
	}
	return changed
}

func sectionName(f reflect.StructField) string {
	if s := f.Tag.Get("section"); s != "" {
		return s
	}
	return strings.ToLower(f.Name)
}

// Listen is where the servers listen, and the gRPC server's limits.
type Listen struct {
	GRPC  string `yaml:"grpc"`  // ext_authz Check and grpc.health.v1
	Admin string `yaml:"admin"` // HTTP /metrics, /healthz, /readyz, /healthcheck; default DefaultAdmin, "" disables
	// HTTP is the HTTP authorization door (Envoy's ext_authz http_service,
	// nginx auth_request, ...), deciding the policies as Check does; off
	// when unset.
	HTTP string `yaml:"http"`
	// MaxHeaderBytes bounds the request line and headers of one HTTP
	// authorization request (default DefaultMaxHeaderBytes): a larger one
	// is answered 431 by the HTTP server before it is decided. Every
	// proxy's own default limit is far below it.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// AdminDebug says who may read the admin port's /debug/ pages (who is
	// limited, the xDS feed): loopback (the default: a peer on this host
	// alone, whatever address the port listens on) or all (every peer that
	// reaches the port, for floodgate top across hosts).
	AdminDebug string `yaml:"admin_debug"`
	// MaxHTTPConnections bounds the connections open to the HTTP
	// authorization door at once. At the bound a new connection is served
	// by closing the longest idle one, and refused (answered by the
	// failure mode) only while every one is busy with a request. 0, the
	// default, sizes it from the memory limit and the file descriptors
	// (docs/http-authz.md, "Operating the door").
	MaxHTTPConnections int `yaml:"max_http_connections"`
	// Metrics, when set, serves /metrics alone on a listener of its own
	// too, for a scraper that expects them apart (envoyproxy/ratelimit's
	// PROMETHEUS_ADDR).
	Metrics string `yaml:"metrics"`

	// TLS, when set, serves gRPC over TLS; with client_ca_file, mTLS.
	TLS *ListenTLS `yaml:"tls"`
	// MaxRequestBytes bounds one CheckRequest (default 32 MiB): a request
	// larger than this is refused by gRPC before any work is done, and
	// Envoy takes that refusal for an outage (failure_mode_allow lets the
	// request through). The default exceeds the largest request Envoy can
	// send without a body (max_request_headers_kb at its maximum, 8192 KiB,
	// whose :path and :authority Envoy repeats as fields: about 16 MiB) with
	// 15 MiB to spare for with_request_body; docs/configuration.md says how
	// to size it.
	MaxRequestBytes int `yaml:"max_request_bytes"`
	// MaxRequestBytesInFlight bounds the bytes of all the requests being
	// read and decided at once (max_request_bytes bounds one). 0, the
	// default, sizes it from the memory the process is given
	// (docs/operations.md, "Memory: request bytes in flight").
	MaxRequestBytesInFlight int `yaml:"max_request_bytes_in_flight"`
	// MaxConcurrentStreams bounds Checks in flight per connection (default 1024).
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// KeepaliveMinTime: clients pinging more often are disconnected (default 10s).
	KeepaliveMinTime Duration `yaml:"keepalive_min_time"`
	// DrainDelay is how long, after SIGTERM, Floodgate keeps answering while
	// reporting NOT_SERVING, so Envoy's health checks move traffic away
	// before the listener closes: at least the health check's interval ×
	// unhealthy_threshold + timeout. Default 0: that value belongs to the
	// Envoy configuration, which Floodgate cannot see (docs/operations.md
	// says why; every shipped config beside an Envoy one sets it).
	DrainDelay Duration `yaml:"drain_delay"`
	// Decoder reads CheckRequests and writes CheckResponses: fast (default;
	// internal/door/check's decode.go and encode.go, which hand anything unusual to
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
	LocalShare *float64 `yaml:"local_share"` // (0, 1], default DefaultLocalShare
	// FailureRetryAfter is the Retry-After of on_failure: deny (default 1s).
	FailureRetryAfter Duration       `yaml:"failure_retry_after"`
	Breaker           Breaker        `yaml:"breaker"`
	OverLimitCache    OverLimitCache `yaml:"over_limit_cache"`
}

// Breaker tunes the circuit breaker on Redis.
type Breaker struct {
	Failures int      `yaml:"failures"` // consecutive failures that open it (default DefaultBreakerFailures)
	OpenFor  Duration `yaml:"open_for"` // before a probe (default DefaultBreakerOpenFor)
}

// OverLimitCache tunes the cache that denies, without a Redis call, requests
// that cannot pass before their Retry-After.
type OverLimitCache struct {
	MaxEntries *int `yaml:"max_entries"` // default DefaultOverLimitEntries; 0 turns it off
}

// Redis is the Redis connection and how decisions share it. The
// connection settings are redisstore's own Options, read under their yaml
// names as they are (addresses, cluster, sentinel_master, username,
// timeout (default DefaultRedisTimeout, 50ms), dial_timeout (default
// DefaultRedisDialTimeout, 250ms), pool_size (default 10 × CPUs: go-redis'
// own when 0), min_idle_conns, prefix (default DefaultRedisPrefix, fg:;
// prefix: "" is no prefix), tls), Parse filling in the defaults of those
// left out; the passwords are named here by file or variable and read by
// Resolve.
type Redis struct {
	redisstore.Options `yaml:",inline"`

	PasswordFile         string `yaml:"password_file"`
	PasswordEnv          string `yaml:"password_env"`
	SentinelPasswordFile string `yaml:"sentinel_password_file"`
	SentinelPasswordEnv  string `yaml:"sentinel_password_env"`

	// Pipeline sends decisions that are in flight at the same time to Redis
	// together, as one pipeline per round trip: still one script call per
	// decision, far fewer system calls on both sides (default true).
	// PipelineMaxBatch bounds the decisions in one pipeline (default 128).
	// PipelineFlushers is how many pipelines may be on the wire at once
	// (default 1: the deepest batches, best when Redis shares cores with
	// its clients; across a network hop batches leave beside them on their
	// own, see redisstore's pipeline.go).
	// PipelineWait bounds how long a batch smaller than the one before it
	// (under steady load) waits for more decisions to join (default 100µs;
	// 0s: never wait).
	Pipeline         *bool    `yaml:"pipeline"`
	PipelineMaxBatch int      `yaml:"pipeline_max_batch"`
	PipelineFlushers int      `yaml:"pipeline_flushers"`
	PipelineWait     Duration `yaml:"pipeline_wait"`
}

// Memory tunes the in-memory store.
type Memory struct {
	MaxBuckets int `yaml:"max_buckets"` // default DefaultMaxBuckets
}

// Identity keys the hash that turns identities (API keys, IPs) into bucket
// keys. Give every replica the same secret.
type Identity struct {
	HashSecretFile string `yaml:"hash_secret_file"`
	HashSecretEnv  string `yaml:"hash_secret_env"`
}

// Runtime tunes Go's garbage collector, at start (a reload does not change
// it). Floodgate's live heap is small and every Check allocates afresh, so
// collecting less often saves CPU on every decision for a larger heap.
type Runtime struct {
	// GOGC is the collector's target heap growth in percent (default
	// DefaultGOGC). The GOGC environment variable, when set, wins.
	GOGC *int `yaml:"gogc"`
	// MemoryLimitRatio sets Go's soft memory limit to this fraction of the
	// container's memory limit (its cgroup's), so the larger heap GOGC
	// allows yields to the limit instead of meeting the OOM killer (default
	// DefaultMemoryLimitRatio; 0 sets none). The GOMEMLIMIT environment
	// variable, when set, wins. Without a cgroup limit, a process with
	// in-memory buckets sets its limit from store.memory.max_buckets
	// instead, and one without sets none.
	MemoryLimitRatio *float64 `yaml:"memory_limit_ratio"`
}

// Runtime defaults (docs/configuration.md says what they cost and save).
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

// Defaults of the settings, filled in by Parse where the file leaves a
// setting out. The libraries the settings are handed to (redisstore,
// memory, resilient) have no defaults of their own: they take the values
// as given.
const (
	DefaultGRPC                 = "127.0.0.1:9191"
	DefaultAdmin                = "127.0.0.1:9192"
	DefaultReloadInterval       = 2 * time.Second
	DefaultFailureRetryAfter    = time.Second
	DefaultMaxRequestBytes      = 32 << 20
	DefaultMaxHeaderBytes       = 1 << 20
	MaxMaxHeaderBytes           = 16 << 20
	MinHTTPConnections          = 16
	MaxHTTPConnections          = 1 << 20
	MaxMaxRequestBytes          = 256 << 20
	MinRequestBytesInFlight     = 1 << 20
	MaxRequestBytesInFlight     = 64 << 30
	DefaultMaxConcurrentStreams = 1024
	DefaultKeepaliveMinTime     = 10 * time.Second
	DefaultOverLimitEntries     = 100_000
	// ReclaimInterval is how often an in-memory store drops its full
	// buckets, returning the memory of callers that went idle.
	ReclaimInterval = 10 * time.Second
	// DrainTimeout bounds how long SIGTERM waits for the requests in
	// flight (not a setting: drain_delay is the one that depends on the
	// proxy's health checks).
	DrainTimeout = 10 * time.Second
	// ProbeInterval is how often a degraded store is probed in the
	// background, so readiness turns exact again without traffic (the
	// first probe after the breaker's open_for; not a setting).
	ProbeInterval = 250 * time.Millisecond
)

// Defaults of the store's settings.
const (
	// DefaultRedisTimeout (store.redis.timeout) bounds each decision's
	// Redis work: socket reads and writes, the wait for a pooled
	// connection, and the resilience layer's deadline.
	DefaultRedisTimeout = 50 * time.Millisecond
	// DefaultRedisDialTimeout (store.redis.dial_timeout) bounds opening a
	// connection.
	DefaultRedisDialTimeout = 250 * time.Millisecond
	// DefaultRedisPrefix (store.redis.prefix) starts every key Floodgate
	// writes.
	DefaultRedisPrefix = "fg:"
	// DefaultPipelineMaxBatch (store.redis.pipeline_max_batch) bounds the
	// decisions in one pipeline.
	DefaultPipelineMaxBatch = 128
	// DefaultPipelineFlushers (store.redis.pipeline_flushers) is the number
	// of batches that may be on the wire at once. One is best when Redis
	// runs on the same few cores as its clients: every decision that
	// arrives while a batch is on the wire joins the next one, so batches
	// are as deep as the load allows and Redis pays its per-read and
	// per-write system calls once per batch (docs/performance.md compares
	// one flusher with two). Across a network hop (round trips of 300 µs
	// and more) a batch that finds the wire taken leaves beside it anyway,
	// up to three beside each flusher's, so one stays the default there
	// too (docs/performance/network-hop.md).
	DefaultPipelineFlushers = 1
	// DefaultPipelineWait (store.redis.pipeline_wait) is the wait that
	// serves best under steady load (see the comment at the top of
	// limiter/redisstore/pipeline.go).
	DefaultPipelineWait = 100 * time.Microsecond
	// DefaultMaxBuckets (store.memory.max_buckets) bounds the buckets an
	// in-memory store holds.
	DefaultMaxBuckets = 1 << 20
	// MemoryShards is the number of independently locked maps of an
	// in-memory store (not a setting): enough that parallel decisions on
	// different callers rarely meet on a lock.
	MemoryShards = 256
	// StreamWorkers is how many goroutines serve gRPC calls and are kept
	// from one call to the next (grpc.NumStreamWorkers; not a setting): a
	// call runs on a goroutine whose stack has already grown to what a
	// decision needs instead of starting one and growing its stack, which
	// took a tenth of floodgate's CPU under load (docs/performance.md).
	// Calls beyond this many in flight get a goroutine of their own, as
	// they would without workers.
	StreamWorkers = 128
	// DefaultBreakerFailures (store.breaker.failures) is how many
	// consecutive failures open the circuit breaker on Redis.
	DefaultBreakerFailures = 5
	// DefaultBreakerOpenFor (store.breaker.open_for) is how long the
	// breaker stays open before a probe.
	DefaultBreakerOpenFor = 500 * time.Millisecond
	// DefaultLocalShare (store.local_share) is the share of every limit
	// the per-replica fallback of on_failure: local applies: all of it.
	DefaultLocalShare = 1.0
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

// HashSecret is the identity hash secret Resolve read (nil before Resolve,
// or when the file names none): every identity is a keyed hash under it.
func (c *Config) HashSecret() []byte { return c.hashSecret }

// MaxFileBytes bounds a configuration file: 1 MiB, what one Kubernetes
// ConfigMap holds, and far more than any set of policies needs.
const MaxFileBytes = 1 << 20

// ReadFile reads a configuration file: a regular file (symlinks followed)
// of at most MaxFileBytes, read as every file an operator names is
// (safefile).
func ReadFile(path string) ([]byte, error) { return safefile.Read(path, MaxFileBytes) }

// Parse validates a configuration read from file (the name is used in
// messages only). The shape of the file (keys, types, whole numbers and
// their ranges, aliases, documents) is checked first; when it is broken in
// a way that leaves parts of the file unread (a key set twice, aliases
// expanding too far), the settings are not checked further, since they
// would be checked against values the file does not hold.
//
// Parse reads nothing but data: secrets, password files and TLS files are
// resolved by Resolve, a separate step, so a file can be checked where its
// secrets do not exist (floodgate validate --offline, in CI). What the
// sections configure is compiled by their owners (internal/door), which
// read Parse's problems with their own (Check).
func Parse(file string, data []byte) (*Config, error) {
	c, problems := Check(file, data)
	if len(problems) > 0 {
		return nil, problems
	}
	return c, nil
}

// Check is Parse for a caller that checks more of the file than its shape
// and settings (the front ends' compilers), so that every problem is
// reported at once: it returns the configuration as read even when it has
// problems, whenever the whole file was read (nil when it could not be),
// and the problems, in line order.
func Check(file string, data []byte) (*Config, fielderr.List) {
	v := &validator{file: file, lines: map[string]int{}, reported: map[string]bool{}}
	if !utf8.Valid(data) {
		line := 1 + bytes.Count(data[:firstInvalidUTF8(data)], []byte("\n"))
		v.problem(line, "is not UTF-8 text: save the file as UTF-8")
		return nil, v.problems
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		return nil, fielderr.List{fielderr.FromYAML(file, err.Error())}
	}
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		line := next.Line
		if err != nil {
			line = 0
		}
		v.problem(line, "a second YAML document (after ---) is not read: put the whole configuration in one document")
	}
	if len(doc.Content) == 0 {
		v.problem(0, "is empty: a configuration needs at least one front end (policies, or rls.config)")
		return nil, v.problems
	}
	sum := sha256.Sum256(data)
	c := &Config{Source: file, Digest: hex.EncodeToString(sum[:]), data: data, lines: v.lines}
	root := doc.Content[0]
	v.walk(root, reflect.TypeOf(c), "", nil)
	if v.unread {
		c = nil
	} else {
		v.decode(root, c)
		v.check(c)
		c.asRead = restartOnly{Listen: c.Listen, Store: c.Store, Identity: c.Identity, Log: c.Log, Runtime: c.Runtime, Reload: c.Reload, XDS: c.RLS.XDS}
	}
	sort.SliceStable(v.problems, func(i, j int) bool { return v.problems[i].Line < v.problems[j].Line })
	return c, v.problems
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// decode fills c from the file. The walk has already reported, with their
// paths, the type mistakes yaml.v3 reports again; its messages are kept
// only for lines the walk found nothing wrong on.
func (v *validator) decode(root *yaml.Node, c *Config) {
	err := root.Decode(c)
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, e := range te.Errors {
			if p := fielderr.FromYAML(v.file, e); !v.lineReported(p.Line) {
				v.problems = append(v.problems, p)
			}
		}
	} else if err != nil {
		v.problems = append(v.problems, fielderr.FromYAML(v.file, err.Error()))
	}
}

// The values of listen.admin_debug.
const (
	AdminDebugLoopback = "loopback"
	AdminDebugAll      = "all"
)
