package ratelimit

import (
	"errors"
	"maps"

	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/door/ratelimit/xdsfeed"
)

// provider is where the door's limits come from, as envoyproxy/ratelimit's
// src/provider: the files rls.config names, read with the configuration
// (so a reload brings them, and refuses broken ones before anything
// changes), or a control plane pushing them over xDS between reloads.
type provider interface {
	// limits are the limits to serve under c, rls.burst applied; false
	// while there are none yet (before a feed's first push).
	limits(c *door.Config) (*rls.Limits, bool)
	// onChange registers fn, called when the limits change between
	// reloads (a push); fn calls limits again.
	onChange(fn func())
}

// files provides the limits c's files hold (Limits).
type files struct{}

func (files) limits(c *door.Config) (*rls.Limits, bool) { return Limits(c), true }
func (files) onChange(func())                           {}

// fed provides the limits a feed pushed last, with c's bursts.
type fed struct {
	feed limitFeed
	log  *zap.Logger
}

func (f fed) onChange(fn func()) { f.feed.OnPush(func(Pushed) { fn() }) }

// limits are the last push's with c's bursts. A burst that names no limit
// of the push is left out and said: the control plane owns the limits,
// and a route it removed must not hold back the others' updates.
func (f fed) limits(c *door.Config) (*rls.Limits, bool) {
	p, ok := f.feed.Latest()
	if !ok {
		return nil, false
	}
	l, err := rls.Parse(p.Names, p.Sources)
	if err != nil { // the feed parsed it before accepting it
		f.log.Error("a pushed configuration the feed accepted does not load; the previous limits keep serving", zap.String("version", p.Version), zap.Error(err))
		return nil, false
	}
	bursts := c.RLS.Burst
	var refused rls.BurstErrors
	if err := l.SetBursts(bursts); errors.As(err, &refused) {
		bursts = maps.Clone(bursts)
		var keys []string
		for _, b := range refused {
			delete(bursts, b.Key)
			keys = append(keys, b.Key)
		}
		f.log.Warn("rls.burst names limits the push does not hold as they are named; the other bursts apply", zap.String("version", p.Version), zap.Strings("refused", keys), zap.Error(refused))
		l.SetBursts(bursts)
	}
	return l, true
}

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
