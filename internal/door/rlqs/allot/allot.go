// Package allot is the arithmetic of Envoy's rate limit quotas: how a
// global limit of r requests a second is divided among the Envoys that
// report demand for it (Share), and how a share becomes the token bucket an
// Envoy enforces (Bucket). It knows no store and no wire: the quota door
// (internal/door/rlqs) feeds it what the shared store says of the fleet and
// what each report says of one Envoy.
//
// The division is max-min fair (water-filling): while the fleet asks for
// more than the limit, every Envoy gets the same share, the level, except
// those that ask less, which get what they ask; the level is where the
// shares add up to the limit. While it asks for less, every Envoy gets its
// demand and an even part of what is left, room to grow. An Envoy's demand
// counts what it denied as well as what it allowed: a throttled Envoy
// still shows what it would admit.
//
// Why not shares in proportion to demand, which would give every request
// the same chance whichever Envoy it reaches: Envoy reports every five
// seconds, so an Envoy whose demand falls keeps its share until its next
// report, and what it no longer uses is lost to the fleet meanwhile. Under
// a proportional division an Envoy asking half of the fleet's demand holds
// half of the limit, and when its demand falls to the others' the fleet
// admits a third less for up to a report interval (measured:
// docs/performance.md, "Rate limit quotas"). Under the level no Envoy holds
// more than the others may use: the share a fall leaves unused is at most
// the level less the new demand. The quiet Envoys are also kept from being
// crowded out by a loud one, as in Doorman's fair share.
//
// What the division cannot see is left as it is, and measured: an Envoy
// whose demand fell below the level leaves part of its share unused until
// its next report, one whose demand rose is held to its share until then
// (and at that report is taken to ask what the others leave: Rose), and
// every change of an Envoy's assignment gives it its bucket's burst again.
// Envoys of other replicas are known by their number and demand added up
// (the shared store's registers), those throttled apart (Fleet), and
// divided for as two groups of Envoys asking the same each: exact while
// every throttled Envoy asks more than the level and every other less.
//
// Floats are fine here: a share is an estimate, rounded to a token bucket
// Envoy enforces in floating point itself (AtomicTokenBucketImpl); the
// buckets Floodgate counts in keep their exact integer arithmetic.
package allot

import (
	"math"
	"sort"
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
// demand over the interval (Demand), and so does a fall within FallSlack of
// the report or to no lower than FallDepth of the share.
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
	if f >= 1-FallSlack {
		return d
	}
	// Below zero only by what given overcounts: each new bucket is counted
	// full, and one that came after the fall added nothing to a full one.
	// Taken as a fall to nothing, not solved again with the new buckets
	// after the fall (closer to its demand): what a fallen Envoy is given
	// beyond its demand is lost to the fleet until its next report, what
	// it is denied goes to the others (TestTheFleetFollowsUnevenShiftingDemand
	// measured 0.83 of the limit for three seconds the other way).
	r := math.Max((float64(allowed)-s*f*t)/((1-f)*t), 0)
	if r > FallDepth*s {
		return d
	}
	return math.Min(r, d)
}

// Rose says whether a report shows the Envoy's demand rose through its
// share within the interval: it asked less than its share at its previous
// report (prev), and now more, on average over the interval, and denied
// requests. When it rose the counts cannot tell: below its share Envoy's
// bucket stays full and what it leaves unused is not counted anywhere, so
// nothing says how much of the interval was before the rise. Its demand
// over the interval, mixing before and after, would hold it to little more
// than its old share until its next report.
func Rose(prev float64, allowed, denied uint64, elapsed time.Duration, given float64) bool {
	d := Demand(allowed, denied, elapsed)
	if d < 0 || prev < 0 || denied == 0 || !(given > 0) || math.IsInf(given, 0) {
		return false
	}
	s := given / elapsed.Seconds()
	return prev < s && d > s
}

// Leftover is what the Envoy's fleet (Elsewhere and Others) leaves of the
// limit, asking what it asks: the most the Envoy could be given without
// taking from any other. An Envoy that Rose is taken to ask at least this
// until its next report says how much: the share it may leave unused
// would go to nobody else (every other Envoy has what it asks), and one
// whose demand rose past it is held to it, not to its old demand.
func Leftover(in Input) float64 {
	left := in.Limit - math.Max(in.Elsewhere.Demand, 0)
	for _, d := range in.Others {
		left -= math.Max(d, 0)
	}
	return math.Max(left, 0)
}

// FallSlack is the last part of an interval a fall is not looked for in:
// the counts put a fall there by their rounding alone, and a new demand
// read off so short a time (the divisor 1-f) is mostly that rounding. A
// saturated Envoy given tokens it never held (buckets replaced in an
// instant, each counted full) would otherwise be read as having fallen to
// nothing just before its report.
const FallSlack = 0.05

// FallDepth is how far below its share, as a part of it, an Envoy's
// demand must have fallen to be read as a fall. Counts of a saturated
// Envoy whose demand at the previous report was overestimated (a short
// interval, a burst) read as a shallow fall just as well; one read as
// fallen loses most of its share until its next report, while a shallow
// fall missed leaves little unused.
const FallDepth = 0.5

// UnusedSlack is the part of what an Envoy was given it may leave unused
// and still count as having used it all: Envoy's buckets refill
// continuously and a report's counts are cut at an instant.
const UnusedSlack = 0.05

// Fleet is what is known of a bucket's Envoys: their demand in requests a
// second, added up, and how many report it; and of those, the ones their
// replicas last assigned less than they ask (throttled: they ask more than
// the level), their demand added up and how many.
type Fleet struct {
	Demand, Envoys             float64
	ThrottledDemand, Throttled float64
}

// groups are the fleet as at most two groups of Envoys asking the same
// each, the throttled and the rest, none asking less than floor.
func (f Fleet) groups(floor float64) []group {
	if f.Envoys <= 0 {
		return nil
	}
	th := min(max(f.Throttled, 0), f.Envoys)
	thDemand := min(max(f.ThrottledDemand, 0), f.Demand)
	var gs []group
	if rest := f.Envoys - th; rest > 1e-9 {
		gs = append(gs, group{demand: math.Max((f.Demand-thDemand)/rest, floor), envoys: rest})
	}
	if th > 1e-9 {
		gs = append(gs, group{demand: math.Max(thDemand/th, floor), envoys: th})
	}
	return gs
}

// Input is what one Envoy's share is divided from.
type Input struct {
	// Limit is the bucket's limit, requests a second.
	Limit float64
	// Demand is the Envoy's (Demand), -1 when not known yet.
	Demand float64
	// Elsewhere are the bucket's Envoys on other replicas, as the shared
	// store last said (a window or two old), taken to ask the same each;
	// Others the assumed demands of the replica's other Envoys of the
	// bucket, by their latest reports.
	Elsewhere Fleet
	Others    []float64
}

// FloorFraction is the least share an Envoy gets, as a fraction of an even
// share of the limit: an idle Envoy keeps a trickle, so that the requests
// arriving before its next report are not all denied, at a cost to the
// fleet's total of at most a tenth of an even share each.
const FloorFraction = 0.1

// Assumed is the demand Share divides for: the Envoy's own, or when not
// known yet, the average Envoy's (the whole limit for the first), at most
// an even share of the limit: a fleet of Envoys new at once is assumed to
// ask alike, not as much as the first to report, which one heavy Envoy
// would make many times the rest.
func Assumed(in Input) float64 {
	if in.Demand >= 0 {
		return in.Demand
	}
	known, n := in.Elsewhere.Demand, in.Elsewhere.Envoys
	for _, d := range in.Others {
		known += d
		n++
	}
	if n < 1 || known <= 0 {
		return in.Limit
	}
	return math.Min(known/n, in.Limit/(n+1))
}

// Share is the Envoy's share of the limit, in requests a second, at most
// the whole limit: min(d, level) while the fleet (Elsewhere, Others and
// itself) asks for more than the limit, d plus an even part of what is left
// otherwise, d being its demand (Assumed) or the floor, whichever is more.
func Share(in Input) float64 {
	return Shares(in.Limit, append([]float64{Assumed(in)}, in.Others...), in.Elsewhere)[0]
}

// Shares are the shares of Envoys asking demands beside elsewhere, each
// as Share divides for it (the others being the rest of demands), at
// once: the level is the same for them all.
func Shares(limit float64, demands []float64, elsewhere Fleet) []float64 {
	out := make([]float64, len(demands))
	if limit <= 0 {
		return out
	}
	n := float64(len(demands)) + math.Max(elsewhere.Envoys, 0)
	floor := limit / n * FloorFraction
	// The fleet as groups of Envoys asking the same each, none less than
	// the floor: the floors are divided for, so the shares still add up
	// to the limit.
	groups := make([]group, 0, len(demands)+2)
	for _, d := range demands {
		groups = append(groups, group{demand: math.Max(d, floor), envoys: 1})
	}
	groups = append(groups, elsewhere.groups(floor)...)
	total := 0.0
	for _, g := range groups {
		total += g.demand * g.envoys
	}
	lv := math.Inf(1)
	if total > limit {
		lv = level(limit, groups)
	}
	for i, d := range demands {
		d = math.Max(d, floor)
		s := d + (limit-total)/n
		if total > limit {
			s = math.Min(d, lv)
		}
		out[i] = math.Min(s, limit)
	}
	return out
}

// group is envoys Envoys asking demand each (requests a second).
type group struct{ demand, envoys float64 }

// level is the water level of a limit over groups asking more than it in
// all: the x at which the groups' min(demand, x), each times its envoys,
// add up to the limit.
func level(limit float64, groups []group) float64 {
	sort.Slice(groups, func(i, j int) bool { return groups[i].demand < groups[j].demand })
	left, n := limit, 0.0
	for _, g := range groups {
		n += g.envoys
	}
	for _, g := range groups {
		// Every group from here on asks at least g.demand each: if an even
		// split of what is left is no more, that is the level.
		if left/n <= g.demand {
			return left / n
		}
		left -= g.demand * g.envoys
		n -= g.envoys
	}
	return math.Inf(1) // the groups ask for less than the limit
}
