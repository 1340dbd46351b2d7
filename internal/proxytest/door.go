package proxytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// DoorConfig is the part of a Floodgate configuration for the HTTP door that
// a recipe's tests set: the http_authz keys, client_ip.trusted_hops,
// store.on_failure and the policies, spelled as Floodgate's YAML spells
// them.
type DoorConfig struct {
	// PathPrefix is http_authz.path_prefix: stripped from the request path
	// before policies match (Envoy's http_service path_prefix).
	PathPrefix string
	// OriginalURIHeader and OriginalMethodHeader are
	// http_authz.original_uri_header and original_method_header: where a
	// proxy that sends a fixed authorization URI puts the original request's
	// URI and method (nginx's recipe: X-Original-URI, X-Original-Method).
	OriginalURIHeader, OriginalMethodHeader string
	// OriginalHostHeader is http_authz.original_host_header: where such a
	// proxy puts the original request's host (Traefik's recipe:
	// X-Forwarded-Host); empty, the key is left out.
	OriginalHostHeader string
	// TrustedHops is client_ip.trusted_hops: the client is the
	// (TrustedHops+1)-th address from the right of X-Forwarded-For.
	TrustedHops int
	// OnFailure is store.on_failure: allow (the default) or deny.
	OnFailure string
	// MaxHeaderBytes is listen.max_header_bytes (0: the default): a
	// request whose headers are larger gets net/http's 431.
	MaxHeaderBytes int
	// Policies are Floodgate's policies; each refills one token an hour
	// (refill_per_second: 1/3600), so a test's burst never refills.
	Policies []Policy
}

// Policy is one Floodgate policy as DoorConfig needs it.
type Policy struct {
	Name string
	// PathPrefix or Path is match.path_prefix or match.path.
	PathPrefix, Path string
	// Methods is match.methods (empty: every method).
	Methods []string
	// Hosts is match.hosts (empty: every host).
	Hosts []string
	// Key is the policy's key sources in order: "header:NAME", "client_ip".
	Key []string
	// Capacity is the bucket's size: the burst that passes.
	Capacity int64
}

// RefillSeconds is how long a policy of DoorConfig takes to refill one
// token: Retry-After on a denial is this, give or take the second the test
// took.
const RefillSeconds = 3600

// StoreTimeout is the door's store.redis.timeout: a store that does not
// answer within it is a failure, answered by store.on_failure (the recipes'
// proxies wait 250 ms for the door).
const StoreTimeout = "50ms"

// YAML is Floodgate's configuration for cfg: the HTTP door on a free
// loopback port, no admin port, buckets in the Redis at redisAddr.
func (cfg DoorConfig) YAML(redisAddr string) string {
	var b strings.Builder
	hostKey := ""
	if cfg.OriginalHostHeader != "" {
		hostKey = fmt.Sprintf(", original_host_header: %q", cfg.OriginalHostHeader)
	}
	onFailure := cfg.OnFailure
	if onFailure == "" {
		onFailure = "allow"
	}
	maxHeader := ""
	if cfg.MaxHeaderBytes > 0 {
		maxHeader = fmt.Sprintf(", max_header_bytes: %d", cfg.MaxHeaderBytes)
	}
	fmt.Fprintf(&b, `listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: ""%s}
store:
  backend: redis
  redis: {addresses: [%q], timeout: %s}
  on_failure: %s
client_ip: {trusted_hops: %d}
http_authz: {path_prefix: %q, original_uri_header: %q, original_method_header: %q%s}
policies:
`, maxHeader, redisAddr, StoreTimeout, onFailure, cfg.TrustedHops, cfg.PathPrefix, cfg.OriginalURIHeader, cfg.OriginalMethodHeader, hostKey)
	for _, p := range cfg.Policies {
		fmt.Fprintf(&b, "  - name: %s\n    match: {", p.Name)
		var match []string
		if p.PathPrefix != "" {
			match = append(match, fmt.Sprintf("path_prefix: %q", p.PathPrefix))
		}
		if p.Path != "" {
			match = append(match, fmt.Sprintf("path: %q", p.Path))
		}
		if len(p.Methods) > 0 {
			match = append(match, "methods: ["+strings.Join(p.Methods, ", ")+"]")
		}
		if len(p.Hosts) > 0 {
			match = append(match, "hosts: ["+strings.Join(p.Hosts, ", ")+"]")
		}
		fmt.Fprintf(&b, "%s}\n    key: [%q", strings.Join(match, ", "), p.Key[0])
		for _, k := range p.Key[1:] {
			fmt.Fprintf(&b, ", %q", k)
		}
		fmt.Fprintf(&b, "]\n    capacity: %d\n    refill_per_second: 1/%d\n", p.Capacity, RefillSeconds)
	}
	return b.String()
}

// Door is Floodgate's HTTP authorization door as the recipes' tests drive
// it: an address a proxy sends its authorization requests to, and the
// faults a test puts it through.
type Door interface {
	// Addr is the 127.0.0.1 host:port the door listens on.
	Addr() string
	// Pause makes the door hang: connections are accepted, requests are
	// read, nothing is answered until Resume (a stopped process).
	Pause()
	// Resume ends Pause.
	Resume()
	// Stop ends the door: from now on connections are refused.
	Stop()
	// StoreDown makes the door's store hang (Redis stopped): from now on
	// the door answers by store.on_failure within the store timeout.
	StoreDown()
}

// StartDoor starts the door the recipes' tests run against: the floodgate
// binary built from this module, serving listen.http as cfg configures it,
// its buckets in a redis-server of its own. Both end when the test ends.
func StartDoor(t *testing.T, cfg DoorConfig) Door {
	t.Helper()
	redis := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(cfg.YAML(redis.Addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := floodgatetest.Start(t, floodgatetest.Floodgate(t, floodgatetest.Build{}), "serve", "--config", path)
	if p.HTTP == "" {
		t.Fatalf("floodgate serves no listen.http:\n%s", p.Output())
	}
	return &floodgateDoor{t: t, p: p, redis: redis}
}

// floodgateDoor is a floodgate process and its redis-server.
type floodgateDoor struct {
	t     *testing.T
	p     *floodgatetest.Process
	redis *redistest.Server
}

func (d *floodgateDoor) Addr() string { return d.p.HTTP }

// Pause stops the process (SIGSTOP): the kernel still accepts connections
// for it, and nothing answers them.
func (d *floodgateDoor) Pause() {
	if err := redistest.PauseProcess(d.p.Cmd.Process); err != nil {
		d.t.Errorf("pausing floodgate: %v", err)
	}
}
func (d *floodgateDoor) Resume() { d.p.Cmd.Process.Signal(syscall.SIGCONT) }

// Stop ends the process as an operator would (SIGTERM, which closes the
// door's listener once the requests in flight are answered) and waits for
// it to exit.
func (d *floodgateDoor) Stop() {
	d.Resume()
	d.p.Stop(d.t)
}

// StoreDown stops the redis-server (SIGSTOP): connections stay open and
// nothing answers, so every decision waits out the store timeout.
func (d *floodgateDoor) StoreDown() { d.redis.Pause() }
