package limiter_test

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

func TestParseRateReadsDecimalsAndFractions(t *testing.T) {
	for _, tc := range []struct {
		in       string
		num, den int64
		str      string
	}{
		{"2", 2, 1, "2"},
		{"0.5", 1, 2, "0.5"},
		{" 1000 ", 1000, 1, "1000"},
		{"1e3", 1000, 1, "1000"},
		{"1/60", 1, 60, "1/60"},
		{"10/4", 5, 2, "2.5"},
		{"0.001", 1, 1000, "0.001"},
	} {
		r, err := limiter.ParseRate(tc.in)
		if err != nil {
			t.Fatalf("ParseRate(%q): %v", tc.in, err)
		}
		if n, d := r.Fraction(); n != tc.num || d != tc.den {
			t.Errorf("ParseRate(%q) = %d/%d, want %d/%d", tc.in, n, d, tc.num, tc.den)
		}
		if r.String() != tc.str {
			t.Errorf("ParseRate(%q).String() = %q, want %q", tc.in, r.String(), tc.str)
		}
	}
}

func TestBadRatesAndCapacitiesAreTypedErrors(t *testing.T) {
	for _, in := range []string{"", "0", "-1", "abc", "1/0", "0/5", "NaN", "Inf", "-Inf", "0x10", "1_000"} {
		if _, err := limiter.ParseRate(in); !errors.Is(err, limiter.ErrRate) {
			t.Errorf("ParseRate(%q) err = %v, want ErrRate", in, err)
		}
	}
	for _, f := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := limiter.RateFromFloat(f); !errors.Is(err, limiter.ErrRate) {
			t.Errorf("RateFromFloat(%v) err = %v, want ErrRate", f, err)
		}
	}
	if r, err := limiter.RateFromFloat(0.1); err != nil || r.String() != "0.1" {
		t.Errorf("RateFromFloat(0.1) = %v, %v; want exactly one tenth", r, err)
	}
	if _, err := limiter.NewRate(0, 1); !errors.Is(err, limiter.ErrRate) {
		t.Errorf("NewRate(0, 1) err = %v", err)
	}
	one, _ := limiter.PerSecond(1)
	for _, c := range []int64{0, -5, math.MinInt64} {
		if _, err := limiter.NewLimit(c, one); !errors.Is(err, limiter.ErrCapacity) {
			t.Errorf("NewLimit(%d) err = %v, want ErrCapacity", c, err)
		}
	}
	if _, err := limiter.NewLimit(10, limiter.Rate{}); !errors.Is(err, limiter.ErrRate) {
		t.Errorf("NewLimit with the zero rate: err = %v, want ErrRate", err)
	}
	// A prime denominator: 10^15 units a token at a microsecond, 10^9 at
	// best (a step of a second; coarser steps do not divide its unit).
	fine, _ := limiter.NewRate(1, 999_999_937)
	if _, err := limiter.NewLimit(1<<40, fine); !errors.Is(err, limiter.ErrPrecision) || !strings.Contains(err.Error(), "even counted in steps of 16m40s") {
		t.Errorf("NewLimit beyond exact arithmetic: err = %v, want ErrPrecision saying no resolution fits", err)
	}
	// A rate too fast for a microsecond's gain is refused as it was, though
	// a coarser step would hold it: coarser steps are for long units.
	if _, err := limiter.NewLimit(1, limiter.MustLimit(1, "1125899906842").Rate); err != nil {
		t.Errorf("the fastest exact rate: %v", err)
	}
	tooFast, _ := limiter.NewRate(1125899906843, 1)
	if _, err := limiter.NewLimit(1, tooFast); !errors.Is(err, limiter.ErrRateRange) {
		t.Errorf("a rate one above the fastest exact one: err = %v, want ErrRateRange", err)
	}
	// A capacity of 2 was beyond it too while time was counted in
	// microseconds only; steps of 10 µs hold it.
	if l, err := limiter.NewLimit(2, fine); err != nil || l.Resolution() != 10*time.Microsecond {
		t.Errorf("NewLimit(2, 1/999999937) = %v (step %v), %v; want it built in steps of 10µs", l, l.Resolution(), err)
	}
	if _, err := limiter.NewLimit(math.MaxInt64, one); !errors.Is(err, limiter.ErrPrecision) {
		t.Errorf("NewLimit(MaxInt64): err = %v, want ErrPrecision", err)
	}
}

func TestUnitsMakeTheRateExact(t *testing.T) {
	for _, tc := range []struct {
		rate string
		k, g int64
	}{
		{"1", 1_000_000, 1},
		{"2", 500_000, 1},
		{"0.5", 2_000_000, 1},
		{"3", 1_000_000, 3},
		{"10000", 100, 1},
		{"1/60", 60_000_000, 1},
		{"2001/2", 2_000_000, 2001},
	} {
		l := limiter.MustLimit(10, tc.rate)
		k, g := l.Units()
		if k != tc.k || g != tc.g {
			t.Errorf("rate %s: K=%d G=%d, want K=%d G=%d", tc.rate, k, g, tc.k, tc.g)
		}
		// G units a microsecond at K units a token is exactly the rate.
		num, den := l.Rate.Fraction()
		if g*den*1_000_000 != num*k {
			t.Errorf("rate %s: %d units/µs at %d units/token is not %d/%d tokens/s", tc.rate, g, k, num, den)
		}
	}
}

func TestResultOfAnImpossibleCostPromisesNoRetry(t *testing.T) {
	l := limiter.MustLimit(3, "1")
	r := l.Result(0, limiter.Take, 4, false)
	if !r.ExceedsCapacity || r.RetryAfter != 0 || r.Remaining != 3 || r.ResetAfter != 0 {
		t.Fatalf("Result = %+v", r)
	}
	if got := limiter.RetryAfter([]limiter.Result{{Allowed: false, RetryAfter: time.Minute}, r}); got != 0 {
		t.Errorf("RetryAfter with an impossible bucket = %v, want 0", got)
	}
}

// TestConvertKeepsTheTokensHeld: a bucket carried to a new limit holds the
// tokens it held, capped at the new capacity and rounded down to the new
// unit; a full one stays full.
func TestConvertKeepsTheTokensHeld(t *testing.T) {
	perMinute := limiter.MustLimit(3, "1/60")  // K = 60·10⁶
	tenPerSecond := limiter.MustLimit(3, "10") // K = 10⁵
	k, _ := perMinute.Units()
	k2, _ := tenPerSecond.Units()
	cases := []struct {
		name     string
		from, to limiter.Limit
		missing  int64 // under from
		want     int64 // under to
	}{
		{"full stays full", perMinute, limiter.MustLimit(10, "1"), 0, 0},
		{"the same limit changes nothing", perMinute, perMinute, 5, 5},
		{"spent stays spent, in the new unit", perMinute, tenPerSecond, 3 * k, 3 * k2},
		{"half a token held", perMinute, tenPerSecond, 3*k - k/2, 3*k2 - k2/2},
		{"a raised capacity keeps the two tokens held", perMinute, limiter.MustLimit(10, "1/60"), k, 8 * k},
		{"a lowered capacity clamps", limiter.MustLimit(10, "1/60"), limiter.MustLimit(5, "1/60"), 2 * k, 0},
		{"rounded down to the new unit", limiter.MustLimit(1, "1/3"), limiter.MustLimit(1, "1"), 1, 1},
	}
	for _, c := range cases {
		if got := c.to.Convert(c.from, c.missing); got != c.want {
			t.Errorf("%s: Convert(%v → %v, missing %d) = %d, want %d", c.name, c.from, c.to, c.missing, got, c.want)
		}
	}
}

// TestEveryRatelimitLimitIsBuilt: any requests_per_unit a uint32 holds,
// over every unit of envoyproxy/ratelimit, with any capacity from 1 to
// 2^32, is a limit; its units are exact (G units a step at K a token is
// the rate, as fractions), within the bounds the Lua doubles need; its
// step is the finest power of ten that fits, and a microsecond wherever a
// microsecond fitted before steps existed, with the units it had then.
func TestEveryRatelimitLimitIsBuilt(t *testing.T) {
	built, coarse := 0, 0
	for _, gl := range storetest.Grid() {
		rpu, unit, c, rate := gl.RequestsPerUnit, gl.Unit, gl.Capacity, gl.Rate()
		l, err := limiter.NewLimit(c, rate)
		if err != nil {
			t.Errorf("%d per %s, capacity %d: %v", rpu, unit, c, err)
			continue
		}
		built++
		checkUnits(t, l)
		r := l.Resolution().Microseconds()
		if r > 1 {
			coarse++
		}
		if k, g, ok := unitsAt(c, rate, 1); ok && (r != 1 || !sameUnits(l, k, g)) {
			t.Errorf("%d per %s, capacity %d: step %v, units %v; it fitted microseconds with K=%d G=%d", rpu, unit, c, l.Resolution(), l, k, g)
		}
		if r > 1 {
			if _, _, ok := unitsAt(c, rate, r/10); ok {
				t.Errorf("%d per %s, capacity %d: step %v, but %dµs fits", rpu, unit, c, l.Resolution(), r/10)
			}
		}
	}
	t.Logf("%d limits built, %d of them in steps coarser than a microsecond", built, coarse)
	if coarse == 0 {
		t.Error("no limit of the grid needed a coarser step: the grid tests nothing new")
	}
}

// unitsAt is the invariant of limiter.Limit computed independently, in big
// integers: K and G at a step of r µs, and whether they fit.
func unitsAt(capacity int64, rate limiter.Rate, r int64) (k, g int64, ok bool) {
	num, den := rate.Fraction()
	d := new(big.Int).Mul(big.NewInt(den), big.NewInt(1_000_000))
	p := new(big.Int).Mul(big.NewInt(num), big.NewInt(r))
	gcd := new(big.Int).GCD(nil, nil, p, d)
	bk, bg := new(big.Int).Div(d, gcd), new(big.Int).Div(p, gcd)
	maxExact := big.NewInt(limiter.MaxExact)
	perMs := new(big.Int).Mul(bg, big.NewInt(max(1000/r, 1)))
	capUnits := new(big.Int).Mul(bk, big.NewInt(capacity))
	if perMs.Cmp(maxExact) > 0 || capUnits.Cmp(maxExact) > 0 {
		return 0, 0, false
	}
	return bk.Int64(), bg.Int64(), true
}

func sameUnits(l limiter.Limit, k, g int64) bool {
	lk, lg := l.Units()
	return lk == k && lg == g
}

// checkUnits checks l's invariant: exact units, capacity and debt within
// the doubles' exact range, and a step of a power of ten of microseconds
// up to MaxResolution.
func checkUnits(t *testing.T, l limiter.Limit) {
	t.Helper()
	k, g := l.Units()
	r := l.Resolution().Microseconds()
	num, den := l.Rate.Fraction()
	// g/k tokens a step of r µs = num/den tokens a second, as fractions.
	lhs := new(big.Int).Mul(big.NewInt(g), big.NewInt(den))
	lhs.Mul(lhs, big.NewInt(1_000_000))
	rhs := new(big.Int).Mul(big.NewInt(num), big.NewInt(k))
	rhs.Mul(rhs, big.NewInt(r))
	if lhs.Cmp(rhs) != 0 {
		t.Errorf("%v: %d units a step of %dµs at %d units a token is not %d/%d tokens a second", l, g, r, k, num, den)
	}
	if l.CapacityUnits() > limiter.MaxExact || l.MaxMissing() >= 1<<53 || g*max(1000/r, 1) > limiter.MaxExact {
		t.Errorf("%v: C·K = %d, 2·C·K = %d, gain %d a step of %dµs: beyond the exact range", l, l.CapacityUnits(), l.MaxMissing(), g, r)
	}
	for x := r; x > 1; x /= 10 {
		if x%10 != 0 {
			t.Errorf("%v: a step of %dµs, not a power of ten", l, r)
		}
	}
	if l.Resolution() > limiter.MaxResolution {
		t.Errorf("%v: a step of %v, above %v", l, l.Resolution(), limiter.MaxResolution)
	}
}

// TestTheRefillIsWithinOneStepOfTheContinuousOne: between two instants, the
// tokens a bucket regains differ from the continuous refill r·Δt by less
// than one step's worth (r·R), and are exactly the continuous refill
// between the starts of the two instants' steps (the bound in Limit's doc).
func TestTheRefillIsWithinOneStepOfTheContinuousOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	limits := []limiter.Limit{
		limiter.MustLimit(10, "1/3"),
		limiter.MustLimit(1001, "1001/2592000"),
		limiter.MustLimit(123457, "123457/31536000"),
		limiter.MustLimit(1<<32, "312751/3600"),
		limiter.MustLimit(1<<32, "4294967291/31536000"),
		limiter.MustLimit(4294967295, "4294967295/604800"),
	}
	for _, l := range limits {
		k, _ := l.Units()
		r := l.Resolution().Microseconds()
		num, den := l.Rate.Fraction()
		perMicro := big.NewRat(num, den*1_000_000)
		window := l.MaxMissing() / k * den / num * 1_000_000 // µs to refill a full debt, roughly
		for i := 0; i < 2000; i++ {
			from := rng.Int64N(1 << 52)
			to := from + rng.Int64N(window+1)
			m := l.MaxMissing()
			left := l.Refilled(m, from, to)
			if left <= 0 {
				continue // full: the refill was cut at the capacity
			}
			got := new(big.Rat).SetFrac64(m-left, k) // tokens regained
			cont := new(big.Rat).Mul(perMicro, new(big.Rat).SetInt64(to-from))
			step := new(big.Rat).Mul(perMicro, new(big.Rat).SetInt64(r))
			if diff := new(big.Rat).Sub(got, cont); diff.Abs(diff).Cmp(step) >= 0 {
				t.Fatalf("%v (step %v): from %d to %d µs regained %s tokens, continuously %s: off by a step (%s) or more", l, l.Resolution(), from, to, got.FloatString(3), cont.FloatString(3), step.FloatString(3))
			}
			lagged := new(big.Rat).Mul(perMicro, new(big.Rat).SetInt64(to/r*r-from/r*r))
			if got.Cmp(lagged) != 0 {
				t.Fatalf("%v: from %d to %d µs regained %s tokens, the continuous refill between step starts is %s", l, from, to, got.FloatString(3), lagged.FloatString(3))
			}
		}
	}
}

// TestKindsAreExactAtTheBounds: Apply and Result at the edges a charge or a
// refund can reach, with costs up to 2^63-1.
func TestKindsAreExactAtTheBounds(t *testing.T) {
	l := limiter.MustLimit(10, "1") // K = 10⁶, G = 1
	k, _ := l.Units()
	full := l.CapacityUnits()
	for _, tc := range []struct {
		name    string
		m       int64
		kind    limiter.Kind
		cost    int64
		want    int64
		remains int64
		reset   time.Duration
		retry   time.Duration
	}{
		{"a charge that fits", 2 * k, limiter.Charge, 3, 5 * k, 5, 5 * time.Second, 0},
		{"a charge that empties the bucket", 2 * k, limiter.Charge, 8, full, 0, 10 * time.Second, 0},
		{"a charge into debt", 2 * k, limiter.Charge, 12, 14 * k, 0, 14 * time.Second, 5 * time.Second},
		{"a charge to the debt bound", 0, limiter.Charge, 20, 2 * full, 0, 20 * time.Second, 11 * time.Second},
		{"a charge beyond the debt bound", k / 2, limiter.Charge, 20, 2 * full, 0, 20 * time.Second, 11 * time.Second},
		{"a charge of 2^63-1", 0, limiter.Charge, math.MaxInt64, 2 * full, 0, 20 * time.Second, 11 * time.Second},
		{"a charge of 2^63-1 at the bound", 2 * full, limiter.Charge, math.MaxInt64, 2 * full, 0, 20 * time.Second, 11 * time.Second},
		{"a charge of 0", 3, limiter.Charge, 0, 3, 9, 3 * time.Microsecond, 0},
		{"a refund", 5 * k, limiter.Refund, 2, 3 * k, 7, 3 * time.Second, 0},
		{"a refund to full", 5 * k, limiter.Refund, 5, 0, 10, 0, 0},
		{"a refund beyond full", k / 3, limiter.Refund, 1, 0, 10, 0, 0},
		{"a refund of 2^63-1", 2 * full, limiter.Refund, math.MaxInt64, 0, 10, 0, 0},
		{"a refund of a debt", 15 * k, limiter.Refund, 3, 12 * k, 0, 12 * time.Second, 3 * time.Second},
	} {
		got := l.Apply(tc.m, tc.kind, tc.cost)
		r := l.Result(got, tc.kind, tc.cost, false)
		// In debt, the bucket says so, and when a look would pass again.
		debt := tc.want > full
		if got != tc.want || !r.Allowed || r.Remaining != tc.remains || r.ResetAfter != tc.reset || r.RetryAfter != tc.retry || r.InDebt != debt || r.ExceedsCapacity {
			t.Errorf("%s: missing %d → %d, %+v; want %d, allowed, %d remaining, reset %v, retry after %v, in debt %v", tc.name, tc.m, got, r, tc.want, tc.remains, tc.reset, tc.retry, debt)
		}
	}
	// A look needs one whole token and is told when one is there.
	for _, tc := range []struct {
		name  string
		m     int64
		fits  bool
		retry time.Duration
	}{
		{"full", 0, true, 0},
		{"one token", full - k, true, 0},
		{"less than one token", full - k + 1, false, time.Microsecond},
		{"empty", full, false, time.Second},
		{"in debt", full + 3*k, false, 4 * time.Second},
	} {
		if got := l.Fits(tc.m, 0); got != tc.fits {
			t.Errorf("a look on a bucket %s: fits = %v, want %v", tc.name, got, tc.fits)
		}
		if r := l.Result(tc.m, limiter.Take, 0, tc.fits); r.Allowed != tc.fits || r.RetryAfter != tc.retry || r.ExceedsCapacity {
			t.Errorf("a look on a bucket %s: %+v, want retry after %v", tc.name, r, tc.retry)
		}
	}
	// A take of the whole capacity on a bucket in debt waits for the debt.
	if r := l.Result(full+5*k, limiter.Take, 10, false); r.RetryAfter != 15*time.Second || r.Remaining != 0 || r.ResetAfter != 15*time.Second {
		t.Errorf("a take of 10 with 5 in debt: %+v, want retry after 15s", r)
	}
}

// TestADebtIsConvertedToo: a bucket in debt carried to a new limit keeps
// its debt, in the new unit rounded up, at most the new capacity.
func TestADebtIsConvertedToo(t *testing.T) {
	perMinute := limiter.MustLimit(3, "1/60")  // K = 60·10⁶
	tenPerSecond := limiter.MustLimit(3, "10") // K = 10⁵
	k, _ := perMinute.Units()
	k2, _ := tenPerSecond.Units()
	for _, c := range []struct {
		name     string
		from, to limiter.Limit
		missing  int64
		want     int64
	}{
		{"a debt of two tokens", perMinute, tenPerSecond, 5 * k, 5 * k2},
		{"a debt rounded up to the new unit", limiter.MustLimit(1, "1/3"), limiter.MustLimit(1, "1"), 3_000_000 + 2, 1_000_000 + 1}, // 2/3 of a new unit
		{"a debt capped at the new capacity", limiter.MustLimit(10, "1/60"), perMinute, 18 * k, 6 * k},
		{"a debt at the old bound is capped at the new one", limiter.MustLimit(5, "1/60"), perMinute, limiter.MustLimit(5, "1/60").MaxMissing(), perMinute.MaxMissing()},
	} {
		if got := c.to.Convert(c.from, c.missing); got != c.want {
			t.Errorf("%s: Convert(%v → %v, missing %d) = %d, want %d", c.name, c.from, c.to, c.missing, got, c.want)
		}
	}
}

func TestValidateKnowsTheKinds(t *testing.T) {
	l := limiter.MustLimit(1, "1")
	for _, k := range []limiter.Kind{limiter.Take, limiter.Charge, limiter.Refund} {
		reqs := []limiter.Request{{Name: "n", ID: "i", Limit: l, Cost: math.MaxInt64, Kind: k}}
		if err := limiter.Validate(reqs, make([]limiter.Result, 1)); err != nil {
			t.Errorf("%v of 2^63-1: %v", k, err)
		}
	}
	if err := limiter.Validate([]limiter.Request{{Name: "n", ID: "i", Limit: l, Cost: 1, Kind: 7}}, make([]limiter.Result, 1)); !errors.Is(err, limiter.ErrKind) {
		t.Errorf("kind 7: %v, want ErrKind", err)
	}
	if s := limiter.Kind(7).String(); s != "Kind(7)" || limiter.Charge.String() != "Charge" {
		t.Errorf("Kind strings: %q %q", s, limiter.Charge.String())
	}
}

// TestValidateFindsATwiceNamedBucketInLargeDecisions: past a handful of
// buckets the duplicate check is linear (a map, not every pair), and still
// finds the same bucket named twice, wherever it is; 20,000 distinct
// buckets pass.
func TestValidateFindsATwiceNamedBucketInLargeDecisions(t *testing.T) {
	l := limiter.MustLimit(1, "1")
	reqs := make([]limiter.Request, 20_000)
	for i := range reqs {
		reqs[i] = limiter.Request{Name: "n", ID: strconv.Itoa(i), Limit: l, Cost: 1}
	}
	res := make([]limiter.Result, len(reqs))
	if err := limiter.Validate(reqs, res); err != nil {
		t.Fatalf("20,000 distinct buckets: %v", err)
	}
	reqs[len(reqs)-1].ID = "17"
	if err := limiter.Validate(reqs, res); !errors.Is(err, limiter.ErrDuplicate) || !strings.Contains(err.Error(), "requests 17 and 19999") {
		t.Fatalf("bucket 17 named again last: %v, want ErrDuplicate naming both", err)
	}
}
