package bench

import (
	"errors"
	"time"

	"github.com/floodgate/floodgate/limiter/redistest/netfault"
)

// Redis a network hop away. On loopback a Redis round trip is tens of
// microseconds, as short as the thread wake-ups around it; a Redis on
// another host of the same zone answers in 0.5–1 ms. run --redis-rtt puts
// a delaying proxy between Redis and everything that talks to it as a
// client would (floodgate, envoyproxy/ratelimit, the (rt) and (naive)
// rows), so each round trip takes the hop's time more, and the latency
// table sets what a decision adds against (rt) measured through the same
// proxy. Redis' counters are read around it, directly.
//
// The proxy is netfault's, the tests' fault-injecting one, with a Latency
// of half the round trip each way: bytes keep their order, nothing limits
// the rate, and its delays hold below a millisecond (the last stretch of
// each is slept in the kernel; a Go timer in an otherwise idle process
// fires a millisecond late). Not toxiproxy's: no module the benchmark would
// then depend on, and that precision.

// startDelay listens on a free 127.0.0.1 port and forwards to target, a
// loopback address, adding rtt to every round trip. Close stops it.
func startDelay(target string, rtt time.Duration) (*netfault.Proxy, error) {
	if err := CheckLoopback(target); err != nil {
		return nil, err
	}
	if rtt <= 0 {
		return nil, errors.New("the delaying proxy needs a round trip above 0")
	}
	p, err := netfault.Start(target)
	if err != nil {
		return nil, err
	}
	p.Add(netfault.Latency{Dir: netfault.Both, Delay: rtt / 2})
	return p, nil
}
