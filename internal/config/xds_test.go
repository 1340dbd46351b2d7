package config

import (
	"slices"
	"testing"
	"time"
)

func TestRLSXDSDefaultsAndProblems(t *testing.T) {
	c := mustParse(t, "rls:\n  xds: {server: \"envoy-gateway:18001\", node_id: envoy-ratelimit}\n")
	x := c.RLS.XDS
	if x == nil || x.MaxMessageBytes != DefaultXDSMaxMessageBytes || x.Retry.Initial.Duration != time.Second || x.Retry.Max.Duration != 30*time.Second ||
		*x.Retry.Factor != 2 || !*x.Retry.Jitter || x.WaitForFirstPush || !c.RLS.Limits() {
		t.Fatalf("defaults: %+v", x)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"rls:\n  xds: {node_id: n}\n", "bad.yaml:2: rls.xds.server: is required"},
		{"rls:\n  xds: {server: cp, node_id: n}\n", `bad.yaml:2: rls.xds.server: must be host:port (got "cp")`},
		{"rls:\n  xds: {server: \"cp:1\"}\n", "bad.yaml:2: rls.xds.node_id: is required"},
		{"rls:\n  config: /etc/rl\n  xds: {server: \"cp:1\", node_id: n}\n", "bad.yaml:3: rls.xds: and rls.config both name the limits"},
		{"rls:\n  xds: {server: \"cp:1\", node_id: n, tls: {cert_file: c.pem}}\n", "bad.yaml:2: rls.xds.tls: cert_file and key_file go together"},
		{"rls:\n  xds: {server: \"cp:1\", node_id: n, retry: {initial: 1s, max: 100ms}}\n", "bad.yaml:2: rls.xds.retry.max: must be at least retry.initial"},
		{"rls:\n  xds: {server: \"cp:1\", node_id: n, retry: {factor: 0}}\n", "bad.yaml:2: rls.xds.retry.factor: must be a number in (0, 100]"},
		{"rls:\n  shadow_mode: true\n", "bad.yaml:1: rls: config or xds is required"},
		{"listen:\n  metrics: \":19001\"\n" + goodPolicy, `bad.yaml:2: listen.metrics: must name a host`},
	} {
		wantProblem(t, tc.yaml, tc.want)
	}
}

func TestAChangedRLSXDSWaitsForARestart(t *testing.T) {
	a := mustParse(t, "rls:\n  xds: {server: \"cp:1\", node_id: a}\n")
	b := mustParse(t, "rls:\n  xds: {server: \"cp:1\", node_id: b}\n")
	if got := a.RestartOnlyChanges(b); !slices.Equal(got, []string{"rls.xds"}) {
		t.Errorf("changed sections %v, want [rls.xds]", got)
	}
	if got := a.RestartOnlyChanges(mustParse(t, "rls:\n  xds: {server: \"cp:1\", node_id: a}\n  burst: {d.k: 3}\n")); len(got) != 0 {
		t.Errorf("a burst changes %v: it applies on reload", got)
	}
}

func TestRLSWindowsAreATokenBucketOrFixed(t *testing.T) {
	if c := mustParse(t, "rls:\n  config: /etc/rl\n"); c.RLS.Windows != "token_bucket" {
		t.Errorf("rls.windows defaults to %q, want token_bucket", c.RLS.Windows)
	}
	if c := mustParse(t, "rls:\n  config: /etc/rl\n  windows: fixed\n"); c.RLS.Windows != "fixed" {
		t.Errorf("rls.windows: fixed reads %q", c.RLS.Windows)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"rls:\n  config: /etc/rl\n  windows: sliding\n", "bad.yaml:3: rls.windows: must be token_bucket or fixed"},
		{"rls:\n  config: /etc/rl\n  windows: fixed\n  lease: auto\n", "bad.yaml:4: rls.lease: auto leases token buckets; rls.windows: fixed counts in Redis' windows"},
		{"rls:\n  config: /etc/rl\n  windows: fixed\n  burst: {d.k: 3}\n", "bad.yaml:4: rls.burst: sets a token bucket's capacity"},
	} {
		wantProblem(t, tc.yaml, tc.want)
	}
}
