package ratelimit

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate/floodgate/internal/door"
	"google.golang.org/grpc"
)

// ClientArgs are what `floodgate check --rls` sends: to Addr, Count
// requests of Domain with Descriptors (each "key=value[,key=value...]")
// and a hits_addend of Hits, each within Timeout.
type ClientArgs struct {
	Addr, Domain string
	Descriptors  []string
	Hits         uint64
	Count        int
	Timeout      time.Duration
}

// Play plays Envoy's rate limit filter: it sends ShouldRateLimit with
// the domain and descriptors given and prints each answer as the filter
// reads it: the overall code, then per descriptor its code, limit,
// remaining and time until reset.
func Play(ctx context.Context, a ClientArgs, stdout, stderr io.Writer) int {
	req, err := buildRLSRequest(a.Domain, a.Descriptors, a.Hits)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate check --rls:", err)
		return 2
	}
	return door.Ask(ctx, "floodgate check --rls", a.Addr, a.Count, a.Timeout, stdout, stderr, func(ctx context.Context, conn *grpc.ClientConn) (string, error) {
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
		if err != nil {
			return "", err
		}
		return Describe(resp), nil
	})
}

func buildRLSRequest(domain string, descriptors []string, hits uint64) (*rlsv3.RateLimitRequest, error) {
	if domain == "" {
		return nil, fmt.Errorf("--domain is required")
	}
	if len(descriptors) == 0 {
		return nil, fmt.Errorf("give at least one --descriptor key=value[,key=value...]")
	}
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: uint32(min(hits, math.MaxUint32))}
	for _, d := range descriptors {
		desc := &rlcommon.RateLimitDescriptor{}
		for _, kv := range strings.Split(d, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("--descriptor %q: want key=value[,key=value...]", d)
			}
			desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	return req, nil
}

// resetOf says when a status' limit resets: "reset 30s", or "no reset" for
// an answer that carries no duration (a cost larger than the limit, which
// waiting never lets through).
func resetOf(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	d := st.GetDurationUntilReset()
	if d == nil {
		return "no reset"
	}
	if t := d.AsDuration(); t%time.Second != 0 {
		return "reset " + t.String()
	}
	return fmt.Sprintf("reset %ds", d.GetSeconds())
}

// Describe renders an answer on one line.
func Describe(resp *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		b.WriteString("over limit")
	} else {
		b.WriteString("ok")
	}
	for i, st := range resp.GetStatuses() {
		fmt.Fprintf(&b, "  [%d] %s", i, strings.ToLower(st.GetCode().String()))
		switch lim := st.GetCurrentLimit(); {
		case lim != nil:
			name := lim.GetName()
			if name != "" {
				name = " " + name
			}
			fmt.Fprintf(&b, "%s %d/%s remaining %d %s", name, lim.GetRequestsPerUnit(), strings.ToLower(lim.GetUnit().String()),
				st.GetLimitRemaining(), resetOf(st))
		case st.GetLimitRemaining() == math.MaxUint32:
			b.WriteString(" unlimited")
		default:
			b.WriteString(" no limit")
		}
	}
	if body := resp.GetRawBody(); len(body) > 0 {
		fmt.Fprintf(&b, "  body: %s", body)
	}
	return b.String()
}
