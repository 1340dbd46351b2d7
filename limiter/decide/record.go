package decide

import "time"

// Recording who is limited: after a decision, a front end tells each
// bucket family's Tally how it went, for the report of the callers denied
// most (internal/limited serves it as /debug/limited). It is a single call
// beside the metrics, so the decide step does not depend on it.

// Recorder hands out the Tally of each bucket family a front end decides
// (a policy, a configured rate limit). A front end resolves its tallies
// once per configuration, not per decision.
type Recorder interface {
	Tally(name string, shadow bool) Tally
}

// Tally counts one bucket family's decisions by caller.
type Tally interface {
	// Record counts a decision on the bucket id at now: denied, or
	// allowed. name labels the caller, and is read only if the tally
	// starts following it, and before Record returns.
	Record(now time.Time, id string, name Namer, denied bool)
}

// Namer labels a caller for an operator: the key source that identified
// it and a value safe to show (an address, or a hashed identity, never an
// API key in the clear).
type Namer interface {
	Name() (key, caller string)
}
