// Package limiter is Floodgate's token-bucket engine: the exact arithmetic of a
// bucket, the Store abstraction that applies it atomically to one or several
// buckets, and the shared types every store and caller speaks.
//
// A bucket holds at most Capacity tokens and refills continuously at Rate
// tokens per second. A bucket never seen before is full. A request costing n
// tokens is allowed iff the bucket holds at least n tokens, and then n are
// taken. All arithmetic is integer: time is counted in microseconds and tokens
// in "units", a per-limit subdivision of a token chosen so that exactly G units
// accrue per microsecond (see Limit). Nothing drifts, however many decisions.
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
	ErrKey       = errors.New("limiter: bucket name and identity must not be empty")
	ErrNoBuckets = errors.New("limiter: a decision needs at least one bucket")
	ErrDuplicate = errors.New("limiter: a decision names the same bucket twice")
)

// MaxExact bounds every intermediate value of the bucket arithmetic. The Redis
// script runs in Lua, whose numbers are IEEE doubles: integers are exact only
// up to 2^53. Keeping capacity (in units) and the per-millisecond gain under
// 2^50 leaves headroom for the sums the script forms.
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
// Invariant (established by NewLimit): one token is K units, and exactly G
// units accrue per microsecond, with K = den·10⁶/g and G = num/g where
// g = gcd(num, den·10⁶). Capacity·K and 1000·G are below MaxExact, so every
// step of the arithmetic is an exact integer both in Go and in Lua.
type Limit struct {
	Capacity int64
	Rate     Rate

	k int64 // units per token
	g int64 // units gained per microsecond
}

// exactRates says which rates are exact for certain: a whole number n of
// tokens a second gains at most n units a microsecond.
var exactRates = fmt.Sprintf("a whole number of tokens a second up to %d is always exact", int64(MaxExact/1000))

// NewLimit validates capacity and rate and derives the integer units.
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
	perSecondUnits := rate.den * microsPerSecond
	g := gcd(rate.num, perSecondUnits)
	l := Limit{Capacity: capacity, Rate: rate, k: perSecondUnits / g, g: rate.num / g}
	if l.g > MaxExact/1000 {
		return Limit{}, fmt.Errorf("%w (got %s; %s)", ErrRateRange, rate, exactRates)
	}
	if capacity > MaxExact/l.k {
		return Limit{}, fmt.Errorf("%w: capacity %d at rate %s needs %d units per token (capacity × units must stay below 2^50)", ErrPrecision, capacity, rate, l.k)
	}
	return l, nil
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
// microsecond. Stores use them; callers rarely need them.
func (l Limit) Units() (perToken, perMicrosecond int64) { return l.k, l.g }

// CapacityUnits is the capacity measured in units (C·K).
func (l Limit) CapacityUnits() int64 { return l.Capacity * l.k }

// String renders the limit as "capacity C, refill r/s".
func (l Limit) String() string {
	return fmt.Sprintf("capacity %d, refill %s/s", l.Capacity, l.Rate)
}

// Result returns what a caller needs to know about one bucket, given the
// units missing from it (0 = full) after the decision, the cost asked for and
// whether the cost was taken.
//
// Remaining = floor(tokens). ResetAfter = time until the bucket is full again.
// When not allowed, RetryAfter = time until the bucket holds cost tokens
// (0 when the cost exceeds the capacity: such a request can never pass).
func (l Limit) Result(missing, cost int64, allowed bool) Result {
	have := l.CapacityUnits() - missing
	r := Result{
		Allowed:    allowed,
		Limit:      l.Capacity,
		Remaining:  have / l.k,
		ResetAfter: micros(ceilDiv(missing, l.g)),
	}
	if cost > l.Capacity {
		r.ExceedsCapacity = true
		return r
	}
	if !allowed {
		r.RetryAfter = micros(ceilDiv(cost*l.k-have, l.g))
	}
	return r
}

// Refill returns the units missing from a bucket dt microseconds after it was
// missing m units. It never overflows: a bucket idle long enough is full.
func (l Limit) Refill(m, dt int64) int64 {
	if m <= 0 || dt <= 0 {
		return max(m, 0)
	}
	if dt >= ceilDiv(m, l.g) {
		return 0
	}
	return m - dt*l.g
}

// Convert returns the units missing from a bucket under l that was missing m
// units under from, the limit it was held under until now: a policy's
// numbers changed, and the bucket keeps the tokens it held, capped at l's
// capacity and rounded down to l's unit (1/K of a token), then refills at
// l's rate. A bucket full under from is full under l, as a bucket never
// seen is. Both stores apply it at the first decision that names the
// bucket with l.
func (l Limit) Convert(from Limit, m int64) int64 {
	if m <= 0 || from == l {
		return max(m, 0)
	}
	have := from.CapacityUnits() - min(m, from.CapacityUnits()) // units of from
	full := l.CapacityUnits()
	hi, lo := bits.Mul64(uint64(have), uint64(l.k))
	if hi >= uint64(from.k) {
		return 0 // the quotient would not fit 64 bits: far above full
	}
	q, _ := bits.Div64(hi, lo, uint64(from.k))
	if q >= uint64(full) {
		return 0
	}
	return full - int64(q)
}

// Fits reports whether a bucket missing m units can pay cost tokens.
func (l Limit) Fits(m, cost int64) bool {
	return cost <= l.Capacity && m+cost*l.k <= l.CapacityUnits()
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
