package config

import (
	"testing"

	"github.com/floodgate/floodgate/limiter/decide"
)

// TestTheHTTPDoorIsOffUntilListenHTTPIsSet: left out, listen.http serves
// nothing and http_authz takes its defaults (client_ip's hops, the store's
// failure mode, 1 MiB of headers).
func TestTheHTTPDoorIsOffUntilListenHTTPIsSet(t *testing.T) {
	c := mustParse(t, "client_ip: {trusted_hops: 2}\n"+goodPolicy)
	if c.Listen.HTTP != "" {
		t.Errorf("listen.http %q by default, want off", c.Listen.HTTP)
	}
	h := c.HTTPAuthz
	if h.TrustedHops == nil || *h.TrustedHops != 2 || h.OnFailure != "store" || h.PathPrefix != "" || c.Listen.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("defaults: %+v, max header bytes %d", h, c.Listen.MaxHeaderBytes)
	}
	if c.HTTPOnFailure() != decide.Allow {
		t.Errorf("HTTPOnFailure %v, want store.on_failure's allow", c.HTTPOnFailure())
	}
}

func TestTheHTTPDoorsSettingsAreRead(t *testing.T) {
	c := mustParse(t, `
listen: {http: "127.0.0.1:9193", max_header_bytes: 65536, max_http_connections: 2000}
store: {on_failure: deny}
client_ip: {trusted_hops: 0}
http_authz:
  path_prefix: /authz
  original_uri_header: X-Original-URI
  original_method_header: X-Original-Method
  original_host_header: X-Forwarded-Host
  trusted_hops: 1
  grpc_status_on_deny: always
`+goodPolicy)
	h := c.HTTPAuthz
	if c.Listen.HTTP != "127.0.0.1:9193" || c.Listen.MaxHeaderBytes != 65536 || c.Listen.MaxHTTPConnections != 2000 || h.PathPrefix != "/authz" || h.OriginalURIHeader != "X-Original-URI" ||
		h.OriginalMethodHeader != "X-Original-Method" || h.OriginalHostHeader != "X-Forwarded-Host" || *h.TrustedHops != 1 || c.ClientIP.TrustedHops != 0 || h.GRPCStatusOnDeny != "always" {
		t.Errorf("read %+v (listen %+v)", h, c.Listen)
	}
	if c.HTTPOnFailure() != decide.Deny {
		t.Errorf("HTTPOnFailure %v, want store.on_failure's deny", c.HTTPOnFailure())
	}
	c = mustParse(t, "listen: {http: \"127.0.0.1:9193\"}\nhttp_authz: {on_failure: error}\n"+goodPolicy)
	if c.HTTPAuthz.GRPCStatusOnDeny != "grpc_requests" {
		t.Errorf("grpc_status_on_deny %q by default, want grpc_requests", c.HTTPAuthz.GRPCStatusOnDeny)
	}
	if c.HTTPOnFailure() != decide.Error || c.OnFailure(false) != decide.Allow {
		t.Errorf("on_failure: error: HTTP %v, Check %v; want error for the HTTP door alone", c.HTTPOnFailure(), c.OnFailure(false))
	}
}

func TestTheHTTPDoorsMistakesAreReportedAtTheirLines(t *testing.T) {
	const on = "listen:\n  http: 127.0.0.1:9193\n"
	for _, tc := range []struct{ yaml, want string }{
		{"listen:\n  http: 9193\n", `bad.yaml:2: listen.http: must be host:port (got "9193")`},
		{on + "  max_header_bytes: 100\n", `bad.yaml:3: listen.max_header_bytes: must be between 4096 and 16777216 (got 100)`},
		{"listen:\n  max_header_bytes: 8192\n", `bad.yaml:2: listen.max_header_bytes: only applies with listen.http`},
		{on + "  max_http_connections: 8\n", `bad.yaml:3: listen.max_http_connections: must be between 16 and 1048576, or 0 to size it from the memory limit and the file descriptors (got 8)`},
		{on + "  max_http_connections: -1\n", `bad.yaml:3: listen.max_http_connections: must be between 16`},
		{"listen:\n  max_http_connections: 1000\n", `bad.yaml:2: listen.max_http_connections: only applies with listen.http`},
		{"http_authz:\n  path_prefix: /authz\n", `bad.yaml:1: http_authz: applies to the HTTP authorization door, which listen.http turns on`},
		{on + "http_authz:\n  path_prefix: authz\n", `bad.yaml:4: http_authz.path_prefix: must be a path starting with /`},
		{on + "http_authz:\n  path_prefix: /a?b\n", `bad.yaml:4: http_authz.path_prefix: must be a path starting with /`},
		{on + "http_authz:\n  original_uri_header: \"X Original\"\n", `bad.yaml:4: http_authz.original_uri_header: must be a header name`},
		{on + "http_authz:\n  original_method_header: \"X-M:\"\n", `bad.yaml:4: http_authz.original_method_header: must be a header name`},
		{on + "http_authz:\n  on_failure: deny\n", `bad.yaml:4: http_authz.on_failure: must be store or error (got "deny")`},
		{on + "http_authz:\n  trusted_hops: 64\n", `bad.yaml:4: http_authz.trusted_hops: must be between 0 and 63 (got 64)`},
		{on + "client_ip: {trusted_cidrs: [10.0.0.0/8]}\nhttp_authz:\n  trusted_hops: 1\n", `bad.yaml:5: http_authz.trusted_hops: overrides client_ip.trusted_hops, and client_ip.trusted_cidrs is set instead`},
		{on + "http_authz:\n  grpc_status_on_deny: yes\n", `bad.yaml:4: http_authz.grpc_status_on_deny: must be grpc_requests or always (got "yes")`},
		{on + "http_authz:\n  patth_prefix: /x\n", `bad.yaml:4: unknown key "patth_prefix" in http_authz (known: grpc_status_on_deny, on_failure, original_host_header, original_method_header, original_uri_header, path_prefix, trusted_hops)`},
	} {
		wantProblem(t, tc.yaml+goodPolicy, tc.want)
	}
}

// TestListenHTTPWaitsForARestart: the door's listener is read at start, as
// every listen setting is; how the door reads requests reloads.
func TestListenHTTPWaitsForARestart(t *testing.T) {
	a := mustParse(t, "listen: {http: \"127.0.0.1:9193\"}\n"+goodPolicy)
	b := mustParse(t, "listen: {http: \"127.0.0.1:9194\"}\n"+goodPolicy)
	if got := a.RestartOnlyChanges(b); len(got) != 1 || got[0] != "listen" {
		t.Errorf("a new listen.http: %v, want [listen]", got)
	}
	c := mustParse(t, "listen: {http: \"127.0.0.1:9193\"}\nhttp_authz: {path_prefix: /authz, trusted_hops: 3}\n"+goodPolicy)
	if got := a.RestartOnlyChanges(c); len(got) != 0 {
		t.Errorf("a new http_authz: %v, want none (it reloads)", got)
	}
}
