package replay

import (
	"fmt"
	"strings"

	"github.com/floodgate/floodgate/extauthz"
)

// LogFormat returns the Envoy access-log block that writes what replay reads
// for e's policies: the fixed fields and exactly the request headers, dynamic
// metadata namespaces and peer identity the policies look at. It is YAML for
// an http_connection_manager's access_log list.
//
// Envoy's json_format writes a missing header (%REQ(...)% with nothing to
// show) as null unless omit_empty_values is set, and nested objects as
// nested JSON (api/envoy/config/core/v3/substitution_format_string.proto,
// SubstitutionFormatString.json_format and omit_empty_values); route
// metadata is printed by the METADATA(ROUTE:NAMESPACE:KEY) operator
// (api/envoy/extensions/formatter/metadata/v3/metadata.proto).
func LogFormat(e *extauthz.Engine, configName string) string {
	in := e.Inputs()
	var b strings.Builder
	fmt.Fprintf(&b, "# Envoy access log for `floodgate replay --config %s --log FILE`.\n", configName)
	b.WriteString("# Add this entry to the http_connection_manager's access_log list.\n")
	var secrets []string
	for _, h := range in.Headers {
		if sensitive(h) {
			secrets = append(secrets, h)
		}
	}
	if len(secrets) > 0 {
		fmt.Fprintf(&b, "# It logs %s in the clear: credentials. Keep this log where secrets are kept, readable by few,\n", strings.Join(secrets, ", "))
		b.WriteString("# and delete it after the replay.\n")
	}
	b.WriteString(`- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: /var/log/envoy/floodgate-replay.log
    log_format:
      json_format:
        start_time: "%START_TIME%"
        method: "%REQ(:METHOD)%"
        # The path ext_authz saw, before any route rewrite.
        path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"
        authority: "%REQ(:AUTHORITY)%"
        downstream_remote_address: "%DOWNSTREAM_REMOTE_ADDRESS%"
`)
	if len(in.Headers) > 0 {
		b.WriteString("        request_headers:\n")
		for _, h := range in.Headers {
			fmt.Fprintf(&b, "          %s: \"%%REQ(%s)%%\"\n", h, strings.ToUpper(h))
		}
	}
	if len(in.Metadata) > 0 {
		b.WriteString("        metadata:\n")
		for _, ns := range in.Metadata {
			fmt.Fprintf(&b, "          %s: \"%%DYNAMIC_METADATA(%s)%%\"\n", ns, ns)
		}
	}
	for _, s := range in.Sources {
		if s == "source_principal" {
			b.WriteString("        source_principal: \"%DOWNSTREAM_PEER_URI_SAN%\"\n")
		}
	}
	if len(in.Context) > 0 {
		b.WriteString("        # context_extensions are per-route ext_authz settings, which Envoy cannot log. Give each route\n")
		b.WriteString("        # the same values as route metadata (metadata.filter_metadata.floodgate) and log them:\n")
		b.WriteString("        context_extensions:\n")
		for _, k := range in.Context {
			fmt.Fprintf(&b, "          %s: \"%%METADATA(ROUTE:floodgate:%s)%%\"\n", k, k)
		}
	}
	return b.String()
}

// sensitive reports whether a header usually carries a credential.
func sensitive(h string) bool {
	switch h {
	case "authorization", "proxy-authorization", "cookie":
		return true
	}
	return strings.Contains(h, "key") || strings.Contains(h, "token") || strings.Contains(h, "secret") || strings.Contains(h, "auth")
}
