package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// TestPipelinedScriptMatchesTheRationalModel is
// TestScriptMatchesTheRationalModel through the coalescer: the real script on
// an injected clock, checked decision by decision against the model.
func TestPipelinedScriptMatchesTheRationalModel(t *testing.T) {
	srv := redistest.Start(t)
	s := NewPipelined(srv.Client(), "", PipelineOptions{})
	defer s.Close()
	s.script = withInjectedClock(t, scriptSource)
	base := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	storetest.RunModel(t, 3, 2500, func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error) {
		now := base.Add(at)
		return s.take(context.Background(), reqs, res, now.Unix(), now.Nanosecond()/1000)
	})
}
