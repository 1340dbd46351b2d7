package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/adminapi"
)

// adminFlags are what a command calling the admin API needs: where, and
// the token.
type adminFlags struct {
	addr, tokenFile, as *string
	json                *bool
}

// addAdminFlags registers them on fs; addr, when not nil, is an --addr
// registered already.
func addAdminFlags(fs *flag.FlagSet, addr *string) *adminFlags {
	if addr == nil {
		addr = fs.String("addr", "127.0.0.1:9192", "Floodgate's admin address (listen.admin)")
	}
	return &adminFlags{
		addr:      addr,
		tokenFile: fs.String("token-file", "", "a file holding the token (admin_api.token_file's format; default: $"+adminapi.TokenEnv+")"),
		as:        fs.String("as", "", "with a --token-file of several tokens: the name of the one to present"),
		json:      fs.Bool("json", false, "print the API's JSON answer"),
	}
}

// client is the API client a's flags name.
func (a *adminFlags) client(addr string) (adminapi.Client, error) {
	tok, err := adminapi.ReadToken(*a.tokenFile, *a.as)
	return adminapi.Client{Addr: addr, Token: tok, HTTP: &httpClient}, err
}

// httpClient bounds every admin API call.
var httpClient = http.Client{Timeout: 10 * time.Second}

// print writes v as JSON with --json, else as text.
func (a *adminFlags) print(stdout io.Writer, v any, text string) {
	if *a.json {
		b, _ := json.MarshalIndent(v, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return
	}
	fmt.Fprintln(stdout, text)
}

// bucketCmd reads or adjusts one caller's bucket through the admin API:
// floodgate bucket get|add N|set N|reset --policy P --key VALUE.
func bucketCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const use = "floodgate bucket: want get, add N, set N or reset, then --policy P --key VALUE (or --id IDENTITY)"
	if len(args) == 0 {
		fmt.Fprintln(stderr, use)
		return 2
	}
	action, rest := args[0], args[1:]
	var change *adminapi.Change
	switch action {
	case "get":
	case "reset":
		change = &adminapi.Change{Reset: true}
	case "add", "set":
		if len(rest) == 0 {
			fmt.Fprintf(stderr, "floodgate bucket %s: give the tokens (a bucket) or requests (a quota), as in floodgate bucket %s 500 --policy P --key VALUE\n", action, action)
			return 2
		}
		n, err := strconv.ParseInt(rest[0], 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate bucket %s: %q is not a whole number of tokens or requests\n", action, rest[0])
			return 2
		}
		rest = rest[1:]
		if action == "add" {
			change = &adminapi.Change{Add: &n}
		} else {
			change = &adminapi.Change{Set: &n}
		}
	default:
		fmt.Fprintln(stderr, use)
		return 2
	}
	fs := newFlagSet("bucket "+action, stderr)
	af := addAdminFlags(fs, nil)
	policy := fs.String("policy", "", "the policy's name")
	key := fs.String("key", "", "the caller's value of the policy's key source, as the caller sends it (an API key, an address); empty: the shared bucket of requests without a key")
	source := fs.String("source", "", "the key source --key is read as, one of the policy's (default: its first)")
	id := fs.String("id", "", "the bucket's identity, as floodgate explain shows it, instead of --key")
	if !parseArgs(fs, rest) {
		return 2
	}
	if *policy == "" {
		fmt.Fprintln(stderr, "floodgate bucket: --policy is required")
		return 2
	}
	c, err := af.client(*af.addr)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate bucket:", err)
		return 2
	}
	b, err := c.Bucket(ctx, *policy, *source, *key, *id, change)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate bucket:", err)
		return 1
	}
	af.print(stdout, b, b.String())
	return 0
}

// explainCmd asks the admin API why a request would be limited. It takes
// `floodgate check`'s flags, --addr being the admin address: the request
// as Check sees it, or with --http as the HTTP door does, or with --rls
// the rate limit service's. --count, --raw, --grpc and --timeout change
// nothing of what is explained.
func explainCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("explain", stderr)
	f := addCheckFlags(fs, "127.0.0.1:9192", "Floodgate's admin address (listen.admin)")
	af := addAdminFlags(fs, f.addr)
	if !parseArgs(fs, args) {
		return 2
	}
	req := adminapi.ExplainRequest{Method: *f.method, Path: *f.path, Host: *f.host, Source: *f.source, Headers: f.hdrs, Context: f.ctxExt}
	if *f.httpCall {
		req.Door, req.Context = "http", nil
		req.PathPrefix, req.URIHeader, req.MethodHeader = *f.pathPrefix, *f.uriHeader, *f.methodH
	}
	if *f.rlsCall {
		if *f.domain == "" {
			fmt.Fprintln(stderr, "floodgate explain --rls: --domain is required")
			return 2
		}
		req = adminapi.ExplainRequest{Domain: *f.domain, Descriptors: f.descs, Hits: *f.hits}
	}
	c, err := af.client(*f.addr)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate explain:", err)
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, max(*f.timeout, 5*time.Second))
	defer cancel()
	e, err := c.Explain(cctx, req)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate explain:", err)
		return 1
	}
	af.print(stdout, e, strings.TrimSuffix(e.Text(), "\n"))
	return 0
}
