// Package peerenv builds a Floodgate configuration from envoyproxy/ratelimit's
// environment variables (its src/settings/settings.go), for the binary
// started under the name ratelimit: the image's /bin/ratelimit, which
// Envoy Gateway's rate limit Deployment and the peer's own docker-compose
// run with the peer's variables alone. Every one of the peer's variables is
// read: honoured by a Floodgate setting (the configuration names, beside
// each setting, the variables it came from); refused, with why, when
// Floodgate does not implement it and ignoring it would change what is
// limited; warned about otherwise. What Floodgate adds (bursts, the
// identity hash secret, the failure mode) has variables of its own,
// FLOODGATE_*, and an unknown FLOODGATE_ variable is refused as a typo
// would change what is limited. docs/ratelimit.md has the table.
package peerenv

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Source names the configuration in messages (its "file").
const Source = "envoyproxy/ratelimit's environment"

// Result is a configuration built from the environment.
type Result struct {
	// YAML is the Floodgate configuration, each setting commented with the
	// variables it came from.
	YAML []byte
	// Warnings name the variables Floodgate does not implement whose
	// absence changes no decision, with what happens instead.
	Warnings []Note
	// Env are variables to set in the process before the configuration is
	// loaded: the Redis passwords split out of REDIS_AUTH or REDIS_URL,
	// which the configuration names by variable (never the secret).
	Env map[string]string
	doc *doc
}

// Refused is the error of an environment Floodgate will not run with:
// each note names its variables and why.
type Refused []Note

func (r Refused) Error() string {
	lines := make([]string, len(r))
	for i, n := range r {
		lines[i] = n.String()
	}
	return strings.Join(lines, "\n")
}

// Variables are envoyproxy/ratelimit's variables (src/settings/settings.go),
// every one of which Build reads.
var Variables = []string{
	"HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT", "GRPC_UDS", "GRPC_HOST", "GRPC_PORT", "GRPC_MAX_CONNECTION_AGE",
	"GRPC_MAX_CONNECTION_AGE_GRACE", "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT",
	"GRPC_CLIENT_TLS_SAN", "LOG_LEVEL", "LOG_FORMAT", "CONFIG_TYPE", "FORCE_START_WITHOUT_INITIAL_CONFIG", "CONFIG_GRPC_XDS_NODE_ID",
	"CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "USE_STATSD",
	"STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS", "USE_PROMETHEUS", "PROMETHEUS_ADDR",
	"PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY",
	"RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT", "EXPIRATION_JITTER_MAX_SECONDS", "LOCAL_CACHE_SIZE_IN_BYTES",
	"NEAR_LIMIT_RATIO", "CACHE_KEY_PREFIX", "BACKEND_TYPE", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "LIMIT_RESPONSE_HEADERS_ENABLED",
	"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "REDIS_SOCKET_TYPE",
	"REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY",
	"REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
	"REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
	"REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH",
	"REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_TIMEOUT", "REDIS_PERSECOND_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL",
	"REDIS_STARTUP_MAX_ELAPSED_TIME", "MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH",
	"MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
	"SHADOW_MODE", "QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA", "MERGE_DOMAIN_CONFIG", "TRACING_ENABLED", "TRACING_SERVICE_NAME",
	"TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
}

// Floodgate's own variables, for what the peer has no variable for.
const (
	// VarBurst gives limits a capacity other than requests_per_unit
	// (rls.burst): "domain.key_value.key=20,other.key=5".
	VarBurst = "FLOODGATE_BURST"
	// VarHashSecretFile names the identity hash secret's file
	// (identity.hash_secret_file); VarHashSecret holds the secret itself
	// (identity.hash_secret_env names it). Give every replica the same.
	VarHashSecretFile = "FLOODGATE_HASH_SECRET_FILE"
	VarHashSecret     = "FLOODGATE_HASH_SECRET"
	// VarOnFailure is what a request answers when Redis cannot decide:
	// error (the default: an RPC error, as envoyproxy/ratelimit answers,
	// so that Envoy's failure_mode_deny decides), allow, deny or local.
	VarOnFailure = "FLOODGATE_ON_FAILURE"
	// VarAdminDebug is listen.admin_debug: who may read the admin port's
	// /debug/ pages, which HOST puts on every interface: loopback (the
	// default) or all.
	VarAdminDebug = "FLOODGATE_ADMIN_DEBUG"
)

// FloodgateVariables are Floodgate's own variables in ratelimit mode.
var FloodgateVariables = []string{VarBurst, VarHashSecretFile, VarHashSecret, VarOnFailure, VarAdminDebug}

// The variables peerenv sets for the passwords it splits out (Result.Env).
const (
	redisPasswordVar = "FLOODGATE_PEERENV_REDIS_PASSWORD"
)

// Build reads the peer's variables through lookup (os.LookupEnv) and the
// names of every variable in the environment (os.Environ's, for the
// FLOODGATE_ ones), and returns the configuration, or Refused listing every
// variable Floodgate will not run with.
func Build(lookup func(string) (string, bool), environ []string) (*Result, error) {
	r, _ := build(lookup, environ)
	if r.err != nil {
		return nil, r.err
	}
	return r.Result, nil
}

type built struct {
	*Result
	err error
}

// build is Build, also returning the env it read with (for the test that
// every variable is read).
func build(lookup func(string) (string, bool), environ []string) (built, *env) {
	e := &env{lookup: lookup, read: map[string]bool{}}
	d := newDoc()
	res := &Result{Env: map[string]string{}, doc: d}
	d.set("reload.interval", "1s")
	listen(e, d)
	logging(e, d)
	limits(e, d)
	stats(e, d)
	redis(e, d, res)
	service(e, d)
	floodgate(e, d, environ)
	unimplemented(e)
	for _, n := range e.refused {
		slices.Sort(n.Vars)
	}
	res.YAML, res.Warnings = d.bytes(), e.warned
	if len(e.refused) > 0 {
		return built{Result: res, err: Refused(e.refused)}, e
	}
	return built{Result: res}, e
}

// Explain names, for each problem Floodgate found in the configuration
// Build made, the variables behind the setting it is about.
func (r *Result) Explain(err error) error {
	var list fielderr.List
	if !asList(err, &list) {
		return err
	}
	var out Refused
	for _, p := range list {
		vars := r.doc.varsOf(p.Path)
		if len(vars) == 0 {
			vars = []string{"(" + p.Path + ")"}
		}
		out = append(out, Note{Vars: vars, Msg: p.Path + " " + p.Msg})
	}
	return out
}

// VarsOf names the variables behind a setting of the configuration Build
// made (its nearest enclosing setting's), or none.
func (r *Result) VarsOf(path string) []string { return r.doc.varsOf(path) }

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func listen(e *env, d *doc) {
	d.set("listen.grpc", hostPort(e.str("GRPC_HOST", "0.0.0.0"), e.integer("GRPC_PORT", 8081)), "GRPC_HOST", "GRPC_PORT")
	d.set("listen.admin", hostPort(e.str("HOST", "0.0.0.0"), e.integer("PORT", 8080)), "HOST", "PORT")
	if v := e.str("GRPC_UDS", ""); v != "" {
		e.refuse("not implemented: Floodgate's gRPC listener is TCP (GRPC_HOST:GRPC_PORT); Envoy could not reach the socket it names", "GRPC_UDS")
	}
	e.warnIfSet("not served: Floodgate has no debug listener (Go's pprof is served on loopback only, with floodgate serve --pprof); the limits a feed pushed are at /debug/xds on HOST:PORT", "DEBUG_HOST", "DEBUG_PORT")
	e.warnIfSet("not implemented: connections are kept until the client closes them", "GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE")
	e.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour)
	e.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour)
	tlsVars := []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"}
	if !e.boolean("GRPC_SERVER_USE_TLS", false) {
		e.warnIfSet("not read without GRPC_SERVER_USE_TLS=true (envoyproxy/ratelimit does not read them either)", tlsVars...)
	} else {
		d.set("listen.tls.cert_file", e.str("GRPC_SERVER_TLS_CERT", ""), "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT")
		d.set("listen.tls.key_file", e.str("GRPC_SERVER_TLS_KEY", ""), "GRPC_SERVER_TLS_KEY")
		ca := e.str("GRPC_CLIENT_TLS_CACERT", "")
		if ca != "" {
			d.set("listen.tls.client_ca_file", ca, "GRPC_CLIENT_TLS_CACERT")
		}
		if san := e.str("GRPC_CLIENT_TLS_SAN", ""); san != "" {
			if ca == "" {
				// The peer verifies a client certificate only with a CA:
				// without one it asks for none, and the SAN is never checked.
				e.warn("not checked without GRPC_CLIENT_TLS_CACERT (envoyproxy/ratelimit asks for no client certificate then either)", "GRPC_CLIENT_TLS_SAN")
			} else {
				d.set("listen.tls.allowed_sans", []string{san}, "GRPC_CLIENT_TLS_SAN")
			}
		}
	}
	// Envoy Gateway sets this one for its rate limit Deployment; the peer
	// reads GRPC_CLIENT_TLS_CACERT, so neither requires client certificates.
	e.warnIfSet("not one of envoyproxy/ratelimit's variables (its client CA is GRPC_CLIENT_TLS_CACERT): Envoy Gateway sets it, and neither server asks Envoy for a client certificate because of it", "GRPC_SERVER_TLS_CA_CERT")
}

// logrus' levels (sirupsen/logrus ParseLevel), as zap's.
var logLevels = map[string]string{"panic": "error", "fatal": "error", "error": "error", "warn": "warn", "warning": "warn", "info": "info", "debug": "debug", "trace": "debug"}

func logging(e *env, d *doc) {
	lv := e.str("LOG_LEVEL", "WARN")
	if l, ok := logLevels[strings.ToLower(lv)]; ok {
		d.set("log.level", l, "LOG_LEVEL")
	} else {
		e.refuse(fmt.Sprintf("not a log level: %q (want trace, debug, info, warn, error, fatal or panic); envoyproxy/ratelimit does not start with it either", lv), "LOG_LEVEL")
	}
	format := "console" // the peer's text formatter
	if strings.ToLower(e.str("LOG_FORMAT", "text")) == "json" {
		format = "json"
	}
	d.set("log.format", format, "LOG_FORMAT")
}

func limits(e *env, d *doc) {
	runtimeVars := []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT"}
	xdsVars := []string{"CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "FORCE_START_WITHOUT_INITIAL_CONFIG"}
	switch t := e.str("CONFIG_TYPE", "FILE"); t {
	case "FILE":
		e.warnIfSet("not read with CONFIG_TYPE=FILE (envoyproxy/ratelimit does not read them either)", slices.DeleteFunc(slices.Clone(xdsVars), func(v string) bool { return v == "FORCE_START_WITHOUT_INITIAL_CONFIG" })...)
		e.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false) // the first file event is immediate: no wait either way
		runtimeDir(e, d)
	case "GRPC_XDS_SOTW":
		e.warnIfSet("not read with CONFIG_TYPE=GRPC_XDS_SOTW (envoyproxy/ratelimit does not read them either)", runtimeVars...)
		xds(e, d)
	default:
		e.refuse(fmt.Sprintf("%q: want FILE or GRPC_XDS_SOTW, as envoyproxy/ratelimit does", t), "CONFIG_TYPE")
	}
}

func xds(e *env, d *doc) {
	d.set("rls.xds.server", e.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"), "CONFIG_GRPC_XDS_SERVER_URL")
	d.set("rls.xds.node_id", e.str("CONFIG_GRPC_XDS_NODE_ID", "default"), "CONFIG_GRPC_XDS_NODE_ID")
	// The peer splits on commas, then on the first "=", and drops an entry
	// without one (src/provider/xds_grpc_sotw_provider.go, getClientNode).
	if md := e.str("CONFIG_GRPC_XDS_NODE_METADATA", ""); md != "" {
		m := map[string]string{}
		var dropped []string
		for _, entry := range strings.Split(md, ",") {
			if k, v, ok := strings.Cut(entry, "="); ok {
				m[k] = v
			} else {
				dropped = append(dropped, entry)
			}
		}
		if len(dropped) > 0 {
			e.warn(fmt.Sprintf("entries without \"=\" are not sent, as envoyproxy/ratelimit drops them: %q", dropped), "CONFIG_GRPC_XDS_NODE_METADATA")
		}
		if len(m) > 0 {
			d.set("rls.xds.node_metadata", m, "CONFIG_GRPC_XDS_NODE_METADATA")
		}
	}
	if h := e.strmap("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"); len(h) > 0 {
		d.set("rls.xds.headers", h, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
	}
	e.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 3*time.Second)
	// The peer hands it to a gRPC retry interceptor left at its default of
	// no retries: it has no effect there.
	e.warnIfSet("no effect (envoyproxy/ratelimit's retry interceptor makes no retry with it either); reconnection follows XDS_CLIENT_BACKOFF_*", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")
	tlsVars := []string{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"}
	if e.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		d.set("rls.xds.tls.ca_file", e.str("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""), "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT")
		d.set("rls.xds.tls.cert_file", e.str("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""), "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
		d.set("rls.xds.tls.key_file", e.str("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""), "CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
		if san := e.str("CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""); san != "" {
			d.set("rls.xds.tls.server_name", san, "CONFIG_GRPC_XDS_SERVER_TLS_SAN")
		}
	} else {
		e.warnIfSet("not read without CONFIG_GRPC_XDS_SERVER_USE_TLS=true (envoyproxy/ratelimit does not read them either)", tlsVars...)
	}
	// FORCE_START_WITHOUT_INITIAL_CONFIG=false (the default): the peer
	// waits for the first push before it opens any port.
	d.set("rls.xds.wait_for_first_push", !e.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false), "FORCE_START_WITHOUT_INITIAL_CONFIG")
	d.set("rls.xds.retry.initial", e.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second).String(), "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")
	d.set("rls.xds.retry.max", e.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60*time.Second).String(), "XDS_CLIENT_BACKOFF_MAX_INTERVAL")
	d.set("rls.xds.retry.factor", e.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", 0.5), "XDS_CLIENT_BACKOFF_RANDOM_FACTOR")
	d.set("rls.xds.retry.jitter", e.boolean("XDS_CLIENT_BACKOFF_JITTER", true), "XDS_CLIENT_BACKOFF_JITTER")
	if n := e.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0); n != 0 {
		d.set("rls.xds.max_message_bytes", n, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")
	}
}

func stats(e *env, d *doc) {
	statsd := []string{"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS"}
	// The peer sends statsd by default: say so even when nothing is set.
	if e.boolean("USE_STATSD", true) {
		statsd = append([]string{"USE_STATSD"}, statsd...)
		e.warn("statsd is not implemented: Floodgate's metrics are Prometheus', at /metrics on HOST:PORT (and PROMETHEUS_ADDR with USE_PROMETHEUS=true)", append([]string{"USE_STATSD"}, e.setOf(statsd[1:]...)...)...)
	} else {
		e.warnIfSet("statsd is not implemented: Floodgate's metrics are Prometheus', at /metrics on HOST:PORT", statsd...)
	}
	e.boolean("USE_DOG_STATSD", false)
	e.boolean("DISABLE_STATS", false)
	e.integer("STATSD_PORT", 8125)
	e.duration("STATS_FLUSH_INTERVAL", 10*time.Second)
	e.strmap("EXTRA_TAGS")
	promVars := []string{"PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"}
	if !e.boolean("USE_PROMETHEUS", false) {
		e.warnIfSet("not read without USE_PROMETHEUS=true (envoyproxy/ratelimit does not read them either); /metrics is on HOST:PORT", promVars...)
		return
	}
	addr := e.str("PROMETHEUS_ADDR", ":9090")
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		addr = net.JoinHostPort("0.0.0.0", port) // ":9090", as Go listens on it: every interface
	}
	if addr != d.stringAt("listen.admin") {
		d.set("listen.metrics", addr, "USE_PROMETHEUS", "PROMETHEUS_ADDR")
	}
	if p := e.str("PROMETHEUS_PATH", "/metrics"); p != "/metrics" {
		e.warn(fmt.Sprintf("not implemented: the metrics are at /metrics, not %s", p), "PROMETHEUS_PATH")
	}
	e.warnIfSet("not read: Floodgate's metrics have names of their own (docs/operations.md), not the statsd names this file maps", "PROMETHEUS_MAPPER_YAML")
	e.warnIfSet("not implemented: Floodgate's durations are in seconds", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS")
}

// stringAt is the string a setting holds ("" when unset).
func (d *doc) stringAt(path string) string {
	keys := strings.Split(path, ".")
	m := d.root
	for i, k := range keys {
		var next *yaml.Node
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == k {
				next = m.Content[j+1]
			}
		}
		if next == nil {
			return ""
		}
		if i == len(keys)-1 {
			return next.Value
		}
		m = next
	}
	return ""
}

// localCacheEntryBytes is about what one entry of the over-limit cache
// holds (its key's two strings, its bound, the map's share): the peer's
// LOCAL_CACHE_SIZE_IN_BYTES becomes this many entries per byte.
const localCacheEntryBytes = 256

func service(e *env, d *doc) {
	if e.boolean("SHADOW_MODE", false) {
		d.set("rls.shadow_mode", true, "SHADOW_MODE")
	}
	if e.boolean("QUOTA_MODE", false) {
		e.refuse("not implemented: quota mode answers over-limit requests OK with metadata; Floodgate would deny them", "QUOTA_MODE")
	}
	if e.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false) {
		d.set("rls.unhealthy_without_limits", true, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	}
	headerVars := []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"}
	if e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		d.set("rls.headers", true, "LIMIT_RESPONSE_HEADERS_ENABLED")
		e.warn("the answer carries draft-ietf-httpapi-ratelimit-headers' RateLimit and RateLimit-Policy fields (rls.headers), not RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset; their names are not read", append([]string{"LIMIT_RESPONSE_HEADERS_ENABLED"}, e.setOf(headerVars...)...)...)
	} else {
		e.warnIfSet("not read without LIMIT_RESPONSE_HEADERS_ENABLED=true (envoyproxy/ratelimit does not read them either)", headerVars...)
	}
	if e.isSet("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") && !e.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false) {
		e.warn("false is not implemented: Floodgate never charges a denied request (a token bucket takes nothing from a request it denies)", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	}
	if n := e.integer("LOCAL_CACHE_SIZE_IN_BYTES", 0); e.isSet("LOCAL_CACHE_SIZE_IN_BYTES") {
		d.set("store.over_limit_cache.max_entries", n/localCacheEntryBytes, "LOCAL_CACHE_SIZE_IN_BYTES")
	}
	e.warnIfSet("not implemented: a bucket's key expires when the bucket is full again", "EXPIRATION_JITTER_MAX_SECONDS")
	e.integer("EXPIRATION_JITTER_MAX_SECONDS", 300)
	e.warnIfSet("not implemented: it only counted near-limit requests in statsd", "NEAR_LIMIT_RATIO")
	e.float("NEAR_LIMIT_RATIO", 0.8)
	if e.boolean("RESPONSE_DYNAMIC_METADATA", false) {
		e.warn("not implemented: the answer carries no dynamic metadata", "RESPONSE_DYNAMIC_METADATA")
	}
	if e.boolean("MERGE_DOMAIN_CONFIG", false) {
		e.warn("not implemented: a domain defined in two files (or two pushed resources) is refused, and the configuration with it", "MERGE_DOMAIN_CONFIG")
	}
	tracing := []string{"TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"}
	if e.boolean("TRACING_ENABLED", false) {
		e.warn("OpenTelemetry tracing is not implemented", append([]string{"TRACING_ENABLED"}, e.setOf(tracing...)...)...)
	} else {
		e.warnIfSet("not read without TRACING_ENABLED=true (envoyproxy/ratelimit does not read them either)", tracing...)
	}
	e.float("TRACING_SAMPLING_RATE", 1)
}

func floodgate(e *env, d *doc, environ []string) {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "FLOODGATE_") && !slices.Contains(FloodgateVariables, name) && name != redisPasswordVar {
			e.refuse(fmt.Sprintf("not one of Floodgate's variables (%s): a misspelt one would change what is limited", strings.Join(FloodgateVariables, ", ")), name)
		}
	}
	if v := e.str(VarBurst, ""); v != "" {
		bursts := map[string]int64{}
		for _, item := range strings.Split(v, ",") {
			k, n, ok := strings.Cut(strings.TrimSpace(item), "=")
			c, err := strconv.ParseInt(n, 10, 64)
			if !ok || k == "" || err != nil {
				e.refuse(fmt.Sprintf("%q: want LIMIT=CAPACITY items separated by commas, a limit named by its domain then each level's key or key_value joined by dots (edge.api_key=20)", item), VarBurst)
				continue
			}
			bursts[k] = c
		}
		d.set("rls.burst", bursts, VarBurst)
	}
	if f := e.str(VarHashSecretFile, ""); f != "" {
		d.set("identity.hash_secret_file", f, VarHashSecretFile)
	}
	if e.isSet(VarHashSecret) {
		d.set("identity.hash_secret_env", VarHashSecret, VarHashSecret)
	}
	switch v := e.str(VarOnFailure, "error"); v {
	case "error":
		d.set("rls.on_failure", "error", VarOnFailure)
	case "allow", "deny", "local":
		d.set("rls.on_failure", "store", VarOnFailure)
		d.set("store.on_failure", v, VarOnFailure)
	default:
		e.refuse(fmt.Sprintf("%q: want error, allow, deny or local", v), VarOnFailure)
	}
	switch v := e.str(VarAdminDebug, config.AdminDebugLoopback); v {
	case config.AdminDebugLoopback, config.AdminDebugAll:
		d.set("listen.admin_debug", v, VarAdminDebug)
	default:
		e.refuse(fmt.Sprintf("%q: want loopback or all", v), VarAdminDebug)
	}
}

// unimplemented reads the variables of features Floodgate does not have
// and whose absence changes no decision, or that only matter with another
// backend.
func unimplemented(e *env) {
	memcache := []string{"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
		"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"}
	e.warnIfSet("not read: the backend is Redis (envoyproxy/ratelimit does not read them with BACKEND_TYPE=redis either)", memcache...)
	e.warnIfSet("not implemented: Floodgate has no statsd output", "USE_DOG_STATSD_MOGRIFIERS")
}

// maxTimeout and maxDialTimeout bound REDIS_TIMEOUT as Floodgate bounds
// store.redis.timeout and dial_timeout.
const (
	maxTimeout     = 10 * time.Second
	maxDialTimeout = time.Minute
)

func redis(e *env, d *doc, res *Result) {
	if !redisBackend(e, d) {
		return
	}
	redisAuth(e, d, res, redisAddresses(e, d))
	d.set("store.redis.pool_size", e.integer("REDIS_POOL_SIZE", 10), "REDIS_POOL_SIZE")
	redisTLS(e, d)
	redisBatches(e, d)
	redisUnsupported(e)
	if p := e.str("CACHE_KEY_PREFIX", ""); p != "" {
		d.set("store.redis.prefix", p, "CACHE_KEY_PREFIX")
	}
}

// redisBackend reads BACKEND_TYPE and REDIS_SOCKET_TYPE: false when the
// backend is not Redis, and nothing more of Redis is read.
func redisBackend(e *env, d *doc) bool {
	switch b := e.str("BACKEND_TYPE", "redis"); b {
	case "redis", "":
	case "memcache":
		e.refuse("memcache is not implemented: Floodgate keeps its buckets in Redis", "BACKEND_TYPE")
		return false
	default:
		e.refuse(fmt.Sprintf("%q: want redis (memcache is not implemented)", b), "BACKEND_TYPE")
		return false
	}
	d.set("store.backend", "redis", "BACKEND_TYPE")
	switch st := e.str("REDIS_SOCKET_TYPE", "unix"); st {
	case "tcp", "tcp4", "tcp6":
	case "unix":
		e.refuse("unix (the default) is not implemented: Floodgate connects to Redis over TCP; set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port", "REDIS_SOCKET_TYPE")
	default:
		e.refuse(fmt.Sprintf("%q: want tcp", st), "REDIS_SOCKET_TYPE")
	}
	return true
}

// credentials are a user and password, either possibly empty.
type credentials struct{ user, pass string }

// redisAddresses reads REDIS_TYPE, REDIS_URL and REDIS_SENTINEL_AUTH into
// the addresses, the kind of deployment and the Sentinels' password, and
// returns the credentials the URLs carry.
func redisAddresses(e *env, d *doc) (fromURL credentials) {
	typ := strings.ToLower(e.str("REDIS_TYPE", "SINGLE"))
	raw := e.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")
	var addrs []string
	parse := func(a string) string {
		// radix, the peer's client, reads a redis:// URL's user, password
		// and database (radix v4 conn.go, parseRedisURL).
		if !strings.HasPrefix(a, "redis://") {
			return a
		}
		u, err := url.Parse(a)
		if err != nil {
			e.refuse(fmt.Sprintf("%q is not a URL: %v", a, err), "REDIS_URL")
			return a
		}
		q := u.Query()
		user, pass := q.Get("username"), q.Get("password")
		if n := u.User.Username(); n != "" {
			user = n
		}
		if p, ok := u.User.Password(); ok {
			pass = p
		}
		if (user != "" || pass != "") && fromURL != (credentials{}) && fromURL != (credentials{user, pass}) {
			e.refuse("the URLs carry different credentials: Floodgate authenticates every node alike", "REDIS_URL")
		}
		if user != "" || pass != "" {
			fromURL.user, fromURL.pass = user, pass
		}
		db := q.Get("db")
		if u.Path != "" && u.Path != "/" {
			db = u.Path[1:]
		}
		if db != "" && db != "0" {
			e.warn(fmt.Sprintf("database %s is not selected: Floodgate keeps its buckets in database 0, under keys of its own", db), "REDIS_URL")
		}
		return u.Host
	}
	switch typ {
	case "single":
		if strings.Contains(raw, ",") {
			e.refuse("one host:port with REDIS_TYPE=single (got a list)", "REDIS_URL")
		}
		addrs = []string{parse(raw)}
	case "cluster":
		for _, a := range strings.Split(raw, ",") {
			addrs = append(addrs, parse(a))
		}
		d.set("store.redis.cluster", true, "REDIS_TYPE")
	case "sentinel":
		parts := strings.Split(raw, ",")
		if len(parts) < 2 {
			e.refuse("with REDIS_TYPE=sentinel: want the master's name, then the Sentinels: <master>,<sentinel1>,...", "REDIS_URL")
			break
		}
		d.set("store.redis.sentinel_master", parts[0], "REDIS_TYPE", "REDIS_URL")
		for _, a := range parts[1:] {
			addrs = append(addrs, parse(a))
		}
		if sa := e.str("REDIS_SENTINEL_AUTH", ""); sa != "" {
			if strings.Contains(sa, ":") {
				e.refuse("user:password is not implemented for the Sentinels: Floodgate authenticates to them with a password alone", "REDIS_SENTINEL_AUTH")
			} else {
				d.set("store.redis.sentinel_password_env", "REDIS_SENTINEL_AUTH", "REDIS_SENTINEL_AUTH")
			}
		}
	default:
		e.refuse(fmt.Sprintf("%q: want single, cluster or sentinel", typ), "REDIS_TYPE")
	}
	if typ != "sentinel" {
		e.warnIfSet("not read without REDIS_TYPE=sentinel (envoyproxy/ratelimit does not read it either)", "REDIS_SENTINEL_AUTH")
	}
	if len(addrs) > 0 {
		d.set("store.redis.addresses", addrs, "REDIS_URL")
	}
	return fromURL
}

// redisAuth reads REDIS_AUTH, which radix takes before the URLs'
// credentials (fromURL).
func redisAuth(e *env, d *doc, res *Result, fromURL credentials) {
	auth := e.str("REDIS_AUTH", "")
	switch user, pass, hasUser := strings.Cut(auth, ":"); {
	case auth != "" && hasUser:
		d.set("store.redis.username", user, "REDIS_AUTH")
		res.Env[redisPasswordVar] = pass
		d.set("store.redis.password_env", redisPasswordVar, "REDIS_AUTH")
	case auth != "":
		d.set("store.redis.password_env", "REDIS_AUTH", "REDIS_AUTH")
	case fromURL.pass != "" || fromURL.user != "":
		if fromURL.user != "" {
			d.set("store.redis.username", fromURL.user, "REDIS_URL")
		}
		res.Env[redisPasswordVar] = fromURL.pass
		d.set("store.redis.password_env", redisPasswordVar, "REDIS_URL")
	}
}

// redisTLS reads REDIS_TLS and the files it names.
func redisTLS(e *env, d *doc) {
	tlsVars := []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"}
	if e.boolean("REDIS_TLS", false) {
		d.set("store.redis.tls", map[string]string{}, "REDIS_TLS")
		for v, key := range map[string]string{"REDIS_TLS_CLIENT_CERT": "cert_file", "REDIS_TLS_CLIENT_KEY": "key_file", "REDIS_TLS_CACERT": "ca_file"} {
			if f := e.str(v, ""); f != "" {
				d.set("store.redis.tls."+key, f, v)
			}
		}
		if e.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
			e.refuse("not implemented: Floodgate verifies the Redis server's certificate and its name; without the name check it could not connect to a server whose certificate does not name the host dialled", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
		}
	} else {
		e.warnIfSet("not read without REDIS_TLS=true (envoyproxy/ratelimit does not read them either)", tlsVars...)
	}
}

// redisBatches reads what bounds a batch of decisions: the pipeline's
// window and size, and REDIS_TIMEOUT.
func redisBatches(e *env, d *doc) {
	if e.isSet("REDIS_PIPELINE_WINDOW") {
		w := e.duration("REDIS_PIPELINE_WINDOW", 0)
		if w > config.MaxPipelineWait {
			e.warn(fmt.Sprintf("%v is more than a batch of Floodgate's may wait: it waits %v", w, config.MaxPipelineWait), "REDIS_PIPELINE_WINDOW")
			w = config.MaxPipelineWait
		}
		d.set("store.redis.pipeline_wait", max(w, 0).String(), "REDIS_PIPELINE_WINDOW")
	}
	if n := e.integer("REDIS_PIPELINE_LIMIT", 0); n > 0 {
		if n > config.MaxPipelineBatch {
			e.warn(fmt.Sprintf("%d: a batch holds at most %d decisions", n, config.MaxPipelineBatch), "REDIS_PIPELINE_LIMIT")
			n = config.MaxPipelineBatch
		}
		d.set("store.redis.pipeline_max_batch", n, "REDIS_PIPELINE_LIMIT")
	}
	e.warnIfSet("not implemented: Floodgate's pipelines to a Cluster's nodes are sent in parallel, one per node", "REDIS_CLUSTER_PIPELINE_PARALLELISM")
	e.integer("REDIS_CLUSTER_PIPELINE_PARALLELISM", 1)
	if e.isSet("REDIS_TIMEOUT") {
		t := e.duration("REDIS_TIMEOUT", 10*time.Second)
		if t <= 0 {
			e.warn("0 (no timeout) is not implemented: each decision's Redis work is bounded by store.redis.timeout's default", "REDIS_TIMEOUT")
		} else {
			d.set("store.redis.timeout", min(t, maxTimeout).String(), "REDIS_TIMEOUT")
			d.set("store.redis.dial_timeout", min(t, maxDialTimeout).String(), "REDIS_TIMEOUT")
			if t > maxTimeout {
				e.warn(fmt.Sprintf("%v: a decision waits at most %v for Redis", t, maxTimeout), "REDIS_TIMEOUT")
			}
		}
	}
}

// redisUnsupported says which of the peer's Redis settings Floodgate
// refuses or does not implement, and why.
func redisUnsupported(e *env) {
	switch b := strings.ToUpper(e.str("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT")); b {
	case "CREATE", "ERROR":
		e.refuse(b+" is not supported (by envoyproxy/ratelimit either, which refuses to start with it): a decision waits for a pooled connection within store.redis.timeout", "REDIS_POOL_ON_EMPTY_BEHAVIOR")
	}
	if e.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false) {
		e.warn("not implemented: /healthcheck stays healthy while Redis is unreachable (the failure mode answers, and a limiter failing its probes in an outage would take every replica away at once); /readyz?exact=1 on HOST:PORT says whether decisions are exact", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
	}
	e.warnIfSet("not implemented: Floodgate starts without waiting for Redis, answering by its failure mode until Redis is reachable", "REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME")
	perSecond := []string{"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH",
		"REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT",
		"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR"}
	if e.boolean("REDIS_PERSECOND", false) {
		e.warn("a second Redis for per-second limits is not implemented: every bucket is in the Redis of REDIS_URL", append([]string{"REDIS_PERSECOND"}, e.setOf(perSecond...)...)...)
	} else {
		e.warnIfSet("not read without REDIS_PERSECOND=true (envoyproxy/ratelimit does not read them either)", perSecond...)
	}
}

func runtimeDir(e *env, d *doc) {
	root := e.str("RUNTIME_ROOT", "/srv/runtime_data/current")
	sub := e.str("RUNTIME_SUBDIRECTORY", "")
	app := e.str("RUNTIME_APPDIRECTORY", "config")
	ignoreDot := e.boolean("RUNTIME_IGNOREDOTFILES", false)
	watchRoot := e.boolean("RUNTIME_WATCH_ROOT", true)
	vars := []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}
	// goruntime's loader loads nothing, with a warning, when the
	// directory it walks below is "" (lyft/goruntime loader.New2).
	if (watchRoot && sub == "") || (!watchRoot && app == "") {
		missing := "RUNTIME_SUBDIRECTORY"
		if !watchRoot {
			missing = "RUNTIME_APPDIRECTORY"
		}
		e.refuse("is empty: envoyproxy/ratelimit then loads no configuration at all (goruntime's nil loader) and limits nothing; set it", missing)
		return
	}
	dir := filepath.Join(root, sub, app)
	d.set("rls.config", dir, vars...)
	for _, n := range checkRuntime(root, sub, app, ignoreDot, watchRoot) {
		if n.refuse {
			e.refuse(n.msg, append(vars, "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT")...)
		} else {
			e.warn(n.msg, append(vars, "RUNTIME_IGNOREDOTFILES")...)
		}
	}
}

// asList is errors.As for a fielderr.List.
func asList(err error, list *fielderr.List) bool {
	l, ok := err.(fielderr.List)
	if ok {
		*list = l
	}
	return ok
}
