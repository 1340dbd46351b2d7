package ratelimit

import "github.com/floodgate/floodgate/internal/door/ratelimit/xdsfeed"

// limitFeed is where the rate limit door takes its limits when a control
// plane pushes them (rls.xds) instead of files holding them (rls.config):
// the door builds its xdsfeed.Feed from rls.xds (a test hands it another
// through Env). The door applies every push the feed accepts, rls.burst on
// top, without a restart, and answers by rls.on_failure until the first.
// A feed validates a push as a file is (rls.Parse) before accepting it, so
// what it hands over always loads.
type limitFeed interface {
	// Latest returns the limits of the last push accepted; ok is false
	// before the first.
	Latest() (p Pushed, ok bool)
	// OnPush registers fn, called with each push the feed accepts before
	// it acknowledges it: when fn returns, the push is applied.
	OnPush(fn func(Pushed))
}

// Pushed is one set of limits a feed accepted.
type Pushed = xdsfeed.Pushed
