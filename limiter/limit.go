// Package limiter is Floodgate's token-bucket engine: the exact arithmetic of a
// bucket, the Store abstraction that applies it atomically to one or several
// buckets, and the shared types every store and caller speaks.
//
// A bucket holds at most Capacity tokens and refills continuously at Rate
// tokens per second. A bucket never seen before is full. A request (Take)
// costing n tokens is allowed iff the bucket holds at least n tokens, and
// then n are taken; a Charge takes its cost whatever the bucket holds, into
// a debt of at most one capacity; a Refund gives tokens back (see Kind). All
// arithmetic is integer: time is counted in steps of a microsecond (coarser
// for a few long limits) and tokens in "units", a per-limit subdivision of a
// token chosen so that exactly G units accrue per step (see Limit). Nothing
// drifts, however many decisions.
package limiter

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Errors returned for input a caller can get wrong. They are wrapped with
// detail; test with errors.Is.
var (
	ErrCapacity  = errors.New("limiter: capacity must be a whole number > 0")
	ErrRate      = errors.New("limiter: refill rate must be a finite number > 0")
	ErrPrecision = errors.New("limiter: capacity and refill rate too large or too fine for exact integer arithmetic")
	ErrRateRange = errors.New("limiter: refill rate too large or too finely divided for exact integer arithmetic")
	ErrCost      = errors.New("limiter: cost must be a whole number >= 0")
	ErrKind      = errors.New("limiter: unknown request kind (Take, Charge or Refund)")
	ErrKey       = errors.New("limiter: bucket name and identity must not be empty")
	ErrNoBuckets = errors.New("limiter: a decision needs at least one bucket")
	ErrDuplicate = errors.New("limiter: a decision names the same bucket twice")
)

// MaxExact bounds every intermediate value of the bucket arithmetic. The Redis
// script runs in Lua, whose numbers are IEEE doubles: integers are exact only
// up to 2^53. Keeping capacity (in units) and the per-millisecond (or
// per-step) gain under 2^50 leaves headroom for the sums the script forms
// and for a debt of a whole capacity (2·C·K).
const MaxExact = 1 << 50

const microsPerSecond = 1_000_000

// Rate is a refill rate in tokens per second, held as an exact fraction so
// that 0.5/s, 1/60 s and 10000/s are all represented without rounding.
// The zero Rate is invalid.
type Rate struct {
	num, den int64 // tokens per second = num/den, reduced, both > 0
}

// PerSecond returns a rate of n tokens per second.
func PerSecond(n int64) (Rate, error) { return NewRate(n, 1) }

// NewRate returns the rate num/den tokens per second.
func NewRate(num, den int64) (Rate, error) {
	if num <= 0 || den <= 0 {
		return Rate{}, fmt.Errorf("%w (got %d/%d)", ErrRate, num, den)
	}
	g := gcd(num, den)
	return Rate{num / g, den / g}, nil
}

// ParseRate reads a rate in tokens per second written as a decimal ("2",
// "0.5", "1e3") or a fraction ("1/60" = one token a minute).
func ParseRate(s string) (Rate, error) {
	t := strings.TrimSpace(s)
	r, ok := new(big.Rat).SetString(t)
	if !ok || t == "" || strings.ContainsAny(t, "xXpP_") {
		return Rate{}, fmt.Errorf("%w (got %q)", ErrRate, s)
	}
	if r.Sign() <= 0 {
		return Rate{}, fmt.Errorf("%w (got %q)", ErrRate, s)
	}
	if !r.Num().IsInt64() || !r.Denom().IsInt64() {
		return Rate{}, fmt.Errorf("%w (got %q; %s)", ErrRateRange, s, exactRates)
	}
	return NewRate(r.Num().Int64(), r.Denom().Int64())
}

// RateFromFloat converts a float rate through its shortest decimal form, so
// 0.1 means one tenth, not the binary fraction nearest to it.
func RateFromFloat(f float64) (Rate, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
		return Rate{}, fmt.Errorf("%w (got %v)", ErrRate, f)
	}
	return ParseRate(strconv.FormatFloat(f, 'g', -1, 64))
}

// IsZero reports whether r is the (invalid) zero Rate.
func (r Rate) IsZero() bool { return r.den == 0 }

// Fraction returns the rate as num/den tokens per second, reduced.
func (r Rate) Fraction() (num, den int64) { return r.num, r.den }

// String renders the rate as a decimal when it has a short one, else num/den.
func (r Rate) String() string {
	if r.den == 1 {
		return strconv.FormatInt(r.num, 10)
	}
	if f := new(big.Rat).SetFrac64(r.num, r.den); f.IsInt() || isDecimal(r.den) {
		return strings.TrimRight(strings.TrimRight(f.FloatString(18), "0"), ".")
	}
	return strconv.FormatInt(r.num, 10) + "/" + strconv.FormatInt(r.den, 10)
}

// isDecimal reports whether 1/den has a terminating decimal expansion.
func isDecimal(den int64) bool {
	for den%2 == 0 {
		den /= 2
	}
	for den%5 == 0 {
		den /= 5
	}
	return den == 1
}

// Limit is the shape of a token bucket: Capacity tokens, refilled at Rate.
//
// Invariant (established by NewLimit): time is counted in steps of R
// microseconds (Resolution), one token is K units, and exactly G units
// accrue per step: with D = den·10⁶ and P = num·R, K = D/gcd(P, D) and
// G = P/gcd(P, D), so G units a step at K units a token is exactly the rate.
// Capacity·K is at most MaxExact, and so is the gain over the longer of a
// millisecond and a step, so every step of the arithmetic, a debt of a whole
// capacity included, is an exact integer both in Go and in Lua.
//
// R is the finest power of ten of microseconds, from 1 µs to MaxResolution,
// for which the invariant holds: 1 µs for every limit whose capacity and
// rate allow it (most do), coarser only for a long unit with a large
// capacity (1001 a month: 10 µs; 2^32 tokens a year: up to 1000 s). A rate
// whose gain does not fit at 1 µs (above 10^12 tokens a second or so) is
// refused, not stepped: coarser steps are for long units.
//
// The refill is exact on the grid of steps (every R µs from the clock's
// origin: the Unix epoch in Redis, the store's start in memory). A bucket
// holds at each instant what a continuous bucket would hold at the start of
// that instant's step, each decision counted at the start of its own step:
// between two decisions the refill credited differs from the continuous
// refill r·Δt by less than one step's worth, r·R (never more than one step
// late; early only by the part of a step already gone at the first
// decision). ResetAfter and RetryAfter are counted from the start of the
// current step, so they may exceed the true wait by less than R. At 1 µs
// this is the microsecond clock every store has always read.
type Limit struct {
	Capacity int64
	Rate     Rate

	k int64 // units per token
	g int64 // units gained per step
	// exp: a step is 10^exp microseconds. An int64, as every field is, so
	// the struct has no padding and hashes as plain memory: stores key
	// maps by Limit on their hot path.
	exp int64
}

// MaxResolution is the coarsest step NewLimit chooses. A year's worth of
// any requests_per_unit a uint32 holds, with a capacity up to 2^32 tokens,
// needs it at worst (one step is then 1/31536 of the window).
const MaxResolution = 1000 * time.Second

// maxExp is MaxResolution as a power of ten of microseconds.
const maxExp = 9

// pow10 holds 10^i for the resolutions NewLimit may choose.
var pow10 = [maxExp + 1]int64{1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000}

// exactRates says which rates are exact for certain: a whole number n of
// tokens a second gains at most n units a microsecond.
var exactRates = fmt.Sprintf("a whole number of tokens a second up to %d is always exact", int64(MaxExact/1000))

// NewLimit validates capacity and rate and derives the integer units and
// the resolution (see Limit).
func NewLimit(capacity int64, rate Rate) (Limit, error) {
	if capacity <= 0 {
		return Limit{}, fmt.Errorf("%w (got %d)", ErrCapacity, capacity)
	}
	if rate.num <= 0 || rate.den <= 0 {
		return Limit{}, fmt.Errorf("%w (got the zero rate)", ErrRate)
	}
	if rate.den > MaxExact/microsPerSecond {
		return Limit{}, fmt.Errorf("%w (got %s, whose denominator is above %d; %s)", ErrRateRange, rate, int64(MaxExact/microsPerSecond), exactRates)
	}
	d := rate.den * microsPerSecond
	// A rate whose gain a millisecond does not fit at a microsecond (above
	// 10^12 tokens a second or so) is refused as it always was: coarser
	// steps are for long units, not for fast rates.
	if g := rate.num / gcd(rate.num, d); g > MaxExact/1000 {
		return Limit{}, fmt.Errorf("%w (got %s; %s)", ErrRateRange, rate, exactRates)
	}
	var k int64
	for exp := 0; exp <= maxExp; exp++ {
		r := pow10[exp]
		// gcd(num·R, D) = gcd(R, D)·gcd(num, D/gcd(R, D)), as R/gcd(R, D)
		// and D/gcd(R, D) share no factor: nothing here overflows.
		gr := gcd(r, d)
		dr := d / gr
		gn := gcd(rate.num, dr)
		per, rr := rate.num/gn, r/gr
		k = dr / gn
		if per > MaxExact/rr || per*rr > MaxExact/max(1000/r, 1) {
			continue // the gain over a millisecond (or a step) is above MaxExact
		}
		if capacity > MaxExact/k {
			continue
		}
		return Limit{Capacity: capacity, Rate: rate, k: k, g: per * rr, exp: int64(exp)}, nil
	}
	return Limit{}, fmt.Errorf("%w: capacity %d at rate %s needs %d units per token even counted in steps of %v (capacity × units must stay below 2^50)", ErrPrecision, capacity, rate, k, MaxResolution)
}

// MustLimit builds a limit from a capacity and a rate written as ParseRate
// reads it; it panics on invalid input, so use it for constants only.
func MustLimit(capacity int64, rate string) Limit {
	r, err := ParseRate(rate)
	if err == nil {
		var l Limit
		if l, err = NewLimit(capacity, r); err == nil {
			return l
		}
	}
	panic(err)
}

// Valid reports whether l was built by NewLimit.
func (l Limit) Valid() bool { return l.k > 0 && l.g > 0 && l.Capacity > 0 }

// Units returns K, the units in one token, and G, the units gained per
// step (per microsecond at the usual resolution). Stores use them; callers
// rarely need them.
func (l Limit) Units() (perToken, perStep int64) { return l.k, l.g }

// Resolution is the step the bucket refills by (see Limit): 1 µs unless
// the limit needs a coarser one.
func (l Limit) Resolution() time.Duration { return micros(pow10[l.exp]) }

// step is the resolution in microseconds.
func (l Limit) step() int64 { return pow10[l.exp] }

// CapacityUnits is the capacity measured in units (C·K).
func (l Limit) CapacityUnits() int64 { return l.Capacity * l.k }

// MaxMissing is the most units a bucket can miss: a full capacity below
// empty (C·K of debt, 2·C·K in all). A Charge never takes a bucket below
// it (see Charge).
func (l Limit) MaxMissing() int64 { return 2 * l.Capacity * l.k }

// String renders the limit as "capacity C, refill r/s".
func (l Limit) String() string {
	return fmt.Sprintf("capacity %d, refill %s/s", l.Capacity, l.Rate)
}

// Result returns what a caller needs to know about one bucket, given the
// units missing from it (0 = full, above CapacityUnits = in debt) after the
// decision, the request's kind and cost, and, for a Take, whether the cost
// was taken or could have been (allowed).
//
// Remaining = floor(tokens), and 0 in debt. ResetAfter = time until the
// bucket is full again (longer in debt). InDebt: the bucket holds less
// than nothing. A Take not allowed has RetryAfter = time until the bucket
// holds its cost (one whole token for a look of cost 0), or
// ExceedsCapacity and no RetryAfter when the cost is above the capacity:
// such a request can never pass. A Charge or a Refund is always Allowed;
// one that leaves its bucket in debt has RetryAfter = time until one whole
// token is back (until a look would pass), else none. Durations count from
// the start of the current step (see Limit), and stop at MaxDuration.
func (l Limit) Result(missing int64, kind Kind, cost int64, allowed bool) Result {
	full := l.CapacityUnits()
	r := Result{
		Allowed:    allowed || kind != Take,
		Limit:      l.Capacity,
		ResetAfter: l.wait(missing),
		InDebt:     missing > full,
	}
	if missing < full {
		r.Remaining = (full - missing) / l.k
	}
	if kind != Take {
		if r.InDebt {
			r.RetryAfter = l.wait(missing + l.k - full)
		}
		return r
	}
	if cost > l.Capacity {
		r.ExceedsCapacity = true
		return r
	}
	if !allowed {
		r.RetryAfter = l.wait(missing + max(cost, 1)*l.k - full)
	}
	return r
}

// wait is the time, from the start of the current step, until units more
// have accrued; MaxDuration when that is longer.
func (l Limit) wait(units int64) time.Duration {
	steps := ceilDiv(units, l.g)
	if l.exp == 0 { // the usual step, a microsecond: no division by it
		if steps > int64(MaxDuration/time.Microsecond) {
			return MaxDuration
		}
		return micros(steps)
	}
	if steps > int64(MaxDuration/time.Microsecond)/l.step() {
		return MaxDuration
	}
	return micros(steps * l.step())
}

// MaxDuration is the longest ResetAfter or RetryAfter a Result reports
// (time.Duration's largest, 292 years): a slow bucket with a large
// capacity may need longer, a billion years for 2^32 tokens at one a year.
const MaxDuration = time.Duration(math.MaxInt64)

// Refilled returns the units missing at microsecond to from a bucket that
// was missing m units at microsecond from (from <= to, both counted from
// the clock's origin, whose grid of steps the stores share; see Limit). It
// never overflows: a bucket idle long enough is full.
func (l Limit) Refilled(m, from, to int64) int64 {
	steps := to - from // steps of a microsecond, the usual: no division by it
	if l.exp > 0 {
		steps = floorDiv(to, l.step()) - floorDiv(from, l.step())
	}
	if m <= 0 || steps <= 0 {
		return max(m, 0)
	}
	if steps >= ceilDiv(m, l.g) {
		return 0
	}
	return m - steps*l.g
}

// Convert returns the units missing from a bucket under l that was missing m
// units under from, the limit it was held under until now: a policy's
// numbers changed, and the bucket keeps the tokens it held, capped at l's
// capacity (and a debt at l's bound, MaxMissing) and rounded down to l's
// unit (1/K of a token; a debt rounds up), then refills at l's rate. A
// bucket full under from is full under l, as a bucket never seen is. Both
// stores apply it at the first decision that names the bucket with l.
func (l Limit) Convert(from Limit, m int64) int64 {
	if m <= 0 || from == l {
		return max(m, 0)
	}
	full, fromFull := l.CapacityUnits(), from.CapacityUnits()
	if m <= fromFull {
		have := fromFull - m // units of from
		q, _, ok := mulDiv(have, l.k, from.k)
		if !ok || q >= full {
			return 0 // far above full
		}
		return full - q
	}
	debt := min(m, from.MaxMissing()) - fromFull // units of from
	q, rem, ok := mulDiv(debt, l.k, from.k)
	if rem > 0 {
		q++
	}
	if !ok || q >= full {
		return l.MaxMissing()
	}
	return full + q
}

// mulDiv returns floor(a·b/c) and the remainder, for a, b >= 0 and c > 0;
// ok is false when the quotient does not fit 63 bits.
func mulDiv(a, b, c int64) (q, rem int64, ok bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 0, 0, false
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	if uq > math.MaxInt64 {
		return 0, 0, false
	}
	return int64(uq), int64(ur), true
}

// Fits reports whether a Take of cost tokens can be paid by a bucket
// missing m units: the bucket holds the cost, and a look (cost 0) needs one
// whole token, so it fails on an empty bucket or one in debt.
func (l Limit) Fits(m, cost int64) bool {
	need := max(cost, 1)
	return need <= l.Capacity && m+need*l.k <= l.CapacityUnits()
}

// Apply returns the units missing from a bucket missing m units once a
// request of kind and cost is applied: a Take's cost taken (the caller
// checked that it Fits), a Charge's taken down to the debt bound at most
// (MaxMissing), a Refund's given back up to full. It never overflows, for
// any cost >= 0.
func (l Limit) Apply(m int64, kind Kind, cost int64) int64 {
	switch kind {
	case Charge:
		top := l.MaxMissing()
		if cost >= ceilDiv(top-m, l.k) {
			return top
		}
	case Refund:
		if cost >= ceilDiv(m, l.k) {
			return 0
		}
		return m - cost*l.k
	}
	return m + cost*l.k
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
