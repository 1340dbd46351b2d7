package storetest

import "github.com/floodgate/floodgate/limiter"

// Units are envoyproxy/ratelimit's units in seconds, as its UnitToDivider
// has them (src/utils/utilities.go: a month is 30 days, a year 365).
var Units = []struct {
	Name    string
	Seconds int64
}{
	{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400},
	{"week", 604800}, {"month", 2592000}, {"year", 31536000},
}

// Counts are requests_per_unit values: small ones, the quotas that
// microsecond steps could not hold exactly, primes, powers of two and ten,
// and the largest a uint32 holds (0 is the caller's "never", no bucket).
var Counts = []int64{
	1, 2, 3, 7, 10, 37, 60, 100, 437, 999, 1000, 1001, 1867, 5001, 13033, 50001,
	65536, 123457, 312751, 1_000_000, 1_000_003, 16_777_259, 1 << 31, 2147483647,
	4294967291, 4294967295,
}

// Bursts are capacities (Floodgate's rls.burst; a limit's own count is
// the other): 1 to 2^32.
var Bursts = []int64{1, 2, 3, 97, 1000, 1001, 65537, 1 << 20, 2147483647, 4294967291, 4294967295, 1 << 32}

// GridLimit is one limit of Grid: RequestsPerUnit per unit, with Capacity
// tokens.
type GridLimit struct {
	Unit            string
	UnitSeconds     int64
	RequestsPerUnit int64
	Capacity        int64
}

// Rate is the limit's refill rate.
func (g GridLimit) Rate() limiter.Rate {
	r, err := limiter.NewRate(g.RequestsPerUnit, g.UnitSeconds)
	if err != nil {
		panic(err) // Counts and Units are positive
	}
	return r
}

// Grid is every unit × every count × every burst and the count itself as
// the capacity: the limits envoyproxy/ratelimit accepts, as far as a test
// can enumerate them.
func Grid() []GridLimit {
	var out []GridLimit
	for _, u := range Units {
		for _, n := range Counts {
			for _, c := range append(Bursts[:len(Bursts):len(Bursts)], n) {
				out = append(out, GridLimit{u.Name, u.Seconds, n, c})
			}
		}
	}
	return out
}

// GridLimits is Grid built, every nth one (1: all); it panics on a limit
// NewLimit refuses (limiter's own tests report those one by one).
func GridLimits(nth int) []limiter.Limit {
	var out []limiter.Limit
	for i, g := range Grid() {
		if i%nth != 0 {
			continue
		}
		l, err := limiter.NewLimit(g.Capacity, g.Rate())
		if err != nil {
			panic(err)
		}
		out = append(out, l)
	}
	return out
}
