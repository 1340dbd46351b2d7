package rls

import (
	"context"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/limiter"
)

// DecideFunc decides a plan's buckets as Floodgate decides any request's:
// the enforced ones together, all or nothing, the shadow ones on their own
// (never denying). res has one entry per bucket. An error means the store
// could not decide the enforced buckets and nothing was taken.
type DecideFunc func(ctx context.Context, buckets []Bucket, res []limiter.Result) (allowed bool, err error)

// OnFailure is what ShouldRateLimit answers when the store cannot decide.
type OnFailure int

const (
	// FailAllow answers OK: the request passes.
	FailAllow OnFailure = iota
	// FailDeny answers OVER_LIMIT.
	FailDeny
	// FailError answers the RPC with UNAVAILABLE, so that Envoy's own
	// failure_mode_deny setting of its rate limit filter decides.
	FailError
)

// ServiceOptions configure a Service.
type ServiceOptions struct {
	Hash      Hasher
	Decide    DecideFunc
	OnFailure OnFailure
	Response  ResponseOptions
	Logger    *zap.Logger
}

// Service answers Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from a
// configuration in envoyproxy/ratelimit's format. A decision is never an RPC
// error, unless OnFailure is FailError and the store could not decide.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg  atomic.Pointer[Config]
	opts ServiceOptions
}

// NewService returns a service deciding with cfg.
func NewService(cfg *Config, o ServiceOptions) *Service {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	s := &Service{opts: o}
	s.cfg.Store(cfg)
	return s
}

// SetConfig swaps in a new configuration: requests in flight finish on the
// old one.
func (s *Service) SetConfig(cfg *Config) { s.cfg.Store(cfg) }

// Config returns the configuration in use.
func (s *Service) Config() *Config { return s.cfg.Load() }

// ShouldRateLimit decides one request of Envoy's rate limit filter.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, err error) {
	plan := s.cfg.Load().Plan(req, s.opts.Hash)
	d := Decision{Allowed: true}
	if len(plan.Buckets) > 0 {
		d.Results = make([]limiter.Result, len(plan.Buckets))
		allowed, err := s.opts.Decide(ctx, plan.Buckets, d.Results)
		if err != nil {
			s.opts.Logger.Warn("store could not decide; failure mode answers", zap.Error(err), zap.String("domain", req.GetDomain()))
			return s.failed(&plan)
		}
		d.Allowed = allowed
		for i := range d.Results {
			d.Degraded = d.Degraded || d.Results[i].Degraded
		}
	}
	return plan.Respond(d, s.opts.Response), nil
}

// failed answers by the failure mode when the store could not decide.
func (s *Service) failed(plan *Plan) (*rlsv3.RateLimitResponse, error) {
	switch s.opts.OnFailure {
	case FailError:
		return nil, status.Error(codes.Unavailable, "floodgate: the rate limit store could not decide")
	case FailDeny:
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: okStatuses(plan, rlsv3.RateLimitResponse_OVER_LIMIT)}, nil
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: okStatuses(plan, rlsv3.RateLimitResponse_OK)}, nil
}

func okStatuses(plan *Plan, code rlsv3.RateLimitResponse_Code) []*rlsv3.RateLimitResponse_DescriptorStatus {
	out := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(plan.Items))
	for i := range out {
		out[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: code}
	}
	return out
}

// StoreDecider is a DecideFunc over a limiter.Store: the enforced buckets in
// one Take, the shadow buckets in another whose answer never denies.
func StoreDecider(store, shadow limiter.Store) DecideFunc {
	if shadow == nil {
		shadow = store
	}
	return func(ctx context.Context, buckets []Bucket, res []limiter.Result) (bool, error) {
		allowed := true
		for pass := 0; pass < 2; pass++ {
			isShadow := pass == 1
			var reqs []limiter.Request
			var idx []int
			for i := range buckets {
				if buckets[i].Shadow == isShadow {
					reqs, idx = append(reqs, buckets[i].Request), append(idx, i)
				}
			}
			if len(reqs) == 0 {
				continue
			}
			out := make([]limiter.Result, len(reqs))
			st := store
			if isShadow {
				st = shadow
			}
			ok, err := st.Take(ctx, reqs, out)
			if err != nil {
				if isShadow {
					continue
				}
				return false, err
			}
			for j, i := range idx {
				res[i] = out[j]
			}
			if !isShadow {
				allowed = ok
			}
		}
		return allowed, nil
	}
}
