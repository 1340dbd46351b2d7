package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestPauseReturnsOnceStopped: Pause returns with every thread of
// redis-server stopped, so nothing answers from then on; Resume brings it
// back.
func TestPauseReturnsOnceStopped(t *testing.T) {
	s := Start(t)
	c := s.Client()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	if n, err := runningThreads(s.cmd.Process.Pid); err != nil || n != 0 {
		t.Fatalf("after Pause: %d threads running (%v)", n, err)
	}
	// Its own client, whose read times out soon: go-redis reads by its
	// ReadTimeout, not by a context's deadline.
	quick := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, TLSConfig: s.TLSConfig,
		ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer quick.Close()
	if err := quick.Ping(context.Background()).Err(); err == nil {
		t.Error("a paused redis-server answered PING")
	}
	s.Resume()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Errorf("after Resume: %v", err)
	}
}
