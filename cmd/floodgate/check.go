package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	checkdoor "github.com/floodgate/floodgate/internal/door/check"
	"github.com/floodgate/floodgate/internal/door/httpauthz"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/rlqs"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ", ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// check sends Envoy-shaped CheckRequests and prints each decision.
func check(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	addr := fs.String("addr", "127.0.0.1:9191", "Floodgate's gRPC address")
	path := fs.String("path", "/", "request path (with query string, as Envoy sends it)")
	method := fs.String("method", "GET", "request method")
	host := fs.String("host", "localhost", "request host (:authority)")
	source := fs.String("source", "127.0.0.1", "the connection's source address")
	count := fs.Int("count", 1, "how many requests to send")
	raw := fs.Bool("raw", false, "send headers in header_map, as Envoy does with encode_raw_headers")
	grpcCaller := fs.Bool("grpc", false, "play a gRPC client behind Envoy: send content-type application/grpc and print the gRPC status and trailers Envoy would answer with")
	timeout := fs.Duration("timeout", time.Second, "deadline of each Check (Envoy's ext_authz timeout)")
	var hdrs, ctxExt, descs listFlag
	fs.Var(&hdrs, "H", "request header 'name: value' (repeatable)")
	fs.Var(&ctxExt, "context", "context extension key=value, as a route's check_settings sets (repeatable)")
	rlsCall := fs.Bool("rls", false, "play Envoy's rate limit filter instead: send ShouldRateLimit with --domain and --descriptor")
	domain := fs.String("domain", "", "with --rls or --rlqs: the rate limit domain")
	fs.Var(&descs, "descriptor", "with --rls: a descriptor's entries key=value[,key=value...] (repeatable: one descriptor each)")
	hits := fs.Uint64("hits", 0, "with --rls: the request's hits_addend (0 means 1)")
	rlqsCall := fs.Bool("rlqs", false, "play one Envoy's rate limit quota filter instead: hold each --bucket of --domain, send --count requests in each before every report, --reports reports --interval apart, and print each bucket's assignment")
	var buckets listFlag
	fs.Var(&buckets, "bucket", "with --rlqs: a bucket_id's pairs key=value[,key=value...] (repeatable: one bucket each)")
	reports := fs.Int("reports", 1, "with --rlqs: how many reports to send (the first at once, as Envoy sends a new bucket's)")
	interval := fs.Duration("interval", rlqs.ReportInterval, "with --rlqs: time between reports (Envoy's is 5s, whatever its configuration says)")
	httpCall := fs.Bool("http", false, "play a proxy asking the HTTP authorization door (listen.http; --addr defaults to "+httpauthz.DefaultAddr+"): the client address goes in X-Forwarded-For")
	pathPrefix := fs.String("path-prefix", "", "with --http: Envoy's http_service path_prefix, sent before --path (http_authz.path_prefix)")
	uriHeader := fs.String("uri-header", "", "with --http: ask /_floodgate, carrying --path in this header and --method in --method-header, as nginx's recipe does (X-Original-URI)")
	methodHeader := fs.String("method-header", "", "with --http and --uri-header: the header that carries --method (X-Original-Method)")
	if !parseArgs(fs, args) {
		return 2
	}
	if *rlsCall {
		return ratelimit.Play(ctx, ratelimit.ClientArgs{Addr: *addr, Domain: *domain, Descriptors: descs, Hits: *hits, Count: *count, Timeout: *timeout}, stdout, stderr)
	}
	if *rlqsCall {
		return rlqs.Play(ctx, rlqs.ClientArgs{Addr: *addr, Domain: *domain, Buckets: buckets, Requests: *count, Reports: *reports,
			Interval: *interval, Timeout: *timeout}, stdout, stderr)
	}
	if *count < 1 || *count > 1_000_000 {
		fmt.Fprintln(stderr, "floodgate check: --count must be between 1 and 1000000")
		return 2
	}
	if *httpCall {
		a := httpauthz.ClientArgs{Addr: *addr, Method: *method, Host: *host, Path: *path, Source: *source, Prefix: *pathPrefix,
			URIHeader: *uriHeader, MethodHeader: *methodHeader, Headers: hdrs, Count: *count, Timeout: *timeout}
		addrSet := false
		fs.Visit(func(f *flag.Flag) { addrSet = addrSet || f.Name == "addr" })
		if !addrSet {
			a.Addr = httpauthz.DefaultAddr
		}
		return httpauthz.Play(ctx, a, stdout, stderr)
	}
	return checkdoor.Play(ctx, checkdoor.ClientArgs{Addr: *addr, Method: *method, Host: *host, Path: *path, Source: *source,
		Headers: hdrs, Context: ctxExt, Raw: *raw, GRPC: *grpcCaller, Count: *count, Timeout: *timeout}, stdout, stderr)
}
