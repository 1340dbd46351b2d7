package httpauthz

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate/floodgate/extauthz"
)

// DefaultAddr is where `floodgate check --http` asks unless told: the
// address the configuration reference gives listen.http.
const DefaultAddr = "127.0.0.1:9193"

// ClientArgs are check's flags as --http reads them.
type ClientArgs struct {
	Addr, Method, Host, Path, Source string
	Prefix, URIHeader, MethodHeader  string
	Headers                          []string
	Count                            int
	Timeout                          time.Duration
}

// Play plays a proxy asking the HTTP authorization door: Envoy's
// http_service (the request's own method, --path-prefix then --path), or
// with --uri-header a proxy that asks one fixed URI and carries the
// original in headers (nginx's recipe). The client address goes in
// X-Forwarded-For, as the proxy appends the peer it saw. Each answer is
// printed as check prints a Check's.
func Play(ctx context.Context, a ClientArgs, stdout, stderr io.Writer) int {
	if (a.URIHeader == "") != (a.MethodHeader == "") {
		fmt.Fprintln(stderr, "floodgate check --http: give --uri-header and --method-header together (http_authz.original_uri_header and original_method_header)")
		return 2
	}
	// Not http.DefaultTransport: no proxy from the environment between
	// check and the door.
	client := &http.Client{Timeout: a.Timeout, Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	for i := 1; i <= a.Count; i++ {
		req, err := Request(ctx, a)
		if err != nil {
			fmt.Fprintln(stderr, "floodgate check --http:", err)
			return 2
		}
		resp, err := client.Do(req)
		if err != nil {
			fmt.Fprintf(stderr, "#%d error: %v\n", i, err)
			return 1
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		fmt.Fprintf(stdout, "#%d %s\n", i, describeHTTP(resp.StatusCode, resp.Header, string(body)))
	}
	return 0
}

// Request is the authorization request Play sends the door at a.Addr:
// Envoy's http_service's (the request's own method, a.Prefix then
// a.Path), or with a.URIHeader the fixed URI nginx's recipe asks, the
// original in headers; the client address, a.Source, appended to
// X-Forwarded-For as the proxy appends the peer it saw.
func Request(ctx context.Context, a ClientArgs) (*http.Request, error) {
	method, target := a.Method, a.Prefix+a.Path
	if a.URIHeader != "" {
		method, target = http.MethodGet, "/_floodgate"
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+a.Addr+target, nil)
	if err != nil {
		return nil, err
	}
	req.Host = a.Host
	for _, h := range a.Headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("-H %q: want 'name: value'", h)
		}
		req.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	req.Header.Add("X-Forwarded-For", a.Source)
	if a.URIHeader != "" {
		req.Header.Set(a.URIHeader, a.Path)
		req.Header.Set(a.MethodHeader, a.Method)
	}
	return req, nil
}

// doorHeaders are the headers the door answers with, in the order it
// renders them (a Check's order).
var doorHeaders = []string{
	extauthz.HeaderLimit, extauthz.HeaderRemaining, extauthz.HeaderReset, extauthz.HeaderPolicy, extauthz.HeaderRateLimit,
	extauthz.HeaderRetryAfter, extauthz.HeaderDegraded, extauthz.HeaderGRPCStatus, extauthz.HeaderGRPCPushback, extauthz.HeaderContentType,
}

// describeHTTP renders one answer of the door on one line, as describe
// renders a Check's: a 2xx is allowed, another status below 500 a denial
// the client gets, a 5xx the proxy's own failure.
func describeHTTP(status int, h http.Header, body string) string {
	var b strings.Builder
	switch {
	case status >= 200 && status < 300:
		b.WriteString("allowed")
		body = ""
	case status < 500:
		fmt.Fprintf(&b, "denied %d", status)
	default:
		fmt.Fprintf(&b, "error %d (the proxy's own failure mode decides)", status)
	}
	for _, k := range doorHeaders {
		for _, v := range h.Values(k) {
			fmt.Fprintf(&b, "  %s: %s", k, v)
		}
	}
	if body = strings.TrimSpace(body); body != "" {
		b.WriteString("  body: ")
		b.WriteString(body)
	}
	return b.String()
}
