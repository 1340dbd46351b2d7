package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/secret"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// check validates what the YAML types cannot and fills the defaults of the
// settings the file leaves out (those handed to a library too: the
// libraries take every value as given). A setting handed to a library is
// checked by the library's own Validate, reported here at its line; the
// policies and the rate limit files are compiled by their front ends
// (internal/door).
func (v *validator) check(c *Config) {
	v.checkListen(&c.Listen)
	v.durationIn("reload.interval", &c.Reload.Interval, DefaultReloadInterval, 100*time.Millisecond, time.Hour)
	if c.Reload.Watch == nil {
		on := true
		c.Reload.Watch = &on
	}
	v.checkStore(&c.Store)
	v.checkRLS(&c.RLS)
	v.checkHTTPAuthz(c)
	v.checkAdminAPI(c)
	v.oneOf("log.format", &c.Log.Format, "", "json", "console")
	v.oneOf("log.level", &c.Log.Level, "", "debug", "info", "warn", "error")
	if c.Runtime.GOGC == nil {
		d := DefaultGOGC
		c.Runtime.GOGC = &d
	} else if g := *c.Runtime.GOGC; g < 10 || g > 10000 {
		v.at("runtime.gogc", "must be between 10 and 10000 percent (got %d; set GOGC=off in the environment to turn the collector off)", g)
	}
	if c.Runtime.MemoryLimitRatio == nil {
		d := DefaultMemoryLimitRatio
		c.Runtime.MemoryLimitRatio = &d
	} else if r := *c.Runtime.MemoryLimitRatio; !(r >= 0 && r <= 1) {
		v.at("runtime.memory_limit_ratio", "must be a fraction in [0, 1], e.g. 0.9; 0 sets no limit (got %v)", r)
	}
	v.oneSecret("identity.hash_secret", c.Identity.HashSecretFile, c.Identity.HashSecretEnv)
}

func (v *validator) checkListen(l *Listen) {
	if l.GRPC == "" {
		l.GRPC = DefaultGRPC
	}
	v.hostPort("listen.grpc", l.GRPC)
	// Left out, the admin port is where the embedded default and the README
	// put it; only an explicit admin: "" turns it off.
	if _, set := v.lines["listen.admin"]; !set {
		l.Admin = DefaultAdmin
	}
	if l.Admin != "" {
		v.hostPort("listen.admin", l.Admin)
	}
	v.oneOf("listen.admin_debug", &l.AdminDebug, AdminDebugLoopback, AdminDebugLoopback, AdminDebugAll)
	if l.Metrics != "" {
		v.hostPort("listen.metrics", l.Metrics)
	}
	v.intIn("listen.max_request_bytes", &l.MaxRequestBytes, DefaultMaxRequestBytes, 4096, MaxMaxRequestBytes)
	if l.HTTP != "" {
		v.hostPort("listen.http", l.HTTP)
	}
	v.intIn("listen.max_header_bytes", &l.MaxHeaderBytes, DefaultMaxHeaderBytes, 4096, MaxMaxHeaderBytes)
	if n := l.MaxHTTPConnections; n != 0 && (n < MinHTTPConnections || n > MaxHTTPConnections) {
		v.at("listen.max_http_connections", "must be between %d and %d, or 0 to size it from the memory limit and the file descriptors (got %d)", MinHTTPConnections, MaxHTTPConnections, n)
	}
	if n := l.MaxRequestBytesInFlight; n != 0 && (n < MinRequestBytesInFlight || n > MaxRequestBytesInFlight) {
		v.at("listen.max_request_bytes_in_flight", "must be between %d (1 MiB) and %d (64 GiB), or 0 to size it from the memory limit (got %d)", MinRequestBytesInFlight, MaxRequestBytesInFlight, n)
	}
	// gRPC takes the limit as a uint32.
	v.intIn("listen.max_concurrent_streams", &l.MaxConcurrentStreams, DefaultMaxConcurrentStreams, 1, math.MaxUint32)
	v.durationIn("listen.keepalive_min_time", &l.KeepaliveMinTime, DefaultKeepaliveMinTime, time.Second, 24*time.Hour)
	v.oneOf("listen.decoder", &l.Decoder, "fast", "fast", "protobuf")
	v.durationIn("listen.drain_delay", &l.DrainDelay, 0, 0, 5*time.Minute)
	if t := l.TLS; t != nil {
		if t.CertFile == "" || t.KeyFile == "" {
			v.at("listen.tls", "needs cert_file and key_file")
		}
		if len(t.AllowedSANs) > 0 && t.ClientCAFile == "" {
			v.at("listen.tls.allowed_sans", "needs client_ca_file: without mTLS there is no client identity to check")
		}
	}
}

func (v *validator) checkStore(s *Store) {
	v.oneOf("store.backend", &s.Backend, "memory", "redis", "memory")
	v.oneOf("store.on_failure", &s.OnFailure, "allow", "allow", "deny", "local")
	if p := s.LocalShare; p != nil {
		if !(*p > 0) || *p > 1 {
			v.at("store.local_share", "must be a fraction in (0, 1], e.g. 0.5 for two replicas (got %v)", *p)
		} else if s.OnFailure != "local" {
			v.at("store.local_share", "only applies with on_failure: local")
		}
	}
	v.durationIn("store.failure_retry_after", &s.FailureRetryAfter, DefaultFailureRetryAfter, time.Second, time.Hour)
	if s.LocalShare == nil {
		d := DefaultLocalShare
		s.LocalShare = &d
	}
	v.intIn("store.breaker.failures", &s.Breaker.Failures, DefaultBreakerFailures, 1, math.MaxInt32)
	v.durationIn("store.breaker.open_for", &s.Breaker.OpenFor, DefaultBreakerOpenFor, time.Millisecond, time.Minute)
	if m := s.OverLimitCache.MaxEntries; m == nil {
		d := DefaultOverLimitEntries
		s.OverLimitCache.MaxEntries = &d
	} else if *m < 0 {
		v.at("store.over_limit_cache.max_entries", "must be >= 0 (got %d)", *m)
	}
	v.intIn("store.memory.max_buckets", &s.Memory.MaxBuckets, DefaultMaxBuckets, 1, MaxBuckets)
	v.checkRedis(&s.Redis)
	if s.Backend == "redis" {
		v.redisOptions(s)
	}
}

// MaxBuckets bounds store.memory.max_buckets: 2^28 buckets is at most
// 16 GiB of tables (memory.MaxTableBytes).
const MaxBuckets = 1 << 28

// checkRedis checks what store.redis holds for this package (pipelining)
// and fills the defaults of the settings it leaves out, connection
// settings included (redisstore takes every value as given); the rest of
// the connection settings are redisstore's to check, by redisOptions.
func (v *validator) checkRedis(r *Redis) {
	v.settingIn("store.redis.timeout", &r.Timeout, DefaultRedisTimeout, time.Millisecond, 10*time.Second, "and well under Envoy's ext_authz timeout")
	v.settingIn("store.redis.dial_timeout", &r.DialTimeout, DefaultRedisDialTimeout, time.Millisecond, time.Minute)
	// Only a prefix the file leaves out is the default: prefix: "" is no
	// prefix at all (keys start with the policy's name).
	if _, set := v.lines["store.redis.prefix"]; !set {
		r.Prefix = DefaultRedisPrefix
	}
	if r.Pipeline == nil {
		on := true
		r.Pipeline = &on
	}
	batchSet, flushersSet := r.PipelineMaxBatch != 0, r.PipelineFlushers != 0
	v.intIn("store.redis.pipeline_max_batch", &r.PipelineMaxBatch, DefaultPipelineMaxBatch, 1, MaxPipelineBatch)
	v.intIn("store.redis.pipeline_flushers", &r.PipelineFlushers, DefaultPipelineFlushers, 1, MaxPipelineFlushers)
	v.durationIn("store.redis.pipeline_wait", &r.PipelineWait, DefaultPipelineWait, 0, MaxPipelineWait, "as every decision of a held batch waits that long")
	for _, k := range []struct {
		path string
		set  bool
	}{
		{"store.redis.pipeline_max_batch", batchSet},
		{"store.redis.pipeline_flushers", flushersSet},
		{"store.redis.pipeline_wait", r.PipelineWait.IsSet()},
	} {
		if k.set && !*r.Pipeline {
			v.at(k.path, "only applies with pipeline: true")
		}
	}
}

// redisOptions reports redisstore's own verdict on the connection
// settings, each problem at the line of the setting it is about (its path
// under store.redis). The passwords are not read here (Resolve reads
// them): one the file names stands in as set.
func (v *validator) redisOptions(s *Store) {
	r := &s.Redis
	v.oneSecret("store.redis.password", r.PasswordFile, r.PasswordEnv)
	v.oneSecret("store.redis.sentinel_password", r.SentinelPasswordFile, r.SentinelPasswordEnv)
	named := func(file, env string) string {
		if file != "" || env != "" {
			return "(named, read by Resolve)"
		}
		return ""
	}
	o := r.Options
	o.Password, o.SentinelPassword = named(r.PasswordFile, r.PasswordEnv), named(r.SentinelPasswordFile, r.SentinelPasswordEnv)
	var fes fielderr.List
	if !errors.As(o.Validate(), &fes) {
		return
	}
	for _, fe := range fes {
		path := "store.redis." + fe.Path
		switch fe.Path {
		case "password":
			path = secretPath("store.redis.password", r.PasswordFile, r.PasswordEnv)
		case "sentinel_password":
			path = secretPath("store.redis.sentinel_password", r.SentinelPasswordFile, r.SentinelPasswordEnv)
		}
		v.at(path, "%s", fe.Msg)
	}
}

// oneSecret reports a secret given both in a file and in an environment
// variable, which secret.Read refuses: that is the file's mistake, found
// without reading either.
func (v *validator) oneSecret(base, file, env string) {
	if file != "" && env != "" {
		_, err := secret.Read(file, env)
		v.at(base+"_file", "%v", err)
	}
}

// MaxPipelineBatch bounds store.redis.pipeline_max_batch: a batch of this
// many script calls is tens of milliseconds of Redis' time.
const MaxPipelineBatch = 4096

// MaxPipelineWait bounds store.redis.pipeline_wait: a held batch adds its
// wait to every decision in it, and an idle Go process wakes its timers in
// whole milliseconds.
const MaxPipelineWait = 10 * time.Millisecond

// MaxPipelineFlushers bounds store.redis.pipeline_flushers: each flusher
// holds a connection while its batch is on the wire.
const MaxPipelineFlushers = 64

// oneOf checks that *s is one of choices; empty, it becomes def.
func (v *validator) oneOf(path string, s *string, def string, choices ...string) {
	if *s == "" {
		*s = def
		return
	}
	for _, c := range choices {
		if *s == c {
			return
		}
	}
	v.at(path, "must be %s or %s (got %q)", strings.Join(choices[:len(choices)-1], ", "), choices[len(choices)-1], *s)
}

// intIn checks that *n is within [lo, hi]; 0 (left out) becomes def.
func (v *validator) intIn(path string, n *int, def, lo, hi int) {
	if *n == 0 {
		*n = def
		return
	}
	if *n < lo || *n > hi {
		v.at(path, "must be between %d and %d (got %d)", lo, hi, *n)
	}
}

// durationIn checks that a duration the file sets is within [lo, hi]; left
// out, it becomes def. why, if given, is added to the range.
func (v *validator) durationIn(path string, d *Duration, def, lo, hi time.Duration, why ...string) {
	if !d.IsSet() {
		d.Duration = def
		return
	}
	if d.Duration < lo || d.Duration > hi {
		v.at(path, "must be between %s and %s%s (got %v)", short(lo), short(hi), strings.Join(append([]string{""}, why...), ", "), d.Duration)
	}
}

// settingIn is durationIn for a library's duration (a time.Duration, which
// cannot say whether the file set it; the file's lines can): set, it must
// be within [lo, hi]; left out, it becomes def.
func (v *validator) settingIn(path string, d *time.Duration, def, lo, hi time.Duration, why ...string) {
	if _, set := v.lines[path]; !set {
		*d = def
	} else if *d < lo || *d > hi {
		v.at(path, "must be between %s and %s%s (got %v)", short(lo), short(hi), strings.Join(append([]string{""}, why...), ", "), *d)
	}
}

// short writes whole hours and minutes as 1h and 5m, not 1h0m0s.
func short(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// hostPort checks a listen address: host:port with a port from 0 (any
// free port) to 65535 and a host (an empty one would listen on every
// interface, which must be said as 0.0.0.0 or [::]).
func (v *validator) hostPort(path, s string) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		v.at(path, "must be host:port (got %q)", s)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.at(path, "has an invalid port in %q", s)
	} else if host == "" {
		v.at(path, "must name a host or address, as in 127.0.0.1:9191 or 0.0.0.0:9191 (got %q)", s)
	}
}
