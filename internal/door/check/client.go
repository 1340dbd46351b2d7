package check

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/floodgate/floodgate/internal/door"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// ClientArgs are what `floodgate check` sends: to Addr, Count Checks of
// Method Host Path from Source with Headers ("name: value") and Context
// extensions ("key=value"), in header_map with Raw, as a gRPC caller's
// with GRPC, each within Timeout.
type ClientArgs struct {
	Addr, Method, Host, Path, Source string
	Headers, Context                 []string
	Raw, GRPC                        bool
	Count                            int
	Timeout                          time.Duration
}

// Play sends the Checks a asks for and prints each decision, as Envoy
// would apply it, on stdout.
func Play(ctx context.Context, a ClientArgs, stdout, stderr io.Writer) int {
	hdrs := a.Headers
	if a.GRPC {
		hdrs = append([]string{"content-type: application/grpc"}, hdrs...)
	}
	req, err := Request(a.Method, a.Host, a.Path, a.Source, hdrs, a.Context, a.Raw)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate check:", err)
		return 2
	}
	return door.Ask(ctx, "floodgate check", a.Addr, a.Count, a.Timeout, stdout, stderr, func(ctx context.Context, conn *grpc.ClientConn) (string, error) {
		resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, req)
		if err != nil {
			return "", err
		}
		if a.GRPC {
			return describeGRPC(resp), nil
		}
		return describe(resp), nil
	})
}

// Request is the CheckRequest Envoy sends for a request of method, host
// and path from source with hdrs ("name: value", repeated names joined as
// Envoy joins them) and the context extensions ctxExt ("key=value"); in
// header_map with raw (encode_raw_headers).
func Request(method, host, path, source string, hdrs, ctxExt []string, raw bool) (*authv3.CheckRequest, error) {
	headers := map[string]string{":method": method, ":path": path, ":authority": host, ":scheme": "http"}
	var order []string
	for _, h := range hdrs {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("-H %q: want 'name: value'", h)
		}
		name = strings.ToLower(strings.TrimSpace(name))
		value = strings.TrimSpace(value)
		if old, dup := headers[name]; dup && !strings.HasPrefix(name, ":") {
			value = old + "," + value // Envoy joins repeated headers with a bare comma
		} else if !dup {
			order = append(order, name)
		}
		headers[name] = value
	}
	if net.ParseIP(source) == nil {
		return nil, fmt.Errorf("--source %q is not an IP address", source)
	}
	ext := map[string]string{}
	for _, kv := range ctxExt {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--context %q: want key=value", kv)
		}
		ext[k] = v
	}
	httpReq := &authv3.AttributeContext_HttpRequest{
		Method: method, Path: path, Host: host, Scheme: "http", Protocol: "HTTP/1.1",
	}
	if raw {
		hm := &corev3.HeaderMap{}
		for _, k := range append([]string{":authority", ":path", ":method", ":scheme"}, order...) {
			for _, v := range strings.Split(headers[k], ",") {
				hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
			}
		}
		httpReq.HeaderMap = hm
	} else {
		httpReq.Headers = headers
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: source, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 50000}}}}},
		ContextExtensions: ext,
		Request:           &authv3.AttributeContext_Request{Http: httpReq},
	}}, nil
}

// describe renders one decision on one line: verdict, headers, body.
func describe(resp *authv3.CheckResponse) string {
	var b strings.Builder
	var hs []*corev3.HeaderValueOption
	if resp.GetStatus().GetCode() == 0 {
		b.WriteString("allowed")
		hs = resp.GetOkResponse().GetResponseHeadersToAdd()
	} else {
		code := resp.GetDeniedResponse().GetStatus().GetCode()
		if code == 0 {
			code = 403 // what Envoy answers for a denial without a status
		}
		fmt.Fprintf(&b, "denied %d", int32(code))
		hs = resp.GetDeniedResponse().GetHeaders()
	}
	for _, h := range hs {
		fmt.Fprintf(&b, "  %s: %s", h.GetHeader().GetKey(), h.GetHeader().GetValue())
	}
	if body := resp.GetDeniedResponse().GetBody(); body != "" {
		b.WriteString("  body: ")
		b.WriteString(body)
	}
	return b.String()
}

// describeGRPC renders a decision as a gRPC client behind Envoy sees it.
// Envoy answers a denial to a gRPC request with a trailers-only response:
// the denied headers, grpc-status as they give it or else mapped from the
// HTTP status, the body as grpc-message and content-type application/grpc
// (Utility::prepareLocalReply, source/common/http/utility.cc;
// Grpc::Utility::httpToGrpcStatus, source/common/grpc/status.cc).
func describeGRPC(resp *authv3.CheckResponse) string {
	if resp.GetStatus().GetCode() == 0 {
		return describe(resp)
	}
	d := resp.GetDeniedResponse()
	code := int64(httpToGRPCStatus(int(d.GetStatus().GetCode())))
	var b strings.Builder
	for _, h := range d.GetHeaders() {
		switch k := h.GetHeader().GetKey(); k {
		case "grpc-status":
			if n, err := strconv.ParseInt(h.GetHeader().GetValue(), 10, 32); err == nil {
				code = n
			}
		case "content-type":
		default:
			fmt.Fprintf(&b, "  %s: %s", k, h.GetHeader().GetValue())
		}
	}
	if body := d.GetBody(); body != "" {
		b.WriteString("  grpc-message: ")
		b.WriteString(body)
	}
	return fmt.Sprintf("denied grpc-status: %d (%s)%s", code, grpcCodeName(codes.Code(code)), b.String())
}

// grpcCodeName spells a code as gRPC's documentation does: RESOURCE_EXHAUSTED.
func grpcCodeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && 'A' <= r && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// httpToGRPCStatus is Envoy's Grpc::Utility::httpToGrpcStatus
// (source/common/grpc/status.cc): the gRPC status Envoy sends a gRPC caller
// for a local reply whose headers carry none.
func httpToGRPCStatus(code int) codes.Code {
	switch code {
	case 0:
		return codes.PermissionDenied // a denial without a status is Envoy's 403
	case 400:
		return codes.Internal
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.Unimplemented
	case 429, 502, 503, 504:
		return codes.Unavailable
	}
	return codes.Unknown
}
