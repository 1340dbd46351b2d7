package replay

import (
	"fmt"
	"strings"

	"github.com/floodgate/floodgate/extauthz"
)

// DefaultNginxLogPath is where the printed nginx access log writes unless
// told.
const DefaultNginxLogPath = "/var/log/nginx/floodgate-replay.log"

// NginxLogFormat returns the nginx configuration that logs, one JSON line
// per request, what replay reads for e's policies as the HTTP door sees
// them behind nginx's recipe (e2e/nginx/nginx.conf): the original method,
// URI and host, and the headers the policies read, X-Forwarded-For as
// nginx sends it to the door ($proxy_add_x_forwarded_for), so that replay
// --door http reads the client address with the door's own rule
// (http_authz.trusted_hops). path is the file nginx writes.
//
// nginx's escape=json writes a missing header as "" (replay reads an empty
// value as no value), and $time_iso8601 has whole seconds, which replay's
// reorder window absorbs. Context extensions, dynamic metadata and a peer
// principal do not exist behind nginx: policies keyed on them read nothing
// there, as the HTTP door reads nothing for them.
func NginxLogFormat(e *extauthz.Engine, configName, path string) string {
	in := e.Inputs()
	var b strings.Builder
	printed := "floodgate replay --config " + configName + " --door http --print-log-format"
	if path != DefaultNginxLogPath {
		printed += " --print-log-to " + path
	}
	fmt.Fprintf(&b, "# nginx access log for `floodgate replay --config %s --door http --log %s`.\n", configName, path)
	fmt.Fprintf(&b, "# Printed by `%s`;\n# print it again when the policies change.\n", printed)
	b.WriteString("# log_format goes in the http block; access_log in the server or location that asks Floodgate.\n")
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
	if len(in.Context) > 0 || len(in.MetadataPaths) > 0 || containsString(in.Sources, "source_principal") {
		b.WriteString("# Some policies key on context extensions, dynamic metadata or the peer principal, which nginx\n")
		b.WriteString("# does not have: over the HTTP door they read nothing, and replay reads nothing for them either.\n")
	}
	b.WriteString("log_format floodgate_replay escape=json\n")
	b.WriteString(`    '{"start_time":"$time_iso8601","method":"$request_method","path":"$request_uri",'` + "\n")
	b.WriteString(`    '"authority":"$host","downstream_remote_address":"$remote_addr:$remote_port"`)
	if len(in.Headers) > 0 {
		b.WriteString(`,'` + "\n" + `    '"request_headers":{`)
		for i, h := range in.Headers {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"%s":"%s"`, h, nginxVariable(h))
		}
		b.WriteString("}")
	}
	b.WriteString("}';\n")
	fmt.Fprintf(&b, "access_log %s floodgate_replay;\n", path)
	return b.String()
}

// nginxVariable is the nginx variable of request header h: $http_ and its
// name with dashes as underscores; X-Forwarded-For as nginx sends it to
// the door, with the peer it saw appended.
func nginxVariable(h string) string {
	if h == "x-forwarded-for" {
		return "$proxy_add_x_forwarded_for"
	}
	return "$http_" + strings.ReplaceAll(h, "-", "_")
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
