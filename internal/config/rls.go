package config

import (
	"net"
	"sort"
	"time"
)

// RLS serves Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService) on listen.grpc beside
// Check, from limits written in envoyproxy/ratelimit's own format
// (docs/ratelimit.md), which internal/door/ratelimit/rls reads: from files (Config) or
// pushed by an xDS server (XDS), the way envoyproxy/ratelimit takes them
// from Envoy Gateway.
type RLS struct {
	// Config names a file, or a directory of *.yaml files, in
	// envoyproxy/ratelimit's format, read unchanged; "" serves no rate
	// limit service unless XDS is set. Reloaded with the configuration.
	Config string `yaml:"config"`
	// XDS takes the limits from an xDS management server instead of
	// Config: RateLimitConfig resources, each read as a file of Config
	// would be.
	XDS *XDS `yaml:"xds"`
	// OnFailure is what a request answers when the store cannot decide:
	// "store" (the default) as store.on_failure says; "error" an RPC error
	// (UNAVAILABLE), so that the failure_mode_deny of Envoy's rate limit
	// filter decides. A service whose limits have not been pushed yet
	// answers the same way.
	OnFailure string `yaml:"on_failure"`
	// Headers adds the draft-ietf-httpapi-ratelimit-headers RateLimit and
	// RateLimit-Policy fields to every answer (off: Envoy's own
	// enable_x_ratelimit_headers builds X-RateLimit-* from the statuses).
	Headers bool `yaml:"headers"`
	// Burst gives a limit a capacity other than its requests_per_unit,
	// keeping its rate: the key is the limit's place in the tree, its
	// domain then each level's key or key_value joined by dots
	// (edge.generic_key_api.api_key), so the shared YAML stays as
	// envoyproxy/ratelimit reads it.
	Burst map[string]int64 `yaml:"burst"`
	// ShadowMode answers every request OK, its statuses still saying which
	// descriptors are over their limit, so that logs and metrics show what
	// would be denied (envoyproxy/ratelimit's SHADOW_MODE).
	ShadowMode bool `yaml:"shadow_mode"`
	// UnhealthyWithoutLimits reports the service unhealthy (/healthcheck
	// 500, its grpc.health.v1 status NOT_SERVING) while the limits in use
	// name no domain (envoyproxy/ratelimit's
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	UnhealthyWithoutLimits bool `yaml:"unhealthy_without_limits"`
	// Lease "off" (the default) or "auto": a replica that sees one of the
	// limits' buckets hot decides it from a lease of its tokens
	// (limiter/lease), never admitting more than the bucket allows, as a
	// policy's lease: auto. Shadow limits are never leased.
	Lease string `yaml:"lease"`
	// Windows is how a limit counts: "token_bucket" (the default: a bucket
	// of requests_per_unit refilled over its unit) or "fixed":
	// envoyproxy/ratelimit's own fixed windows, aligned to the epoch (a
	// month is 30 days, a year 365), every request counted against every
	// descriptor, as its binary counts.
	Windows string `yaml:"windows"`
}

// XDS is an xDS management server that pushes the rate limit service's
// limits, state of the world over ADS (the aggregated discovery service),
// as ratelimit.config.ratelimit.v3.RateLimitConfig resources: what Envoy
// Gateway serves its rate limit Deployment. Read at start only.
type XDS struct {
	// Server is the management server's host:port.
	Server string `yaml:"server"`
	// NodeID is the node the server keeps the limits for (Envoy Gateway:
	// envoy-ratelimit).
	NodeID string `yaml:"node_id"`
	// NodeMetadata is sent as the node's metadata (string values).
	NodeMetadata map[string]string `yaml:"node_metadata"`
	// Headers are sent as gRPC metadata on the stream.
	Headers map[string]string `yaml:"headers"`
	// TLS, when set, connects over TLS, with a client certificate when
	// cert_file and key_file are given (mutual TLS). The files are read
	// again at every connection, so a rotated certificate is used from the
	// next one on.
	TLS *XDSTLS `yaml:"tls"`
	// WaitForFirstPush opens no listener until the first push is accepted
	// (envoyproxy/ratelimit without FORCE_START_WITHOUT_INITIAL_CONFIG).
	// Off, the service serves at once, answering by rls.on_failure until
	// then, and reports its gRPC health NOT_SERVING.
	WaitForFirstPush bool `yaml:"wait_for_first_push"`
	// MaxMessageBytes bounds one push (default DefaultXDSMaxMessageBytes).
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// Retry is the wait before connecting again after the stream ends or
	// a connection fails.
	Retry XDSRetry `yaml:"retry"`
}

// XDSTLS is the TLS of the connection to the management server. Files are
// PEM.
type XDSTLS struct {
	CAFile   string `yaml:"ca_file"`   // trust these CAs instead of the system's
	CertFile string `yaml:"cert_file"` // client certificate, for a server that requires one
	KeyFile  string `yaml:"key_file"`  // its key
	// ServerName is the name the server's certificate must carry (default:
	// the host of server).
	ServerName string `yaml:"server_name"`
}

// XDSRetry is envoyproxy/ratelimit's backoff: the n-th wait in a row is
// initial × factor^n, bounded to [initial, max]; with jitter, a uniformly
// random duration between initial and that.
type XDSRetry struct {
	Initial Duration `yaml:"initial"` // default DefaultXDSRetryInitial
	Max     Duration `yaml:"max"`     // default DefaultXDSRetryMax
	Factor  *float64 `yaml:"factor"`  // default 2
	Jitter  *bool    `yaml:"jitter"`  // default true
}

// Defaults of rls.xds.
const (
	DefaultXDSMaxMessageBytes = 4 << 20 // gRPC's own default
	MaxXDSMaxMessageBytes     = 256 << 20
	DefaultXDSRetryInitial    = time.Second
	DefaultXDSRetryMax        = 30 * time.Second
	DefaultXDSRetryFactor     = 2.0
)

// Limits reports whether r configures the rate limit service's limits,
// from files or from an xDS server.
func (r *RLS) Limits() bool { return r.Config != "" || r.XDS != nil }

func (v *validator) checkRLS(r *RLS) {
	v.oneOf("rls.on_failure", &r.OnFailure, "store", "store", "error")
	v.oneOf("rls.lease", &r.Lease, "off", "off", "auto")
	v.oneOf("rls.windows", &r.Windows, "token_bucket", "token_bucket", "fixed")
	if r.Windows == "fixed" && r.Lease == "auto" {
		v.at("rls.lease", "auto leases token buckets; rls.windows: fixed counts in Redis' windows: keep one")
	}
	if r.Windows == "fixed" && len(r.Burst) > 0 {
		v.at("rls.burst", "sets a token bucket's capacity; rls.windows: fixed counts requests_per_unit a window: keep one")
	}
	keys := make([]string, 0, len(r.Burst))
	for k := range r.Burst {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if n := r.Burst[k]; n < 1 || n > 1<<32 {
			v.at("rls.burst."+k, "must be a whole number of requests from 1 to 4294967296 (got %d)", n)
		}
	}
	if r.Config != "" && r.XDS != nil {
		v.at("rls.xds", "and rls.config both name the limits: keep one (files, or an xDS server)")
	}
	if !r.Limits() && (len(r.Burst) > 0 || r.Headers || r.OnFailure != "store" || r.ShadowMode || r.UnhealthyWithoutLimits || r.Lease != "off") {
		v.at("rls", "config or xds is required: it names the limits (a file or directory in envoyproxy/ratelimit's format, or an xDS server) the other rls settings apply to")
	}
	if x := r.XDS; x != nil {
		v.checkXDS(x)
	}
}

func (v *validator) checkXDS(x *XDS) {
	if x.Server == "" {
		v.at("rls.xds.server", "is required: the management server's host:port, e.g. envoy-gateway:18001")
	} else if host, _, err := net.SplitHostPort(x.Server); err != nil || host == "" {
		v.at("rls.xds.server", "must be host:port (got %q)", x.Server)
	}
	if x.NodeID == "" {
		v.at("rls.xds.node_id", "is required: the node the server keeps the limits for (Envoy Gateway's is envoy-ratelimit)")
	}
	if t := x.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		v.at("rls.xds.tls", "cert_file and key_file go together (got cert_file %q, key_file %q)", t.CertFile, t.KeyFile)
	}
	v.intIn("rls.xds.max_message_bytes", &x.MaxMessageBytes, DefaultXDSMaxMessageBytes, 4096, MaxXDSMaxMessageBytes)
	r := &x.Retry
	v.durationIn("rls.xds.retry.initial", &r.Initial, DefaultXDSRetryInitial, 10*time.Millisecond, 10*time.Minute)
	v.durationIn("rls.xds.retry.max", &r.Max, DefaultXDSRetryMax, 10*time.Millisecond, time.Hour)
	if r.Max.Duration < r.Initial.Duration {
		v.at("rls.xds.retry.max", "must be at least retry.initial (%v; got %v)", r.Initial.Duration, r.Max.Duration)
	}
	if r.Factor == nil {
		f := DefaultXDSRetryFactor
		r.Factor = &f
	} else if f := *r.Factor; !(f > 0 && f <= 100) {
		v.at("rls.xds.retry.factor", "must be a number in (0, 100], e.g. 2 (got %v; below 1 every wait is retry.initial)", f)
	}
	if r.Jitter == nil {
		on := true
		r.Jitter = &on
	}
}
