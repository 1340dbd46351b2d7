package replay

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/floodgate/floodgate/extauthz"
)

// DefaultLogPath is where the printed access logger writes unless told.
const DefaultLogPath = "/var/log/envoy/floodgate-replay.log"

// LogFormat returns the Envoy access-log block that writes what replay reads
// for e's policies: the fixed fields and exactly the request headers, dynamic
// metadata namespaces and peer identity the policies look at. It is YAML for
// an http_connection_manager's access_log list. path is the file Envoy's
// file access logger writes, or "-" for the stdout access logger (a
// container's log). The shipped Envoy examples (envoy/) hold this block as
// printed for their Floodgate configurations, with path "-".
//
// Envoy's json_format writes a missing header (%REQ(...)% with nothing to
// show) as null unless omit_empty_values is set, and nested objects as
// nested JSON (api/envoy/config/core/v3/substitution_format_string.proto,
// SubstitutionFormatString.json_format and omit_empty_values); route
// metadata is printed by the METADATA(ROUTE:NAMESPACE:KEY) operator
// (source/extensions/formatter/metadata/metadata.cc, RouteMetadataFormatter;
// a built-in command since Envoy 1.34, config.cc BuiltInMetadataFormatterFactory).
func LogFormat(e *extauthz.Engine, configName, path string) string {
	in := e.Inputs()
	var b strings.Builder
	printed := "floodgate replay --config " + configName + " --print-log-format"
	if path != DefaultLogPath {
		printed += " --print-log-to " + path
	}
	if path == "-" {
		fmt.Fprintf(&b, "# Envoy access log for `floodgate replay --config %s --log -`, written to Envoy's standard\n", configName)
		b.WriteString("# output: pipe the container's log into replay (lines that are not JSON are counted and skipped).\n")
	} else {
		fmt.Fprintf(&b, "# Envoy access log for `floodgate replay --config %s --log %s`.\n", configName, path)
	}
	fmt.Fprintf(&b, "# Printed by `%s`;\n# print it again when the policies change.\n", printed)
	b.WriteString("# Add this entry to the http_connection_manager's access_log list; remove it to stop logging.\n")
	var secrets []string
	for _, h := range in.Headers {
		if sensitive(h) {
			secrets = append(secrets, h)
		}
	}
	switch {
	case len(secrets) > 0 && path == "-":
		fmt.Fprintf(&b, "# It logs %s in the clear: credentials. Whatever keeps Envoy's standard output (the container\n", strings.Join(secrets, ", "))
		b.WriteString("# runtime, a log pipeline) then holds them: keep that readable by few, or remove this entry.\n")
	case len(secrets) > 0:
		fmt.Fprintf(&b, "# It logs %s in the clear: credentials. Keep this log where secrets are kept, readable by few,\n", strings.Join(secrets, ", "))
		b.WriteString("# and delete it after the replay.\n")
	}
	if len(in.MetadataPaths) > 0 {
		b.WriteString("# It logs the metadata values the keys read (a token's subject, say): who made each request.\n")
	}
	if path == "-" {
		b.WriteString(`- name: envoy.access_loggers.stdout
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
`)
	} else {
		fmt.Fprintf(&b, `- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: %s
`, yamlString(path))
	}
	b.WriteString(`    log_format:
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
	if len(in.MetadataPaths) > 0 {
		b.WriteString("        # Only the values the keys read, not the whole namespace (all of a token's claims, say).\n")
		b.WriteString("        metadata:\n")
		writeMetadata(&b, in.MetadataPaths)
	}
	if slices.Contains(in.Sources, "source_principal") {
		b.WriteString("        source_principal: \"%DOWNSTREAM_PEER_URI_SAN%\"\n")
	}
	if len(in.Context) > 0 {
		b.WriteString("        # context_extensions are per-route ext_authz settings, which Envoy cannot log. Give each route\n")
		b.WriteString("        # the same values as route metadata (metadata.filter_metadata.floodgate) and log them. METADATA is\n")
		b.WriteString("        # built in since Envoy 1.34; older Envoy needs log_format.formatters: [envoy.formatter.metadata].\n")
		b.WriteString("        context_extensions:\n")
		for _, k := range in.Context {
			fmt.Fprintf(&b, "          %s: \"%%METADATA(ROUTE:floodgate:%s)%%\"\n", k, k)
		}
	}
	return b.String()
}

// writeMetadata writes the metadata object of the json_format: for each
// namespace, its keys' paths nested as the namespace nests them, each leaf
// %DYNAMIC_METADATA(NS:A:B)% (Envoy's operator takes the path after the
// namespace, each step after a colon: source/common/formatter/
// stream_info_formatter.cc, DynamicMetadataFormatter). When one key's path
// is a prefix of another's, the shorter one is logged whole; a namespace or
// step holding a character the operator cannot carry (":", ")", "%") is
// logged whole. Replay reads the nested objects back as the metadata.
func writeMetadata(b *strings.Builder, paths []extauthz.MetadataPath) {
	type node struct {
		leaf     bool
		children map[string]*node
		order    []string
	}
	roots := map[string]*node{}
	var nss []string
	for _, mp := range paths {
		r := roots[mp.Namespace]
		if r == nil {
			r = &node{children: map[string]*node{}}
			roots[mp.Namespace] = r
			nss = append(nss, mp.Namespace)
		}
		if strings.ContainsAny(mp.Namespace, ":)%") || slices.ContainsFunc(mp.Path, func(s string) bool { return s == "" || strings.ContainsAny(s, ":)%") }) {
			r.leaf = true
			continue
		}
		n := r
		for _, step := range mp.Path {
			c := n.children[step]
			if c == nil {
				c = &node{children: map[string]*node{}}
				n.children[step] = c
				n.order = append(n.order, step)
			}
			n = c
		}
		n.leaf = true
	}
	var write func(n *node, indent int, op string, key string)
	write = func(n *node, indent int, op, key string) {
		pad := strings.Repeat(" ", indent)
		if n.leaf || len(n.order) == 0 {
			fmt.Fprintf(b, "%s%s: \"%%DYNAMIC_METADATA(%s)%%\"\n", pad, yamlString(key), op)
			return
		}
		fmt.Fprintf(b, "%s%s:\n", pad, yamlString(key))
		for _, k := range n.order {
			write(n.children[k], indent+2, op+":"+k, k)
		}
	}
	for _, ns := range nss {
		write(roots[ns], 10, ns, ns)
	}
}

// yamlString writes s as a YAML scalar: plain when that reads back as the
// same string, double-quoted (JSON rules, which YAML accepts) otherwise.
func yamlString(s string) string {
	plain := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 && s[0] != '-' && s[0] != '.'
	if plain {
		return s
	}
	q, _ := json.Marshal(s)
	return string(q)
}

// sensitive reports whether a header usually carries a credential.
func sensitive(h string) bool {
	switch h {
	case "authorization", "proxy-authorization", "cookie":
		return true
	}
	return strings.Contains(h, "key") || strings.Contains(h, "token") || strings.Contains(h, "secret") || strings.Contains(h, "auth")
}
