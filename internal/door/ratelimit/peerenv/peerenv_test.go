package peerenv

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/peertest"
)

// environ is an environment for Build: lookup and os.Environ's form.
type environ map[string]string

func (e environ) lookup(k string) (string, bool) { v, ok := e[k]; return v, ok }
func (e environ) list() []string {
	var out []string
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	return out
}

func (e environ) build(t *testing.T) (*Result, error) {
	t.Helper()
	return Build(e.lookup, e.list())
}

// load builds e and loads the configuration as ratelimit mode does, the
// secrets split out set in the process.
func (e environ) load(t *testing.T) (*Result, *door.Config) {
	t.Helper()
	r, err := e.build(t)
	if err != nil {
		t.Fatalf("refused:\n%v", err)
	}
	for k, v := range r.Env {
		t.Setenv(k, v)
	}
	c, err := doors.Parse(Source, r.YAML)
	if err != nil {
		t.Fatalf("the configuration built does not parse: %v\n%s\n%s", r.Explain(err), err, r.YAML)
	}
	return r, c
}

func noteFor(notes []Note, v string) (Note, bool) {
	for _, n := range notes {
		if slices.Contains(n.Vars, v) {
			return n, true
		}
	}
	return Note{}, false
}

// settingsNames are the variables envoyproxy/ratelimit's settings read, from
// its src/settings/settings.go in the module cache.
func settingsNames(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(peertest.Module(t, peertest.Ratelimit), "src", "settings", "settings.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`envconfig:"([A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		out = append(out, m[1])
	}
	if len(out) < 100 {
		t.Fatalf("%d variables read from settings.go", len(out))
	}
	return out
}

// TestEveryPeerVariableIsRead: every variable of envoyproxy/ratelimit's
// settings (read from its source in the module cache) is in Variables, and
// Build looks every one of Variables up, in either configuration type.
func TestEveryPeerVariableIsRead(t *testing.T) {
	for _, n := range settingsNames(t) {
		if !slices.Contains(Variables, n) {
			t.Errorf("%s is one of envoyproxy/ratelimit's variables and not in Variables", n)
		}
	}
	for _, typ := range []string{"FILE", "GRPC_XDS_SOTW"} {
		e := environ{"CONFIG_TYPE": typ}
		_, read := build(e.lookup, e.list())
		if u := read.unread(Variables); len(u) > 0 {
			t.Errorf("CONFIG_TYPE=%s: Build does not read %v", typ, u)
		}
	}
}

// TestEnvoyGatewaysDeploymentsRunAsTheyAre: every rate limit Deployment of
// Envoy Gateway's own goldens gives an environment Floodgate runs with,
// unchanged: limits over xDS from envoy-gateway:18001 as node
// envoy-ratelimit with the client certificate, serving at once
// (FORCE_START_WITHOUT_INITIAL_CONFIG=true), the gRPC listener on 8081 with
// TLS, /healthcheck on 8080, the metrics on 19001 when Prometheus is on,
// and Redis as the Deployment names it; what Floodgate does not implement
// there (statsd, the metric name mapper, tracing, EG's own
// GRPC_SERVER_TLS_CA_CERT) is warned about, never refused.
func TestEnvoyGatewaysDeploymentsRunAsTheyAre(t *testing.T) {
	for _, f := range peertest.GatewayDeployments(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			e := environ(peertest.GatewayEnv(t, f))
			if e["REDIS_TYPE"] == "sentinel" && !strings.Contains(e["REDIS_URL"], ",") {
				// This golden patches REDIS_TYPE=sentinel over a single
				// address: envoyproxy/ratelimit refuses it at start
				// (src/redis/driver_impl.go, newClientImpl: "Expected master
				// name and a list of urls"), and so does Floodgate.
				_, err := e.build(t)
				if n, ok := noteFor(refusals(err), "REDIS_URL"); !ok || !strings.Contains(n.Msg, "want the master's name") {
					t.Errorf("sentinel over one address: %v", err)
				}
				return
			}
			r, c := e.load(t)
			x := c.RLS.XDS
			if x == nil || x.Server != "envoy-gateway:18001" || x.NodeID != "envoy-ratelimit" || x.WaitForFirstPush ||
				x.TLS == nil || x.TLS.CertFile != "/certs/tls.crt" || x.TLS.KeyFile != "/certs/tls.key" || x.TLS.CAFile != "/certs/ca.crt" {
				t.Errorf("rls.xds %+v (tls %+v)", x, x.TLS)
			}
			if c.Listen.GRPC != "0.0.0.0:8081" || c.Listen.Admin != "0.0.0.0:8080" || c.Listen.TLS == nil || c.Listen.TLS.CertFile != "/certs/tls.crt" || c.Listen.TLS.ClientCAFile != "" {
				t.Errorf("listen %+v", c.Listen)
			}
			if want := map[bool]string{true: "0.0.0.0:19001"}[e["USE_PROMETHEUS"] == "true"]; c.Listen.Metrics != want {
				t.Errorf("listen.metrics %q, want %q", c.Listen.Metrics, want)
			}
			if c.Store.Backend != "redis" || len(c.Store.Redis.Addresses) != 1 || c.Store.Redis.Addresses[0] != e["REDIS_URL"] {
				t.Errorf("store %+v", c.Store)
			}
			if (e["REDIS_TLS"] == "true") != (c.Store.Redis.TLS != nil) || (e["REDIS_AUTH"] != "") != (c.Store.Redis.PasswordEnv == "REDIS_AUTH") {
				t.Errorf("redis tls %+v, password from %q", c.Store.Redis.TLS, c.Store.Redis.PasswordEnv)
			}
			if c.RLS.OnFailure != "error" || c.Log.Level != "info" {
				t.Errorf("rls.on_failure %q, log.level %q", c.RLS.OnFailure, c.Log.Level)
			}
			if _, ok := noteFor(r.Warnings, "GRPC_SERVER_TLS_CA_CERT"); !ok {
				t.Error("GRPC_SERVER_TLS_CA_CERT is not named")
			}
			if n, ok := noteFor(r.Warnings, "RUNTIME_ROOT"); !ok || !strings.Contains(n.Msg, "not read with CONFIG_TYPE=GRPC_XDS_SOTW") {
				t.Errorf("RUNTIME_*: %v", n)
			}
			for _, v := range []string{"PROMETHEUS_MAPPER_YAML", "TRACING_ENABLED"} {
				if _, set := e[v]; set {
					if _, ok := noteFor(r.Warnings, v); !ok {
						t.Errorf("%s is set and not named", v)
					}
				}
			}
		})
	}
}

func refusals(err error) Refused {
	var r Refused
	errors.As(err, &r)
	return r
}

// TestWhatIsRefused: each variable whose absence would change what is
// limited is refused, named, with why; a value envoyproxy/ratelimit cannot
// parse is refused as it refuses it.
func TestWhatIsRefused(t *testing.T) {
	base := environ{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "CONFIG_TYPE": "GRPC_XDS_SOTW"}
	with := func(kv ...string) environ {
		e := environ{}
		for k, v := range base {
			e[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			e[kv[i]] = kv[i+1]
		}
		return e
	}
	for _, tc := range []struct {
		env      environ
		variable string
		want     string
	}{
		{environ{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, "REDIS_SOCKET_TYPE", "unix (the default) is not implemented"},
		{with("GRPC_UDS", "/tmp/rl.sock"), "GRPC_UDS", "not implemented"},
		{with("BACKEND_TYPE", "memcache"), "BACKEND_TYPE", "memcache is not implemented"},
		{with("QUOTA_MODE", "true"), "QUOTA_MODE", "Floodgate would deny them"},
		{with("REDIS_TLS", "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"), "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "not implemented"},
		{with("REDIS_TYPE", "sentinel", "REDIS_URL", "mymaster,127.0.0.1:26379", "REDIS_SENTINEL_AUTH", "u:p"), "REDIS_SENTINEL_AUTH", "user:password is not implemented"},
		{with("REDIS_TYPE", "sentinel", "REDIS_URL", "127.0.0.1:26379"), "REDIS_URL", "want the master's name"},
		{with("REDIS_TYPE", "ring"), "REDIS_TYPE", `"ring": want single, cluster or sentinel`},
		{with("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE"), "REDIS_POOL_ON_EMPTY_BEHAVIOR", "envoyproxy/ratelimit either"},
		{with("FLOODGATE_BRUST", "edge.k=3"), "FLOODGATE_BRUST", "not one of Floodgate's variables"},
		{with("FLOODGATE_BURST", "edge.k:3"), "FLOODGATE_BURST", "want LIMIT=CAPACITY"},
		{with("FLOODGATE_ON_FAILURE", "open"), "FLOODGATE_ON_FAILURE", "want error, allow, deny or local"},
		{with("GRPC_SERVER_USE_TLS", "yes"), "GRPC_SERVER_USE_TLS", `want true or false (got "yes")`},
		{with("GRPC_PORT", ""), "GRPC_PORT", `want a whole number (got "")`},
		{with("LOG_LEVEL", "verbose"), "LOG_LEVEL", "not a log level"},
		{with("CONFIG_TYPE", "CONSUL"), "CONFIG_TYPE", "want FILE or GRPC_XDS_SOTW"},
		{with("CONFIG_TYPE", "FILE"), "RUNTIME_SUBDIRECTORY", "loads no configuration at all"},
		{with("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "a=b"), "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "invalid map item"},
	} {
		_, err := tc.env.build(t)
		var refused Refused
		if !errors.As(err, &refused) {
			t.Errorf("%s: not refused (%v)", tc.variable, err)
			continue
		}
		if n, ok := noteFor(refused, tc.variable); !ok || !strings.Contains(n.Msg, tc.want) {
			t.Errorf("%s: refused with\n%v\nwant a note on it saying %q", tc.variable, err, tc.want)
		}
	}
}

// TestRedisAsThePeerReadsIt: REDIS_URL, REDIS_TYPE and REDIS_AUTH as radix
// reads them: user:password split (the password kept out of the file),
// redis:// URLs with credentials and a database, cluster seeds, Sentinels
// after the master's name; the pool, pipeline, timeout and prefix.
func TestRedisAsThePeerReadsIt(t *testing.T) {
	r, c := environ{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "REDIS_AUTH": "alice:s3cret", "REDIS_POOL_SIZE": "7",
		"REDIS_PIPELINE_WINDOW": "300us", "REDIS_PIPELINE_LIMIT": "64", "REDIS_TIMEOUT": "2s", "CACHE_KEY_PREFIX": "rl_", "RUNTIME_SUBDIRECTORY": "ratelimit",
		"RUNTIME_ROOT": t.TempDir(), "RUNTIME_WATCH_ROOT": "false"}.load(t)
	ro := c.Store.Redis
	if ro.Username != "alice" || ro.PasswordEnv != redisPasswordVar || r.Env[redisPasswordVar] != "s3cret" || strings.Contains(string(r.YAML), "s3cret") {
		t.Errorf("user:password: username %q, password from %q = %q; the file holds the secret: %v", ro.Username, ro.PasswordEnv, r.Env[redisPasswordVar], strings.Contains(string(r.YAML), "s3cret"))
	}
	if ro.PoolSize != 7 || ro.PipelineWait.Duration.String() != "300µs" || ro.PipelineMaxBatch != 64 || ro.Timeout.String() != "2s" || ro.DialTimeout.String() != "2s" || ro.Prefix != "rl_" {
		t.Errorf("redis %+v", ro)
	}
	r, c = environ{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "CLUSTER", "REDIS_URL": "redis://bob:pw@10.0.0.1:7000/3,redis://bob:pw@10.0.0.2:7000",
		"CONFIG_TYPE": "GRPC_XDS_SOTW"}.load(t)
	if ro := c.Store.Redis; !ro.Cluster || strings.Join(ro.Addresses, ",") != "10.0.0.1:7000,10.0.0.2:7000" || ro.Username != "bob" || r.Env[redisPasswordVar] != "pw" {
		t.Errorf("cluster of URLs: %+v", ro)
	}
	if n, ok := noteFor(r.Warnings, "REDIS_URL"); !ok || !strings.Contains(n.Msg, "database 3 is not selected") {
		t.Errorf("a database in the URL: %v", r.Warnings)
	}
	_, c = environ{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,127.0.0.1:26379,127.0.0.1:26380",
		"REDIS_SENTINEL_AUTH": "sentinel-pw", "CONFIG_TYPE": "GRPC_XDS_SOTW"}.load(t)
	if ro := c.Store.Redis; ro.SentinelMaster != "mymaster" || len(ro.Addresses) != 2 || ro.SentinelPasswordEnv != "REDIS_SENTINEL_AUTH" {
		t.Errorf("sentinel: %+v", ro)
	}
	r, err := environ{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "CONFIG_TYPE": "GRPC_XDS_SOTW", "CACHE_KEY_PREFIX": "{rl}"}.build(t)
	if err != nil {
		t.Fatal(err)
	}
	_, perr := doors.Parse(Source, r.YAML)
	if x := r.Explain(perr); perr == nil || !strings.HasPrefix(x.Error(), "CACHE_KEY_PREFIX: store.redis.prefix") {
		t.Errorf("a prefix Floodgate refuses: %v, want the problem named by its variable", x)
	}
}

// TestTheServiceSettings: shadow mode, health without limits, headers,
// Prometheus, the failure mode and Floodgate's own variables.
func TestTheServiceSettings(t *testing.T) {
	r, c := environ{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "CONFIG_TYPE": "GRPC_XDS_SOTW",
		"SHADOW_MODE": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "1", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-L",
		"USE_STATSD": "false", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:9090", "PROMETHEUS_PATH": "/m",
		"FLOODGATE_BURST": "edge.api_key=20, internal.user=2", "FLOODGATE_HASH_SECRET": "0123456789abcdef0123", "FLOODGATE_ON_FAILURE": "local",
		"LOG_FORMAT": "JSON", "LOG_LEVEL": "trace", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "GRPC_SERVER_USE_TLS": "true",
		"GRPC_SERVER_TLS_CERT": "/c.crt", "GRPC_SERVER_TLS_KEY": "/c.key", "GRPC_CLIENT_TLS_CACERT": "/ca.crt", "GRPC_CLIENT_TLS_SAN": "envoy.example"}.load(t)
	if !c.RLS.ShadowMode || !c.RLS.UnhealthyWithoutLimits || !c.RLS.Headers || c.Listen.Metrics != "127.0.0.1:9090" {
		t.Errorf("rls %+v, listen.metrics %q", c.RLS, c.Listen.Metrics)
	}
	if c.RLS.Burst["edge.api_key"] != 20 || c.RLS.Burst["internal.user"] != 2 || c.Identity.HashSecretEnv != VarHashSecret || c.RLS.OnFailure != "store" || c.Store.OnFailure != "local" {
		t.Errorf("Floodgate's own: burst %v, secret from %q, on_failure %s/%s", c.RLS.Burst, c.Identity.HashSecretEnv, c.RLS.OnFailure, c.Store.OnFailure)
	}
	if c.Log.Format != "json" || c.Log.Level != "debug" || *c.Store.OverLimitCache.MaxEntries != 4096 {
		t.Errorf("log %+v, over-limit entries %d", c.Log, *c.Store.OverLimitCache.MaxEntries)
	}
	if tl := c.Listen.TLS; tl == nil || tl.ClientCAFile != "/ca.crt" || !slices.Equal(tl.AllowedSANs, []string{"envoy.example"}) {
		t.Errorf("listen.tls %+v", tl)
	}
	for _, v := range []string{"LIMIT_LIMIT_HEADER", "PROMETHEUS_PATH"} {
		if _, ok := noteFor(r.Warnings, v); !ok {
			t.Errorf("%s is not named", v)
		}
	}
	if _, ok := noteFor(r.Warnings, "USE_STATSD"); ok {
		t.Error("USE_STATSD=false is warned about")
	}
	r, _ = environ{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "CONFIG_TYPE": "GRPC_XDS_SOTW"}.load(t)
	if n, ok := noteFor(r.Warnings, "USE_STATSD"); !ok || !strings.Contains(n.Msg, "statsd is not implemented") {
		t.Error("the peer's default USE_STATSD=true is not said")
	}
	if !strings.Contains(string(r.YAML), "wait_for_first_push: true # FORCE_START_WITHOUT_INITIAL_CONFIG") {
		t.Errorf("the file does not name the variables beside the settings:\n%s", r.YAML)
	}
}

// TestTheRuntimeDirectory: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
// is rls.config in both watch modes; a file envoyproxy/ratelimit would load
// and Floodgate would not (another extension, a subdirectory, a dot file
// read without RUNTIME_IGNOREDOTFILES, a config.* beside the directory
// with RUNTIME_WATCH_ROOT) is refused; a Kubernetes ConfigMap mount is
// read through its links.
func TestTheRuntimeDirectory(t *testing.T) {
	write := func(path, data string) {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	limits := "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"
	env := func(root string, extra ...string) environ {
		e := environ{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit"}
		for i := 0; i+1 < len(extra); i += 2 {
			e[extra[i]] = extra[i+1]
		}
		return e
	}
	root := t.TempDir()
	write(filepath.Join(root, "ratelimit", "config", "a.yaml"), limits)
	for _, watch := range []string{"true", "false"} {
		_, c := env(root, "RUNTIME_WATCH_ROOT", watch).load(t)
		if c.RLS.Config != filepath.Join(root, "ratelimit", "config") {
			t.Errorf("RUNTIME_WATCH_ROOT=%s: rls.config %q", watch, c.RLS.Config)
		}
	}
	for _, tc := range []struct{ name, file, watch, ignore string }{
		{"another extension", "ratelimit/config/b.conf", "false", "false"},
		{"a subdirectory", "ratelimit/config/team/b.yaml", "false", "true"},
		{"a dot file", "ratelimit/config/.b.yaml", "false", "false"},
		{"config.* beside the directory", "ratelimit/config.yaml", "true", "false"},
	} {
		dir := t.TempDir()
		write(filepath.Join(dir, "ratelimit", "config", "a.yaml"), limits)
		write(filepath.Join(dir, tc.file), limits)
		_, err := env(dir, "RUNTIME_WATCH_ROOT", tc.watch, "RUNTIME_IGNOREDOTFILES", tc.ignore).build(t)
		if err == nil || !strings.Contains(err.Error(), "envoyproxy/ratelimit loads "+filepath.Join(dir, tc.file)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// A ConfigMap mount: ..data links to a dated directory, the keys link
	// through ..data.
	cm := t.TempDir()
	mount := filepath.Join(cm, "ratelimit", "config")
	write(filepath.Join(mount, "..2026_12_01", "a.yaml"), limits)
	os.Symlink("..2026_12_01", filepath.Join(mount, "..data"))
	os.Symlink(filepath.Join("..data", "a.yaml"), filepath.Join(mount, "a.yaml"))
	if r, _ := env(cm, "RUNTIME_WATCH_ROOT", "false", "RUNTIME_IGNOREDOTFILES", "true").load(t); len(r.Warnings) != 1 || r.Warnings[0].Vars[0] != "USE_STATSD" {
		t.Errorf("a ConfigMap with RUNTIME_IGNOREDOTFILES=true: %v", r.Warnings)
	}
	r, _ := env(cm, "RUNTIME_WATCH_ROOT", "false").load(t)
	if n, ok := noteFor(r.Warnings, "RUNTIME_IGNOREDOTFILES"); !ok || !strings.Contains(n.Msg, "..2026_12_01") {
		t.Errorf("a ConfigMap without RUNTIME_IGNOREDOTFILES: %v", r.Warnings)
	}
}

// TestTheDocsTableNamesEveryVariable: docs/ratelimit.md's table says how
// each of the peer's variables, and each of Floodgate's own, is honoured.
func TestTheDocsTableNamesEveryVariable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "ratelimit.md"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(doc), "## Started as ratelimit")
	end := strings.Index(string(doc), "## Pointing Envoy")
	if start < 0 || end < start {
		t.Fatal("docs/ratelimit.md has no section \"Started as ratelimit\" before \"Pointing Envoy\"")
	}
	section := string(doc[start:end])
	var rows []string
	for _, l := range strings.Split(section, "\n") {
		if strings.HasPrefix(l, "| `") {
			rows = append(rows, strings.SplitN(l, " | ", 2)[0])
		}
	}
	named := strings.Join(rows, " ")
	for _, v := range append(slices.Clone(Variables), FloodgateVariables...) {
		if !strings.Contains(named, "`"+v+"`") && !(strings.HasPrefix(v, "REDIS_PERSECOND_") && strings.Contains(named, "`REDIS_PERSECOND_*`")) {
			t.Errorf("docs/ratelimit.md's tables do not name %s in their first column", v)
		}
	}
}

// TestTheAdminPortsDebugPages: HOST puts the admin port on every interface,
// as envoyproxy/ratelimit's; its /debug/ pages stay loopback-only unless
// FLOODGATE_ADMIN_DEBUG=all says otherwise, and another value is refused.
func TestTheAdminPortsDebugPages(t *testing.T) {
	base := environ{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "CONFIG_TYPE": "GRPC_XDS_SOTW"}
	_, c := base.load(t)
	if c.Listen.Admin != "0.0.0.0:8080" || c.Listen.AdminDebug != config.AdminDebugLoopback {
		t.Errorf("by default: admin %q, admin_debug %q, want 0.0.0.0:8080 and loopback", c.Listen.Admin, c.Listen.AdminDebug)
	}
	open := maps.Clone(base)
	open[VarAdminDebug] = "all"
	if _, c := open.load(t); c.Listen.AdminDebug != config.AdminDebugAll {
		t.Errorf("FLOODGATE_ADMIN_DEBUG=all: admin_debug %q", c.Listen.AdminDebug)
	}
	bad := maps.Clone(base)
	bad[VarAdminDebug] = "everyone"
	if _, err := bad.build(t); err == nil || !strings.Contains(err.Error(), VarAdminDebug) || !strings.Contains(err.Error(), "want loopback or all") {
		t.Errorf("FLOODGATE_ADMIN_DEBUG=everyone: %v", err)
	}
}
