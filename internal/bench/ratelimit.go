package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// envoyproxy/ratelimit, the Envoy-native Go limiter, is the comparison
// Floodgate is held to (docs/performance.md). floodbench can run it
// next to floodgate, on the same redis-server, as scenario (r): Envoy's
// rate-limit service API, one descriptor per request with the same 100,000
// distinct API keys as (b), a limit every request passes, and its shipped
// defaults otherwise (one Redis round trip per request, no local cache).

// ratelimitVersion is the envoyproxy/ratelimit commit make bench-ghz builds
// (the project publishes no module versions, only commits).
const ratelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"

const rlsMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// ratelimitConfig is (r)'s limit: 1,000,000 a second per API key, which
// every request passes, like (b)'s.
const ratelimitConfig = `domain: floodbench
descriptors:
  - key: api_key
    rate_limit:
      unit: second
      requests_per_unit: 1000000
`

// rlsRequest is what Envoy's rate-limit filter sends for a request whose
// route has one action, request_headers x-api-key -> descriptor api_key.
func rlsRequest(apiKey string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: "floodbench",
		Descriptors: []*commonrl.RateLimitDescriptor{{
			Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "api_key", Value: apiKey}},
		}},
		HitsAddend: 1,
	}
}

// distinctRLS is (r)'s workload: one request per caller, n API keys.
func distinctRLS(n int) workload {
	reqs := make([][]byte, n)
	for i := range reqs {
		b, err := proto.Marshal(rlsRequest("k_live_" + strconv.Itoa(10_000_000+i)))
		if err != nil {
			panic(err) // built above: cannot fail
		}
		reqs[i] = b
	}
	return workload{reqs: reqs, allow: true, method: rlsMethod, allowed: rlsAllowed, messages: func() (proto.Message, proto.Message) {
		return &rlsv3.RateLimitRequest{}, &rlsv3.RateLimitResponse{}
	}}
}

// rlsAllowed reads RateLimitResponse.overall_code (field 1, an enum) from
// the wire form: OK (1) allows, OVER_LIMIT (2) denies, anything else is an
// error (UNKNOWN, 0, is what ratelimit answers without a configuration).
func rlsAllowed(b []byte) (bool, error) {
	code, err := varintField(b, 1)
	if err != nil {
		return false, err
	}
	switch rlsv3.RateLimitResponse_Code(code) {
	case rlsv3.RateLimitResponse_OK:
		return true, nil
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return false, nil
	}
	return false, fmt.Errorf("rate-limit service answered overall_code %d", code)
}

// startRatelimit runs envoyproxy/ratelimit's service_cmd against redisAddr,
// every listener on 127.0.0.1, statsd off, and waits until a request is
// answered OK (its configuration loads after its listeners open).
func startRatelimit(ctx context.Context, bin, dir, redisAddr string) (*proc, error) {
	root := filepath.Join(dir, "ratelimit-runtime")
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "floodbench.yaml"), []byte(ratelimitConfig), 0o600); err != nil {
		return nil, err
	}
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	p := &proc{name: "envoyproxy/ratelimit", cmd: exec.Command(bin), done: make(chan struct{}),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	p.cmd.Env = append(os.Environ(),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[0]),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"USE_STATSD=false", "LOG_LEVEL=warn", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
	)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("envoyproxy/ratelimit: %w", err)
	}
	go p.follow(out, nil)
	c, err := dial(p.addr, 1, ClientLean)
	if err != nil {
		p.stop()
		return nil, err
	}
	defer c.close()
	req, err := proto.Marshal(rlsRequest("k_live_ready"))
	if err != nil {
		p.stop()
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		resp := &rawMsg{}
		err = c.conns[0].Invoke(cctx, rlsMethod, &rawMsg{b: req}, resp)
		cancel()
		if err == nil {
			var ok bool
			if ok, err = rlsAllowed(resp.b); ok {
				return p, nil
			}
		}
		if p.exited() || time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			return nil, fmt.Errorf("envoyproxy/ratelimit did not answer OK within 20s (%v):\n%s", err, p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
