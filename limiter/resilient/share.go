package resilient

import (
	"fmt"

	"github.com/floodgate/floodgate/limiter"
)

// Share is the part of every limit the local fallback applies: a fraction
// num/den in (0, 1], held exactly so that scaled capacities and rates are
// exact too. The zero Share is invalid (it is the Options of a store
// without a fallback).
type Share struct{ num, den int64 }

// Whole is the share 1: the fallback applies every limit as it is.
var Whole = Share{1, 1}

// NewShare returns the share num/den, reduced; it refuses one outside
// (0, 1].
func NewShare(num, den int64) (Share, error) {
	if num <= 0 || den <= 0 || num > den {
		return Share{}, fmt.Errorf("resilient: a share must be a fraction in (0, 1] (got %d/%d)", num, den)
	}
	g := gcd(num, den)
	return Share{num / g, den / g}, nil
}

// ShareOf returns f as an exact share, read through its shortest decimal
// form, so 0.1 is one tenth; it refuses one outside (0, 1].
func ShareOf(f float64) (Share, error) {
	r, err := limiter.RateFromFloat(f) // an exact fraction of a decimal
	if err != nil {
		return Share{}, fmt.Errorf("resilient: a share must be a fraction in (0, 1] (got %v)", f)
	}
	return NewShare(r.Fraction())
}

// Fraction returns the share as num/den, reduced; 0/0 for the zero Share.
func (s Share) Fraction() (num, den int64) { return s.num, s.den }

// IsZero reports whether s is the (invalid) zero Share.
func (s Share) IsZero() bool { return s.den == 0 }

// String renders the share as num/den.
func (s Share) String() string { return fmt.Sprintf("%d/%d", s.num, s.den) }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
