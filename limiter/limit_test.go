package limiter_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
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
	fine, _ := limiter.NewRate(1, 999_999_937) // a prime denominator: 10^15 units a token
	if _, err := limiter.NewLimit(2, fine); !errors.Is(err, limiter.ErrPrecision) {
		t.Errorf("NewLimit beyond exact arithmetic: err = %v, want ErrPrecision", err)
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
	r := l.Result(0, 4, false)
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
