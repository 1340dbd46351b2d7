package bench

import (
	"context"
	"net"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

// xdsNode is the node (b-xds)'s floodgate asks the management server for.
const xdsNode = "floodbench"

// xdsLimits are ratelimitConfig's limits as a RateLimitConfig resource: what
// Envoy Gateway's control plane pushes to its rate limit Deployment, here
// to (b-xds)'s floodgate.
func xdsLimits() *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "floodbench", Domain: "floodbench", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key:       "api_key",
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1000000},
	}}}
}

// startXDS serves go-control-plane's own ADS management server on a free
// loopback port, with xdsLimits for xdsNode, until stop.
func startXDS() (addr string, stop func(), err error) {
	snapCache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	snap, err := cachev3.NewSnapshot("1", map[resource.Type][]types.Resource{resource.RateLimitConfigType: {xdsLimits()}})
	if err != nil {
		return "", nil, err
	}
	if err := snapCache.SetSnapshot(context.Background(), xdsNode, snap); err != nil {
		return "", nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(context.Background(), snapCache, nil))
	go gs.Serve(lis)
	return lis.Addr().String(), gs.Stop, nil
}
