package replay

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/door/check"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// checkRequestOf is the CheckRequest Envoy sends for r: pseudo-headers and
// lower-case headers in the headers map, the path with its query, the
// connection's address and port apart
// (source/extensions/filters/common/ext_authz/check_request_utils.cc,
// CheckRequestUtils::createHttpCheck).
func checkRequestOf(r *mreq) *authv3.CheckRequest {
	h := map[string]string{":method": r.method, ":path": r.path, ":authority": "api.example.com", ":scheme": "http"}
	for k, v := range r.headers {
		if v != nil {
			h[k] = *v
		}
	}
	ap := netip.MustParseAddrPort(r.source)
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: ap.Addr().String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(ap.Port())}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: r.method, Path: r.path, Host: "api.example.com", Scheme: "http", Protocol: "HTTP/1.1", Headers: h,
		}},
	}}
}

// TestReplayAgreesWithServe sends generated requests through floodgate's
// ext_authz server (the in-memory store, its clock injected and moved to
// each request's start time) over a real gRPC connection, replays the
// equivalent access log, shuffled as Envoy writes it, and compares the two
// decisions request by request.
func TestReplayAgreesWithServe(t *testing.T) {
	cfg, err := doors.Parse("model.yaml", []byte(modelConfig))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	reqs := generate(rng, 1500)

	clock := limiter.NewManualClock(time.UnixMilli(reqs[0].ms))
	store := storetest.Memory(clock)
	srv := extauthz.NewServer(cfg.Engine, store, extauthz.ServerOptions{})
	client := authv3.NewAuthorizationClient(extauthztest.Serve(t, srv, grpc.ForceServerCodecV2(grpccodec.Fast(check.Codec()))))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	served := map[*mreq]bool{}
	denied := 0
	for _, r := range reqs { // in start order, as Envoy asked
		clock.Advance(time.UnixMilli(r.ms).Sub(clock.Now()))
		resp, err := client.Check(ctx, checkRequestOf(r))
		if err != nil {
			t.Fatal(err)
		}
		served[r] = resp.GetStatus().GetCode() == 0
		if !served[r] {
			denied++
		}
	}
	if denied == 0 || denied == len(reqs) {
		t.Fatalf("serve denied %d of %d: the comparison needs both outcomes", denied, len(reqs))
	}

	const window = 5 * time.Second
	var lines []mline
	for _, l := range shuffle(rng, reqs, window) {
		if _, ok := served[l.req]; ok { // the requests serve saw: no late copies, no bad lines
			lines = append(lines, l)
		}
	}
	var log strings.Builder
	for _, l := range lines {
		log.WriteString(l.text + "\n")
	}
	replayed := map[int64]bool{}
	res, err := Run(ctx, strings.NewReader(log.String()), Options{Workers: 2, MaxLineBytes: DefaultMaxLineBytes, Engine: cfg.Engine, MaxBuckets: cfg.Store.Memory.MaxBuckets, ReorderWindow: window,
		OnDecision: func(line int64, allowed bool) { replayed[line] = allowed }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Decided != int64(len(reqs)) || res.Late != 0 {
		t.Fatalf("replay decided %d of %d lines (%d late)", res.Decided, len(reqs), res.Late)
	}
	wrong := 0
	for i, l := range lines {
		if got, want := replayed[int64(i+1)], served[l.req]; got != want {
			if wrong++; wrong <= 5 {
				t.Errorf("line %d (%s %s at %d): replay allowed = %v, serve %v", i+1, l.req.method, l.req.path, l.req.ms, got, want)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d decisions differ", wrong, len(lines))
	}

	// Policy by policy, serve's own counters (floodgate_decisions_total)
	// and replay's: an enforced policy counts a denial when its bucket was
	// short; a shadow policy counts shadow_denied whenever the shadow
	// policies could not all pay.
	res.Report(ReportOptions{Top: 10})
	for _, p := range res.Policies {
		count := func(result string) int64 {
			return int64(testutil.ToFloat64(srv.Metrics().Decisions.WithLabelValues(p.Name, result)))
		}
		allowed, denied := count("allowed"), count("denied")
		wantDenied := p.Denied
		if p.Mode == "shadow" {
			allowed, denied = count("shadow_allowed"), count("shadow_denied")
			wantDenied = p.Denied + p.DeniedByOther
		}
		if allowed != p.Allowed || denied != wantDenied {
			t.Errorf("%s: serve counted %d allowed, %d denied; replay %d allowed, %d denied", p.Name, allowed, denied, p.Allowed, wantDenied)
		}
		if denied == 0 {
			t.Errorf("%s: serve denied nothing: the comparison needs denials", p.Name)
		}
	}
}
