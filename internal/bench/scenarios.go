package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// scenario is one row group of the table: which server answers and what
// the load generator sends it.
type scenario struct {
	id     string
	label  string
	server string                  // "noop", or a floodgate instance (see floodgateConfig)
	work   func(keys int) workload // the requests; keys is --keys
	cache  func(keys int) string   // workloads with equal cache keys are built once
	base   string                  // the row its ratios divide by: "" is (a)
}

func distinctCache(path string) func(int) string {
	return func(k int) string { return fmt.Sprintf("distinct:%s:%d", path, k) }
}

func constCache(s string) func(int) string { return func(int) string { return s } }

// scenarios in table order. (a) is the ceiling every other row is compared to.
var scenarios = []scenario{
	{id: "a", label: "(a) no-op ext_authz server", server: "noop",
		work: func(k int) workload { return distinct("/b/", k) }, cache: distinctCache("/b/")},
	{id: "b", label: "(b) Redis, distinct keys", server: "redis",
		work: func(k int) workload { return distinct("/b/", k) }, cache: distinctCache("/b/")},
	{id: "b0", label: "(b) without pipelining", server: "redis-nopipe",
		work: func(k int) workload { return distinct("/b/", k) }, cache: distinctCache("/b/")},
	{id: "b2", label: "(b) with two pipeline flushers", server: "redis-2flushers",
		work: func(k int) workload { return distinct("/b/", k) }, cache: distinctCache("/b/")},
	{id: "c", label: "(c) Redis, one hot key", server: "redis",
		work: func(int) workload { return single("/c/", "k_live_hot", true) }, cache: constCache("hot")},
	// (c-lease) is (c) with the policy's lease: auto: the hot key decided
	// from leases of its tokens (limiter/lease), not a script call each.
	{id: "c-lease", label: "(c-lease) Redis, one hot key, lease: auto", server: "redis",
		work: func(int) workload { return single("/cl/", "k_live_hot", true) }, cache: constCache("hot-lease")},
	{id: "d", label: "(d) over-limit flood, one key", server: "redis",
		work: func(int) workload { return single("/d/", "k_live_flood", false) }, cache: constCache("flood")},
	{id: "e", label: "(e) in-memory store", server: "memory",
		work: func(k int) workload { return distinct("/b/", k) }, cache: distinctCache("/b/")},
	{id: "f", label: "(f) Redis, two policies", server: "redis",
		work: func(k int) workload { return distinct("/f/", k) }, cache: distinctCache("/f/")},
	{id: "g", label: "(g) Redis Cluster, distinct keys", server: "redis-cluster",
		work: func(k int) workload { return distinct("/b/", k) }, cache: distinctCache("/b/")},
	{id: "a'", label: "(a') no-op rate-limit service", server: "noop",
		work: distinctRLS, cache: rlsCache},
	{id: "r", label: "(r) envoyproxy/ratelimit, Redis, distinct keys", server: "ratelimit",
		work: distinctRLS, cache: rlsCache, base: "a'"},
	// (b-rls) is floodgate answering (r)'s requests on the same API: its
	// rate limit service, configured with (r)'s YAML unchanged.
	{id: "b-rls", label: "(b-rls) Floodgate rate limit service, Redis, distinct keys", server: "redis-rls",
		work: distinctRLS, cache: rlsCache, base: "a'"},
	// (b-xds) is (b-rls) with the same limits pushed over xDS by a
	// go-control-plane management server (xds.go), as Envoy Gateway pushes
	// them, instead of read from the file.
	{id: "b-xds", label: "(b-xds) Floodgate rate limit service, limits over xDS, Redis", server: "redis-xds",
		work: distinctRLS, cache: rlsCache, base: "a'"},
	// (a-http) and (b-http): the HTTP authorization door (http.go), (b)'s
	// callers as Envoy's http_service asks about them.
	{id: "a-http", label: "(a-http) no-op HTTP authorization server", server: "noop-http",
		work: distinctHTTP, cache: httpCache, base: "a-http"},
	{id: "b-http", label: "(b-http) Floodgate HTTP door, Redis, distinct keys", server: "redis-http",
		work: distinctHTTP, cache: httpCache, base: "a-http"},
	// (rt) and (naive) are references, not servers: the load generator's
	// own go-redis calls on the same redis-server (direct.go). work is nil.
	{id: "rt", label: "(rt) one Redis round trip from the load generator", server: redisDirect},
	{id: "naive", label: "(naive) one GET + SET script call per decision, no pipelining", server: redisDirect},
}

func rlsCache(k int) string { return fmt.Sprintf("rls:%d", k) }

// isBaseline reports whether sc is a baseline: a no-op server whose
// ratios are 1 by definition.
func (sc scenario) isBaseline() bool { return sc.id == "a" || sc.id == "a'" || sc.id == "a-http" }

// baseID is the scenario sc's ratios divide by.
func (sc scenario) baseID() string {
	if sc.base == "" {
		return "a"
	}
	return sc.base
}

func scenarioByID(id string) (scenario, bool) {
	for _, s := range scenarios {
		if s.id == id {
			return s, true
		}
	}
	return scenario{}, false
}

// policiesYAML is the policy set of every floodgate instance: one policy
// family per scenario, told apart by path, so one process serves (b), (c),
// (d) and (f). Capacities are huge where every request must pass.
const policiesYAML = `policies:
  - name: b-per-key
    match: {path_prefix: /b/}
    key: [header:x-api-key, client_ip]
    capacity: 1000000000
    refill_per_second: 1000000
  - name: c-hot-key
    match: {path_prefix: /c/}
    key: [header:x-api-key]
    capacity: 1000000000
    refill_per_second: 1000000
  - name: c-lease-hot-key
    match: {path_prefix: /cl/}
    key: [header:x-api-key]
    capacity: 1000000000
    refill_per_second: 1000000
    lease: auto
  - name: d-flood
    match: {path_prefix: /d/}
    key: [header:x-api-key]
    capacity: 10
    refill_per_second: 1/3600
  - name: f-per-key
    match: {path_prefix: /f/}
    key: [header:x-api-key]
    capacity: 1000000000
    refill_per_second: 1000000
  - name: f-per-ip
    match: {path_prefix: /f/}
    key: [client_ip]
    capacity: 1000000000
    refill_per_second: 1000000
`

// clusterMasters is the size of the Redis Cluster scenario (g) runs on.
const clusterMasters = 3

// floodgateConfig returns the configuration of the floodgate instance
// server: "redis" (the shipped defaults: resilience layer, over-limit cache,
// pipelining), "redis-nopipe" (one round trip per decision), "redis-2flushers"
// (two pipelines on the wire at once), "redis-cluster" (the defaults, on the
// Redis Cluster whose masters are redisAddrs), "redis-http" ("redis" with
// the HTTP door on, as envoy/http/floodgate.yaml sets it), "redis-rls" ("redis" serving
// the rate limit service too, from rls: a file holding ratelimitConfig,
// (r)'s limits), "redis-xds" (the same, its limits pushed over xDS by the
// management server at rls, host:port, which it waits for before it
// serves) or "memory"; its collector as the
// no-op server's: GOGC gogc (runtime.gogc) and no memory limit
// (runtime.memory_limit_ratio: 0; a limit far above the heap would not
// change what the collector does, but the two then differ in nothing).
func floodgateConfig(server string, redisAddrs []string, gogc int, rls string) (string, error) {
	var b strings.Builder
	b.WriteString("# generated by floodbench\nlisten:\n  grpc: 127.0.0.1:0\n  admin: \"\"\n")
	if server == "redis-http" {
		b.WriteString("  http: 127.0.0.1:0\n")
	}
	b.WriteString("reload:\n  watch: false\nlog:\n  level: info\n")
	fmt.Fprintf(&b, "runtime:\n  gogc: %d\n  memory_limit_ratio: 0\n", gogc)
	switch server {
	case "memory":
		b.WriteString("store:\n  backend: memory\n")
	case "redis", "redis-nopipe", "redis-2flushers", "redis-cluster", "redis-rls", "redis-xds", "redis-http":
		quoted := make([]string, len(redisAddrs))
		for i, a := range redisAddrs {
			quoted[i] = strconv.Quote(a)
		}
		fmt.Fprintf(&b, "store:\n  backend: redis\n  on_failure: allow\n  redis:\n    addresses: [%s]\n", strings.Join(quoted, ", "))
		switch server {
		case "redis-nopipe":
			b.WriteString("    pipeline: false\n")
		case "redis-2flushers":
			b.WriteString("    pipeline_flushers: 2\n")
		}
	default:
		return "", fmt.Errorf("unknown floodgate instance %q", server)
	}
	if server == "redis-http" {
		// The door as envoy/http/floodgate.yaml configures it behind an
		// edge Envoy: its path prefix, and one more hop for the address
		// Envoy's HTTP client appends.
		fmt.Fprintf(&b, "http_authz:\n  path_prefix: %s\n  trusted_hops: 1\n", httpPathPrefix)
	}
	switch {
	case (server == "redis-rls" || server == "redis-xds") && rls == "":
		return "", fmt.Errorf("floodgate instance %s needs the source of its rate limits", server)
	case server == "redis-rls":
		fmt.Fprintf(&b, "rls:\n  config: %s\n", strconv.Quote(rls))
	case server == "redis-xds":
		fmt.Fprintf(&b, "rls:\n  xds: {server: %s, node_id: %s, wait_for_first_push: true}\n", strconv.Quote(rls), xdsNode)
	}
	b.WriteString(policiesYAML)
	return b.String(), nil
}
