package extauthz

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/redisstore"
)

// A gRPC downstream caller never sees the 429: Envoy turns a local reply to
// a gRPC request (content-type application/grpc or application/grpc+...) into a
// trailers-only gRPC response, and unless the denied headers already carry
// grpc-status it sets httpToGrpcStatus(429) = UNAVAILABLE (14), which gRPC
// clients retry at once (Utility::prepareLocalReply, source/common/http/utility.cc;
// Grpc::Utility::httpToGrpcStatus, source/common/grpc/status.cc; the vectors
// in testdata/envoy/envoy-vectors.json, grpc_local_reply). So a denial for a
// gRPC caller carries grpc-status 8 and a retry pushback of Retry-After.
func TestAGRPCCallerIsToldResourceExhaustedAndWhenToRetry(t *testing.T) {
	var vectors struct {
		Reply struct {
			When        string `json:"downstream_is_grpc_when"`
			HTTPStatus  int    `json:"http_status"`
			StatusIfNot int    `json:"grpc_status_if_headers_carry_none"`
		} `json:"grpc_local_reply"`
	}
	b, err := os.ReadFile("testdata/envoy/envoy-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vectors); err != nil || vectors.Reply.HTTPStatus != 429 || vectors.Reply.StatusIfNot != 14 {
		t.Fatalf("vectors: %+v %v", vectors.Reply, err)
	}

	p := PolicySpec{Name: "rpc", Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/3"}
	r := newRig(t, []PolicySpec{p}, Options{}, nil, ServerOptions{})
	for i, ct := range []string{"application/grpc", "application/grpc+proto"} {
		t.Run(ct, func(t *testing.T) {
			src := fmt.Sprintf("198.51.100.%d", i+1)
			req := checkRequest(src, map[string]string{"content-type": ct})
			if resp := r.check(t, req); !allowed(resp) || headerOf(resp, HeaderGRPCStatus) != "" {
				t.Fatalf("first call: %v", resp)
			}
			resp := r.check(t, req)
			if allowed(resp) || resp.GetDeniedResponse().GetStatus().GetCode() != 429 {
				t.Fatalf("second call: %v", resp)
			}
			if got := headerOf(resp, HeaderGRPCStatus); got != "8" {
				t.Errorf("grpc-status = %q, want 8 (RESOURCE_EXHAUSTED); without it Envoy sends 14 (UNAVAILABLE)", got)
			}
			if got, ra := headerOf(resp, HeaderGRPCPushback), headerOf(resp, HeaderRetryAfter); got != "3000" || ra != "3" {
				t.Errorf("grpc-retry-pushback-ms = %q with retry-after %q, want 3000 and 3", got, ra)
			}
		})
	}
	r.clock.Advance(3 * time.Second)

	// HTTP callers are unchanged.
	http := checkRequest("198.51.100.9", map[string]string{"content-type": "application/json"})
	r.check(t, http)
	resp := r.check(t, http)
	if allowed(resp) || headerOf(resp, HeaderGRPCStatus) != "" || headerOf(resp, HeaderGRPCPushback) != "" {
		t.Errorf("an HTTP caller's denial carries gRPC headers: %v", resp)
	}

	// A request that can never pass: the client must not retry.
	big := PolicySpec{Name: "big", Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1", CostHeader: "x-cost", MaxCost: 10}
	r2 := newRig(t, []PolicySpec{big}, Options{}, nil, ServerOptions{})
	resp = r2.check(t, checkRequest("198.51.100.1", map[string]string{"content-type": "application/grpc", "x-cost": "5"}))
	if allowed(resp) || headerOf(resp, HeaderGRPCStatus) != "8" || headerOf(resp, HeaderGRPCPushback) != "-1" {
		t.Errorf("an impossible gRPC request: grpc-status %q pushback %q, want 8 and -1", headerOf(resp, HeaderGRPCStatus), headerOf(resp, HeaderGRPCPushback))
	}
}

// Which callers are gRPC is Envoy's rule, not a looser one: content-type
// exactly application/grpc or starting with application/grpc+,
// case-sensitive (Grpc::Common::hasGrpcContentType, source/common/grpc/common.cc).
// Envoy answers anyone else (gRPC-Web, a differently cased type) with a plain
// HTTP 429, so gRPC headers on their denial would only confuse.
func TestOnlyEnvoysGRPCContentTypesAreGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc":           true,
		"application/grpc+proto":     true,
		"application/grpc+json":      true,
		"application/grpc-web":       false,
		"application/grpc-web+proto": false,
		"application/grpc-web-text":  false,
		"Application/GRPC":           false,
		"application/GRPC":           false,
		"application/grpcx":          false,
		"application/grp":            false,
		"application/json":           false,
		"":                           false,
	} {
		if got := isGRPC(ct); got != want {
			t.Errorf("isGRPC(%q) = %v, want %v", ct, got, want)
		}
	}
	p := PolicySpec{Name: "rpc", Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60"}
	r := newRig(t, []PolicySpec{p}, Options{}, nil, ServerOptions{})
	for i, ct := range []string{"application/grpc-web", "Application/GRPC", "application/grpcx"} {
		req := checkRequest(fmt.Sprintf("198.51.100.%d", 10+i), map[string]string{"content-type": ct})
		r.check(t, req)
		resp := r.check(t, req)
		if allowed(resp) || headerOf(resp, HeaderGRPCStatus) != "" || headerOf(resp, HeaderGRPCPushback) != "" {
			t.Errorf("%s: the denial is answered as gRPC (grpc-status %q), but Envoy treats the caller as HTTP", ct, headerOf(resp, HeaderGRPCStatus))
		}
	}
}

// The failure mode's denial tells a gRPC caller the same.
func TestAFailClosedDenialTellsAGRPCCallerWhenToRetry(t *testing.T) {
	c := unreachableRedis(t)
	r := newRig(t, []PolicySpec{apiPolicy}, Options{}, redisstore.New(c, ""), ServerOptions{OnFailure: decide.Deny, FailureRetryAfter: 2 * time.Second})
	req := fixture(t, "checkrequest-get-apikey.json")
	req.Attributes.Request.Http.Headers["content-type"] = "application/grpc"
	resp := r.check(t, req)
	if allowed(resp) || headerOf(resp, HeaderGRPCStatus) != "8" || headerOf(resp, HeaderGRPCPushback) != "2000" {
		t.Errorf("fail closed, gRPC caller: %v", resp)
	}
}
