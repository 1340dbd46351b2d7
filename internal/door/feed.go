package door

// Feed is where the rate limit door takes its limits when a control plane
// pushes them (rls.xds) instead of files holding them (rls.config). serve
// runs the feed for the life of the process and hands it to Build in
// Env.Feed; the door applies every push the feed accepts, rls.burst on
// top, without a restart, and answers by rls.on_failure until the first.
// A feed validates a push as a file is (rls.Parse) before accepting it,
// so what it hands over always loads.
type Feed interface {
	// Latest returns the limits of the last push accepted; ok is false
	// before the first.
	Latest() (p Pushed, ok bool)
	// OnPush registers fn, called with each push the feed accepts before
	// it acknowledges it: when fn returns, the push is applied.
	OnPush(fn func(Pushed))
}

// Pushed is one set of limits a feed accepted: files in envoyproxy/ratelimit's
// format, as rls.Parse reads them (names in order, each with its content).
type Pushed struct {
	Names   []string
	Sources map[string][]byte
	// Version names the push in logs (the feed's own count, or the
	// server's version).
	Version string
}
