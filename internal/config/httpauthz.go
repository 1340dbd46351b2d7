package config

import (
	"strings"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/limiter/decide"
)

// HTTPAuthz is how the HTTP authorization door (listen.http) reads the
// requests proxies send it: Envoy's ext_authz http_service and Istio's
// envoyExtAuthzHttp send the original method and path (after a path
// prefix); nginx, HAProxy, Traefik and Caddy send every request to one URI
// and carry the original in headers of their own. Reloaded with the
// configuration; listen.http and listen.max_header_bytes are read at start.
type HTTPAuthz struct {
	// PathPrefix is Envoy's http_service path_prefix: stripped from the
	// request's path before the policies match it.
	PathPrefix string `yaml:"path_prefix"`
	// OriginalURIHeader, OriginalMethodHeader and OriginalHostHeader name
	// the headers a proxy puts the original request's URI (path and
	// query), method and host in. They are read only when named, since a
	// client could send them: the proxy must replace the client's own.
	OriginalURIHeader    string `yaml:"original_uri_header"`
	OriginalMethodHeader string `yaml:"original_method_header"`
	OriginalHostHeader   string `yaml:"original_host_header"`
	// TrustedHops is client_ip.trusted_hops for the door's requests
	// (default: client_ip's): Envoy's HTTP client appends Envoy's own
	// address to X-Forwarded-For, which its gRPC client does not, so an
	// Envoy in the same place needs one hop more here.
	TrustedHops *int `yaml:"trusted_hops"`
	// OnFailure is what the door answers when the store cannot decide:
	// "store" (the default) as store.on_failure says, never a 5xx; "error"
	// a 503, so that the proxy's own failure mode decides
	// (failure_mode_allow, nginx's error_page, the HAProxy action's last
	// argument).
	OnFailure string `yaml:"on_failure"`
	// GRPCStatusOnDeny is when a denial carries gRPC's status
	// (grpc-status 8 and grpc-retry-pushback-ms): "grpc_requests" (the
	// default), on a request whose content-type is gRPC; "always", on every
	// denial, for Envoy's http_service, which must not send the door a
	// content-type and keeps a grpc-status the denial carries when it
	// answers a gRPC caller.
	GRPCStatusOnDeny string `yaml:"grpc_status_on_deny"`
}

func (v *validator) checkHTTPAuthz(c *Config) {
	h := &c.HTTPAuthz
	v.oneOf("http_authz.on_failure", &h.OnFailure, "store", "store", "error")
	v.oneOf("http_authz.grpc_status_on_deny", &h.GRPCStatusOnDeny, "grpc_requests", "grpc_requests", "always")
	if p := h.PathPrefix; p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?# \t")) {
		v.at("http_authz.path_prefix", "must be a path starting with /, as Envoy's http_service path_prefix is (got %q)", p)
	}
	for _, hd := range []struct{ path, name string }{
		{"http_authz.original_uri_header", h.OriginalURIHeader},
		{"http_authz.original_method_header", h.OriginalMethodHeader},
		{"http_authz.original_host_header", h.OriginalHostHeader},
	} {
		if hd.name != "" && !isToken(hd.name) {
			v.at(hd.path, "must be a header name, such as X-Original-URI (got %q)", hd.name)
		}
	}
	if n := h.TrustedHops; n != nil {
		switch {
		case *n < 0 || *n >= extauthz.MaxXFFEntries:
			v.at("http_authz.trusted_hops", "must be between 0 and %d (got %d)", extauthz.MaxXFFEntries-1, *n)
		case len(c.ClientIP.TrustedCIDRs) > 0:
			v.at("http_authz.trusted_hops", "overrides client_ip.trusted_hops, and client_ip.trusted_cidrs is set instead: the proxies' own addresses are skipped by their ranges (add the proxy's range there)")
		}
	} else {
		hops := c.ClientIP.TrustedHops
		h.TrustedHops = &hops
	}
	if c.Listen.HTTP != "" {
		return
	}
	if _, set := v.lines["http_authz"]; set {
		v.at("http_authz", "applies to the HTTP authorization door, which listen.http turns on: set listen.http, or remove http_authz")
	}
	if _, set := v.lines["listen.max_header_bytes"]; set {
		v.at("listen.max_header_bytes", "only applies with listen.http")
	}
	if _, set := v.lines["listen.max_http_connections"]; set {
		v.at("listen.max_http_connections", "only applies with listen.http")
	}
}

// isToken reports whether s is an HTTP field name (RFC 9110's token).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// HTTPOnFailure is OnFailure for the HTTP authorization door: decide.Error
// (the door answers 503) with http_authz.on_failure: error, else what
// store.on_failure says, as for Check.
func (c *Config) HTTPOnFailure() decide.OnFailure {
	if c.HTTPAuthz.OnFailure == "error" {
		return decide.Error
	}
	return c.OnFailure(false)
}
