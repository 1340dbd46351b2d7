// Package allot is the arithmetic of Envoy's rate limit quotas: how a
// global limit of r requests a second is divided among the Envoys that
// report demand for it (Share), and how a share becomes the token bucket an
// Envoy enforces (Bucket). It knows no store and no wire: the quota door
// (internal/door/rlqs) feeds it what the shared store says of the fleet and
// what each report says of one Envoy.
//
// The division is proportional: every Envoy is assigned the same fraction
// of its own recent demand, r/D of it, D being the fleet's demand, so the
// shares add up to the limit whether demand exceeds it (each gets less than
// it asks) or not (each gets more, in proportion, and room to grow). An
// Envoy's demand counts what it denied as well as what it allowed: a
// throttled Envoy still shows what it would admit. What the division cannot
// see is left as it is, and measured (docs/performance.md, "Rate limit
// quotas"): an Envoy whose demand fell leaves part of its share unused
// until its next report, one whose demand rose is held to its old share
// until then, and every change of an Envoy's assignment gives it its
// bucket's burst again.
//
// Floats are fine here: a share is an estimate, rounded to a token bucket
// Envoy enforces in floating point itself (AtomicTokenBucketImpl); the
// buckets Floodgate counts in keep their exact integer arithmetic.
package allot

import (
	"math"
	"time"
)

// Demand is an Envoy's demand in requests a second: what one report says
// it allowed and denied, over the time since its previous report of the
// bucket. It is -1 (not known) when elapsed is not positive: a bucket's
// first report, which Envoy sends at once, counting the one request that
// created it (GlobalRateLimitClientImpl::createBucketImpl), over no time.
func Demand(allowed, denied uint64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return -1
	}
	return float64(allowed+denied) / elapsed.Seconds()
}

// Recent is an Envoy's demand at the end of a report's interval, where
// the report shows its demand fell through its share within it: it denied
// requests (its demand was above its share) and left part of what it was
// given unused (below it). Demand over the whole interval mixes the two,
// and would keep most of the share the Envoy no longer uses until its next
// report, an interval later; the counts tell how long each part lasted.
//
// prev is its demand at its previous report (-1: not known), given the
// tokens its assignments gave it over the interval (their refill, and each
// new bucket's max_tokens: Envoy makes it full). With demand prev above
// the share s = given / elapsed for a fraction f of the interval and d
// below it for the rest, denied = (prev - s)·f·elapsed and allowed =
// s·f·elapsed + d·(1-f)·elapsed: Recent is d. Every other report (no
// denial, the share all used, demand that rose, a first report) gives its
// demand over the interval (Demand), and so does a solution out of range.
func Recent(prev float64, allowed, denied uint64, elapsed time.Duration, given float64) float64 {
	d := Demand(allowed, denied, elapsed)
	t := elapsed.Seconds()
	if d < 0 || prev < 0 || denied == 0 || !(given > 0) || math.IsInf(given, 0) {
		return d
	}
	s := given / t
	unused := given - float64(allowed)
	if prev <= s || unused <= math.Max(UnusedSlack*given, 2) {
		return d
	}
	f := float64(denied) / ((prev - s) * t)
	if f >= 1 {
		return d
	}
	r := (float64(allowed) - s*f*t) / ((1 - f) * t)
	return math.Min(math.Max(r, 0), d)
}

// UnusedSlack is the part of what an Envoy was given it may leave unused
// and still count as having used it all: Envoy's buckets refill
// continuously and a report's counts are cut at an instant.
const UnusedSlack = 0.05

// Fleet is what is known of a bucket's Envoys: their demand in requests a
// second, added up, and how many report it.
type Fleet struct {
	Demand float64
	Envoys float64
}

// Input is what one Envoy's share is divided from.
type Input struct {
	// Limit is the bucket's limit, requests a second.
	Limit float64
	// Demand is the Envoy's (Demand), -1 when not known yet.
	Demand float64
	// Elsewhere are the bucket's Envoys on other replicas, as the shared
	// store last said (a window or two old); Others the replica's other
	// Envoys of the bucket, by their latest reports.
	Elsewhere, Others Fleet
}

// FloorFraction is the least share an Envoy gets, as a fraction of an even
// share of the limit: an idle Envoy keeps a trickle, so that the requests
// arriving before its next report are not all denied, at a cost to the
// fleet's total of at most a tenth of an even share each.
const FloorFraction = 0.1

// Assumed is the demand Share divides for: the Envoy's own, or when not
// known yet, the average Envoy's (the whole limit for the first).
func Assumed(in Input) float64 {
	if in.Demand >= 0 {
		return in.Demand
	}
	known := in.Elsewhere.Demand + in.Others.Demand
	n := in.Elsewhere.Envoys + in.Others.Envoys
	if n < 1 || known <= 0 {
		return in.Limit
	}
	return known / n
}

// Share is the Envoy's share of the limit, in requests a second, between
// the floor and the whole limit: Limit · d / D, d its demand and D the
// fleet's (Elsewhere, Others and its own).
//
// An Envoy whose demand is not known yet (its first report) is taken to
// want what the average Envoy of the bucket does, or the whole limit when
// it is the first: so a new Envoy gets a share at once, and the others give
// up theirs in proportion as its reports come in.
func Share(in Input) float64 {
	if in.Limit <= 0 {
		return 0
	}
	known := in.Elsewhere.Demand + in.Others.Demand
	n := in.Elsewhere.Envoys + in.Others.Envoys
	d := Assumed(in)
	total := known + d
	n = math.Max(n+1, 1)
	floor := in.Limit / n * FloorFraction
	if total <= 0 {
		return in.Limit / n
	}
	s := in.Limit * d / total
	return math.Min(math.Max(s, floor), in.Limit)
}
