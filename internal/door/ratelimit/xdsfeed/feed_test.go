package xdsfeed

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/config"
)

// TestTheBackoffIsThePeers: envoyproxy/ratelimit's defaults (10s, 60s,
// factor 0.5, jitter) wait 10s every time; a factor of 2 doubles up to the
// maximum; jitter picks between the initial wait and that.
func TestTheBackoffIsThePeers(t *testing.T) {
	retry := func(initial, max time.Duration, factor float64, jitter bool) config.XDSRetry {
		r := config.XDSRetry{Factor: &factor, Jitter: &jitter}
		r.Initial.Duration, r.Max.Duration = initial, max
		return r
	}
	peer := retry(10*time.Second, time.Minute, 0.5, true)
	for n, r := range []float64{0, 0.5, 0.99} {
		if d := Backoff(peer, n, func() float64 { return r }); d != 10*time.Second {
			t.Errorf("the peer's defaults, attempt %d: %v, want 10s", n, d)
		}
	}
	doubling := retry(time.Second, 10*time.Second, 2, false)
	var got []string
	for n := range 6 {
		got = append(got, Backoff(doubling, n, nil).String())
	}
	if strings.Join(got, " ") != "1s 2s 4s 8s 10s 10s" {
		t.Errorf("factor 2 without jitter: %v", got)
	}
	jittered := retry(time.Second, 10*time.Second, 2, true)
	if lo, hi := Backoff(jittered, 3, func() float64 { return 0 }), Backoff(jittered, 3, func() float64 { return 0.5 }); lo != time.Second || hi != 4500*time.Millisecond {
		t.Errorf("jitter at attempt 3 (8s): %v and %v, want 1s and 4.5s", lo, hi)
	}
}
