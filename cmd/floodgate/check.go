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

// checkFlags are `floodgate check`'s flags, which `floodgate explain`
// takes too: the request, as each door's client sends it.
type checkFlags struct {
	addr, path, method, host, source       *string
	count                                  *int
	raw, grpcCaller, rlsCall, httpCall     *bool
	timeout                                *time.Duration
	hdrs, ctxExt, descs                    listFlag
	domain, pathPrefix, uriHeader, methodH *string
	hits                                   *uint64
}

// addCheckFlags registers check's flags on fs, --addr with its default
// and help.
func addCheckFlags(fs *flag.FlagSet, addr, addrHelp string) *checkFlags {
	f := &checkFlags{}
	f.addr = fs.String("addr", addr, addrHelp)
	f.path = fs.String("path", "/", "request path (with query string, as Envoy sends it)")
	f.method = fs.String("method", "GET", "request method")
	f.host = fs.String("host", "localhost", "request host (:authority)")
	f.source = fs.String("source", "127.0.0.1", "the connection's source address")
	f.count = fs.Int("count", 1, "how many requests to send")
	f.raw = fs.Bool("raw", false, "send headers in header_map, as Envoy does with encode_raw_headers")
	f.grpcCaller = fs.Bool("grpc", false, "play a gRPC client behind Envoy: send content-type application/grpc and print the gRPC status and trailers Envoy would answer with")
	f.timeout = fs.Duration("timeout", time.Second, "deadline of each Check (Envoy's ext_authz timeout)")
	fs.Var(&f.hdrs, "H", "request header 'name: value' (repeatable)")
	fs.Var(&f.ctxExt, "context", "context extension key=value, as a route's check_settings sets (repeatable)")
	f.rlsCall = fs.Bool("rls", false, "play Envoy's rate limit filter instead: send ShouldRateLimit with --domain and --descriptor")
	f.domain = fs.String("domain", "", "with --rls or --rlqs: the rate limit domain")
	fs.Var(&f.descs, "descriptor", "with --rls: a descriptor's entries key=value[,key=value...] (repeatable: one descriptor each)")
	f.hits = fs.Uint64("hits", 0, "with --rls: the request's hits_addend (0 means 1)")
	f.httpCall = fs.Bool("http", false, "play a proxy asking the HTTP authorization door (listen.http; --addr defaults to "+httpauthz.DefaultAddr+"): the client address goes in X-Forwarded-For")
	f.pathPrefix = fs.String("path-prefix", "", "with --http: Envoy's http_service path_prefix, sent before --path (http_authz.path_prefix)")
	f.uriHeader = fs.String("uri-header", "", "with --http: ask /_floodgate, carrying --path in this header and --method in --method-header, as nginx's recipe does (X-Original-URI)")
	f.methodH = fs.String("method-header", "", "with --http and --uri-header: the header that carries --method (X-Original-Method)")
	return f
}

// check sends Envoy-shaped CheckRequests and prints each decision.
func check(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	f := addCheckFlags(fs, "127.0.0.1:9191", "Floodgate's gRPC address")
	rlqsCall := fs.Bool("rlqs", false, "play one Envoy's rate limit quota filter instead: hold each --bucket of --domain, send --count requests in each before every report, --reports reports --interval apart, and print each bucket's assignment")
	var buckets listFlag
	fs.Var(&buckets, "bucket", "with --rlqs: a bucket_id's pairs key=value[,key=value...] (repeatable: one bucket each)")
	reports := fs.Int("reports", 1, "with --rlqs: how many reports to send (the first at once, as Envoy sends a new bucket's)")
	interval := fs.Duration("interval", rlqs.ReportInterval, "with --rlqs: time between reports (Envoy's is 5s, whatever its configuration says)")
	if !parseArgs(fs, args) {
		return 2
	}
	if *f.rlsCall {
		return ratelimit.Play(ctx, ratelimit.ClientArgs{Addr: *f.addr, Domain: *f.domain, Descriptors: f.descs, Hits: *f.hits, Count: *f.count, Timeout: *f.timeout}, stdout, stderr)
	}
	if *rlqsCall {
		return rlqs.Play(ctx, rlqs.ClientArgs{Addr: *f.addr, Domain: *f.domain, Buckets: buckets, Requests: *f.count, Reports: *reports,
			Interval: *interval, Timeout: *f.timeout}, stdout, stderr)
	}
	if *f.count < 1 || *f.count > 1_000_000 {
		fmt.Fprintln(stderr, "floodgate check: --count must be between 1 and 1000000")
		return 2
	}
	if *f.httpCall {
		a := httpauthz.ClientArgs{Addr: *f.addr, Method: *f.method, Host: *f.host, Path: *f.path, Source: *f.source, Prefix: *f.pathPrefix,
			URIHeader: *f.uriHeader, MethodHeader: *f.methodH, Headers: f.hdrs, Count: *f.count, Timeout: *f.timeout}
		addrSet := false
		fs.Visit(func(fl *flag.Flag) { addrSet = addrSet || fl.Name == "addr" })
		if !addrSet {
			a.Addr = httpauthz.DefaultAddr
		}
		return httpauthz.Play(ctx, a, stdout, stderr)
	}
	return checkdoor.Play(ctx, checkdoor.ClientArgs{Addr: *f.addr, Method: *f.method, Host: *f.host, Path: *f.path, Source: *f.source,
		Headers: f.hdrs, Context: f.ctxExt, Raw: *f.raw, GRPC: *f.grpcCaller, Count: *f.count, Timeout: *f.timeout}, stdout, stderr)
}
