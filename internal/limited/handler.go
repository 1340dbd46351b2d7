package limited

import (
	"encoding/json"
	"html/template"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Handler serves r's Snapshot at GET /debug/limited: JSON (Report) by
// default, or a small HTML page for a browser (one that asks for text/html,
// or ?format=html). ?top=N keeps N callers per policy (default: every
// caller a sketch follows, at most Options.Size). adminAddr is the address
// the admin port listens on when every peer that reaches it may read the
// page ("" when only loopback peers can): when it is not loopback, the page
// says that anyone who can reach the port can read it.
func Handler(r *Recorder, adminAddr string) http.Handler {
	exposed := adminAddr != "" && !loopback(adminAddr)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		q := req.URL.Query()
		top := r.size
		if s := q.Get("top"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				http.Error(w, "top must be a whole number >= 1 (callers per policy), got "+strconv.Quote(s), http.StatusBadRequest)
				return
			}
			top = n
		}
		var html bool
		switch f := q.Get("format"); f {
		case "html":
			html = true
		case "json":
		case "":
			html = prefersHTML(req.Header.Get("Accept"))
		default:
			http.Error(w, "format must be json or html, got "+strconv.Quote(f), http.StatusBadRequest)
			return
		}
		rep := r.Snapshot(top)
		w.Header().Set("Cache-Control", "no-store")
		if !html {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		page.Execute(w, pageData{Report: rep, Exposed: exposed, Addr: adminAddr})
	})
}

// prefersHTML reports whether an Accept header names text/html before any
// JSON type: a browser's does, curl's */* does not.
func prefersHTML(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "text/html", "application/xhtml+xml":
			return true
		case "application/json":
			return false
		}
	}
	return false
}

// loopback reports whether a listen address only accepts connections from
// this machine: a loopback IP or localhost (not an empty host, 0.0.0.0 or
// ::, which listen everywhere).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.Unmap().IsLoopback()
}

type pageData struct {
	Report  Report
	Exposed bool
	Addr    string
}

var page = template.Must(template.New("limited").Funcs(template.FuncMap{"section": newSection}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>floodgate: who is being limited</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{padding:.2em .8em;text-align:left;border-bottom:1px solid #ddd}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:13px}
.warn{background:#fff3cd;border:1px solid #e0c36b;padding:.6em .8em}
</style></head><body>
<h1>Who is being limited</h1>
{{if .Exposed}}<p class="warn"><strong>This admin port ({{.Addr}}) is not loopback-only:</strong> anyone who can reach it can read this page, with client addresses and hashed caller identities. Keep <code>listen.admin</code> on 127.0.0.1 and use <code>kubectl port-forward</code>, or restrict the port.</p>
{{end}}<p>Denials in the last {{.Report.WindowSeconds}} s on this replica, busiest policy first; refreshes every 5 s.
Secret-bearing keys (API keys, any <code>header:</code> source) show as the hashed identity the logs use; <code>client_ip</code> as the address or network it is bucketed by.
<a href="?format=json">JSON</a>.</p>
{{template "section" (section "Enforced policies" .Report.Policies)}}
{{template "section" (section "Shadow policies: would have denied" .Report.Shadow)}}
</body></html>
{{define "section"}}<h2>{{.Title}}</h2>
{{if not .Policies}}<p>No decisions in the window.</p>
{{end}}{{range .Policies}}<h3><code>{{.Name}}</code>: {{.Denied}} denied</h3>
{{if .Top}}<table><tr><th>caller</th><th>key</th><th class="n">denied</th><th class="n">allowed</th></tr>
{{range .Top}}<tr><td><code>{{.Caller}}</code></td><td><code>{{.Key}}</code></td><td class="n">{{.Denied}}{{if .Overcount}} (≤{{.Overcount}} over){{end}}</td><td class="n">{{.Allowed}}</td></tr>
{{end}}</table>
{{else}}<p>Nobody denied.</p>
{{end}}{{end}}{{end}}`))

// section is one table group of the page.
type section struct {
	Title    string
	Policies []PolicyReport
}

func newSection(title string, ps []PolicyReport) section { return section{title, ps} }
