package storetest

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// TakeAt makes one decision with the store's clock reading at (time since
// the start of the run; it never decreases).
type TakeAt func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error)

// model is the reference: the token-bucket semantics (package limiter's
// doc, docs/design.md) in plain rational arithmetic, with none of the
// stores' integer encodings. Time is the run's, in microseconds from its
// start, which the store's clock must put on its grid of steps (a
// multiple of limiter.MaxResolution from its origin). Tokens go below 0
// in debt, down to minus the capacity.
type model struct {
	limit    limiter.Limit
	capacity *big.Rat
	rate     *big.Rat // tokens per microsecond
	step     int64    // µs: the limit's resolution
	tokens   *big.Rat
	last     int64 // µs
}

func newModel(l limiter.Limit) *model {
	m := &model{}
	m.setLimit(l)
	m.tokens = new(big.Rat).Set(m.capacity) // a new bucket is full
	return m
}

func (m *model) setLimit(l limiter.Limit) {
	num, den := l.Rate.Fraction()
	m.limit = l
	m.capacity = new(big.Rat).SetInt64(l.Capacity)
	m.rate = big.NewRat(num, den*1_000_000)
	m.step = l.Resolution().Microseconds()
}

// touch brings the bucket to time now under limit l. When l is not the limit
// it was held under (a policy's numbers changed), the bucket keeps the tokens
// it holds now under the old limit, capped at the new capacity (a debt at
// minus it) and rounded down to the new limit's unit (1/K of a token: the
// stores count in units); a bucket full under the old limit is full under
// the new one, as a bucket never seen is. It refills at the new rate from
// then on.
func (m *model) touch(now int64, l limiter.Limit) {
	m.refill(now)
	if l == m.limit {
		return
	}
	full := m.tokens.Cmp(m.capacity) >= 0
	m.setLimit(l)
	if full || m.tokens.Cmp(m.capacity) >= 0 {
		m.tokens.Set(m.capacity)
		return
	}
	k, _ := l.Units()
	units := new(big.Rat).Mul(m.tokens, new(big.Rat).SetInt64(k))
	m.tokens.SetFrac(floorInt(units), big.NewInt(k))
	if floor := new(big.Rat).Neg(m.capacity); m.tokens.Cmp(floor) < 0 {
		m.tokens.Set(floor)
	}
}

// refill brings the bucket to time now: min(C, tokens + r·R·n), n the
// steps of R µs begun since the last time (a continuous bucket read at the
// start of each instant's step).
func (m *model) refill(now int64) {
	dt := new(big.Rat).SetInt64(m.step * (now/m.step - m.last/m.step))
	m.tokens.Add(m.tokens, dt.Mul(dt, m.rate))
	if m.tokens.Cmp(m.capacity) > 0 {
		m.tokens.Set(m.capacity)
	}
	m.last = now
}

// apply applies a request the decision lets through: a Take (allowed) or
// Charge takes its cost, a Charge down to minus the capacity at most; a
// Refund gives its cost back, up to the capacity.
func (m *model) apply(kind limiter.Kind, cost int64) {
	n := new(big.Rat).SetInt64(cost)
	switch kind {
	case limiter.Refund:
		if m.tokens.Add(m.tokens, n); m.tokens.Cmp(m.capacity) > 0 {
			m.tokens.Set(m.capacity)
		}
	default:
		m.tokens.Sub(m.tokens, n)
		if floor := new(big.Rat).Neg(m.capacity); m.tokens.Cmp(floor) < 0 {
			m.tokens.Set(floor)
		}
	}
}

// fits reports whether the bucket can pay a Take of cost: it holds the
// cost, and a look (cost 0) needs one whole token.
func (m *model) fits(cost int64) bool {
	return m.tokens.Cmp(new(big.Rat).SetInt64(max(cost, 1))) >= 0
}

// floorInt is floor(r) (big.Int's Div is Euclidean: the floor, for a
// positive denominator).
func floorInt(r *big.Rat) *big.Int { return new(big.Int).Div(r.Num(), r.Denom()) }

func floorRat(r *big.Rat) int64 { return floorInt(r).Int64() }

func ceilRat(r *big.Rat) int64 {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// wait is the time until the bucket has gained tokens more, counted from
// the start of the current step in whole steps, at most
// limiter.MaxDuration.
func (m *model) wait(tokens *big.Rat) time.Duration {
	perStep := new(big.Rat).Mul(m.rate, new(big.Rat).SetInt64(m.step))
	steps := new(big.Rat).SetInt64(ceilRat(tokens.Quo(tokens, perStep)))
	ns := steps.Mul(steps, new(big.Rat).SetInt64(m.step*int64(time.Microsecond)))
	if ns.Cmp(new(big.Rat).SetInt64(int64(limiter.MaxDuration))) > 0 {
		return limiter.MaxDuration
	}
	return time.Duration(floorRat(ns))
}

// result is what the reference says bucket m reports after a decision: a
// Take that fits or was taken, or a Charge or Refund, is Allowed.
func (m *model) result(kind limiter.Kind, cost int64, fits, allowed bool) limiter.Result {
	r := limiter.Result{Allowed: fits || kind != limiter.Take, Remaining: max(floorRat(m.tokens), 0)}
	r.Limit = floorRat(m.capacity)
	r.ResetAfter = m.wait(new(big.Rat).Sub(m.capacity, m.tokens))
	r.InDebt = m.tokens.Sign() < 0
	if kind != limiter.Take {
		if r.InDebt {
			r.RetryAfter = m.wait(new(big.Rat).Sub(big.NewRat(1, 1), m.tokens))
		}
		return r
	}
	n := new(big.Rat).SetInt64(max(cost, 1))
	if cost > r.Limit {
		r.ExceedsCapacity = true
	} else if !allowed && !fits {
		r.RetryAfter = m.wait(n.Sub(n, m.tokens))
	}
	return r
}

var modelRates = []string{"1", "0.5", "1/3", "7/60", "2", "1000", "12345/7", "10000", "0.001", "3"}

// modelLimits are limits whose units need steps coarser than a microsecond
// (limiter.Limit): envoyproxy/ratelimit quotas by the day, month and year
// with their own count or a large burst as the capacity. The run draws a
// bucket's limit from them now and then.
var modelLimits = []limiter.Limit{
	limiter.MustLimit(1001, "1001/2592000"),            // 1001 a month: 10 µs
	limiter.MustLimit(50001, "50001/86400"),            // a day: 10 µs
	limiter.MustLimit(123457, "123457/31536000"),       // a year: 10 ms
	limiter.MustLimit(1<<32, "312751/3600"),            // an hour, a burst of 2^32: 100 ms
	limiter.MustLimit(1<<32, "4294967291/31536000"),    // a year, a burst of 2^32: 1000 s
	limiter.MustLimit(4294967295, "4294967295/604800"), // a week: 10 s
}

// modelLimit draws a bucket's limit: mostly a small one of modelRates, now
// and then one of modelLimits.
func modelLimit(rng *rand.Rand) limiter.Limit {
	if rng.IntN(4) == 0 {
		return modelLimits[rng.IntN(len(modelLimits))]
	}
	return limiter.MustLimit(1+rng.Int64N(200), modelRates[rng.IntN(len(modelRates))])
}

// modelCost draws the cost of a request of kind on a bucket of capacity c:
// for a Take mostly 1 or up to c, now and then c+1 (never payable) or 0 (a
// look); for a Charge or a Refund anything from 0 to far beyond the
// capacity, 2^63-1 included.
func modelCost(rng *rand.Rand, kind limiter.Kind, c int64) int64 {
	if kind != limiter.Take {
		switch q := rng.IntN(10); {
		case q < 5:
			return rng.Int64N(c + 1)
		case q < 8:
			return c + rng.Int64N(2*c+1)
		case q < 9:
			return math.MaxInt64
		default:
			return rng.Int64N(math.MaxInt64)
		}
	}
	switch q := rng.IntN(20); {
	case q < 9:
		return 1
	case q < 17:
		return 1 + rng.Int64N(c)
	case q < 18:
		return 0
	default:
		return c + 1
	}
}

// modelKind draws a request's kind: mostly a Take.
func modelKind(rng *rand.Rand) limiter.Kind {
	switch q := rng.IntN(10); {
	case q < 7:
		return limiter.Take
	case q < 9:
		return limiter.Charge
	default:
		return limiter.Refund
	}
}

// RunModel drives a store through steps random decisions (time advances,
// costs, kinds, one to three buckets at once, and now and then a bucket's
// limit changed, as a reload changes a policy's numbers) and compares every
// decision and every reported figure with the rational reference model.
// The store's clock must read the run's time on a grid of steps that starts
// at the run's start (a multiple of limiter.MaxResolution from the clock's
// origin, or the start of a store on an injected clock).
func RunModel(t *testing.T, seed uint64, steps int, take TakeAt) {
	t.Helper()
	runModel(t, seed, steps, 1, 3, modelLimit, one(take), 0)
}

// RunModelOn is RunModel with every bucket's limit drawn from limits,
// reloads included; each limit in turn, when each is true, for steps
// decisions each (a short run per limit, to cover many limits).
func RunModelOn(t *testing.T, seed uint64, steps int, limits []limiter.Limit, each bool, take TakeAt) {
	t.Helper()
	if !each {
		runModel(t, seed, steps, 1, 3, func(rng *rand.Rand) limiter.Limit { return limits[rng.IntN(len(limits))] }, one(take), 0)
		return
	}
	grid := limiter.MaxResolution.Microseconds()
	var end int64
	for i, l := range limits {
		// Each run starts where the last ended, on a step of every limit.
		end = runModel(t, seed+uint64(i), steps, 1, 3, func(*rand.Rand) limiter.Limit { return l }, one(take), (end/grid+1)*grid)
	}
}

// one is take as a TakeBatchAt of one decision at a time.
func one(take TakeAt) TakeBatchAt {
	return func(at time.Duration, reqs [][]limiter.Request, res [][]limiter.Result) ([]bool, []error) {
		ok, err := take(at, reqs[0], res[0])
		return []bool{ok}, []error{err}
	}
}

// TakeBatchAt makes decisions as one batch with the store's clock reading
// at: decided in turn, each all-or-nothing on its own buckets, a later one
// seeing an earlier one's charges.
type TakeBatchAt func(at time.Duration, reqs [][]limiter.Request, res [][]limiter.Result) ([]bool, []error)

// RunModelBatched is RunModel with up to maxBatch decisions at each instant,
// handed to the store as one batch, each over one to maxBuckets (at most 3)
// buckets; with six buckets in play, a batch often names one bucket several
// times.
func RunModelBatched(t *testing.T, seed uint64, steps, maxBatch, maxBuckets int, take TakeBatchAt) {
	t.Helper()
	runModel(t, seed, steps, maxBatch, maxBuckets, modelLimit, take, 0)
}

// runModel is RunModelBatched with the buckets' limits drawn by draw, its
// clock starting at start µs (a step of every limit), and returns the
// time it ended at.
func runModel(t *testing.T, seed uint64, steps, maxBatch, maxBuckets int, draw func(*rand.Rand) limiter.Limit, take TakeBatchAt, start int64) int64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	const pool = 6
	type b struct {
		req   limiter.Request
		model *model
	}
	buckets := make([]b, pool)
	name := fmt.Sprintf("model-%d-%d", seed, time.Now().UnixNano())
	for i := range buckets {
		l := draw(rng)
		buckets[i] = b{limiter.Request{Name: name, ID: fmt.Sprint("b", i), Limit: l}, newModel(l)}
	}
	now := start
	decisions, allowedCount, limitChanges := 0, 0, 0
	kinds := map[limiter.Kind]int{}
	for step := 0; decisions < steps; step++ {
		switch p := rng.IntN(10); {
		case p < 2:
		case p < 5:
			now += 1 + rng.Int64N(1000)
		case p < 8:
			now += 1000 + rng.Int64N(1_000_000)
		default:
			now += 1_000_000 + rng.Int64N(3_600_000_000)
		}
		if rng.IntN(25) == 0 {
			// A reload changes one bucket's numbers; the model converts
			// the bucket when a decision first names it with them.
			p := &buckets[rng.IntN(pool)]
			p.req.Limit = draw(rng)
			limitChanges++
		}
		n := 1 + rng.IntN(maxBatch)
		batch := make([][]limiter.Request, n)
		res := make([][]limiter.Result, n)
		wantOK := make([]bool, n)
		wantRes := make([][]limiter.Result, n)
		for j := range batch {
			picked := rng.Perm(pool)[:1+rng.IntN(min(maxBuckets, 3))]
			reqs := make([]limiter.Request, len(picked))
			models := make([]*model, len(picked))
			for i, p := range picked {
				reqs[i] = buckets[p].req
				reqs[i].Kind = modelKind(rng)
				reqs[i].Cost = modelCost(rng, reqs[i].Kind, reqs[i].Limit.Capacity)
				kinds[reqs[i].Kind]++
				models[i] = buckets[p].model
			}
			// Reference decision: the Takes all or nothing, the Charges and
			// Refunds whatever they decide.
			want := true
			fits := make([]bool, len(reqs))
			for i, m := range models {
				m.touch(now, reqs[i].Limit)
				if reqs[i].Kind == limiter.Take {
					fits[i] = m.fits(reqs[i].Cost)
					want = want && fits[i]
				}
			}
			for i, m := range models {
				if reqs[i].Kind != limiter.Take || want {
					m.apply(reqs[i].Kind, reqs[i].Cost)
				}
			}
			if want {
				allowedCount++
			}
			batch[j], res[j], wantOK[j] = reqs, make([]limiter.Result, len(reqs)), want
			wantRes[j] = make([]limiter.Result, len(reqs))
			for i, m := range models {
				wantRes[j][i] = m.result(reqs[i].Kind, reqs[i].Cost, fits[i] || want, want)
			}
		}
		decisions += n
		got, errs := take(time.Duration(now)*time.Microsecond, batch, res)
		for j, reqs := range batch {
			if errs[j] != nil {
				t.Fatalf("step %d, decision %d of %d: %v", step, j+1, n, errs[j])
			}
			if got[j] != wantOK[j] {
				t.Fatalf("step %d at %dµs, decision %d of %d: allowed = %v, reference says %v", step, now, j+1, n, got[j], wantOK[j])
			}
			for i := range reqs {
				if r := res[j][i]; r.Remaining < 0 || r.ResetAfter < 0 || r.RetryAfter < 0 {
					t.Fatalf("step %d at %dµs, bucket %s: a negative figure: %+v", step, now, reqs[i].ID, r)
				}
				if w := wantRes[j][i]; res[j][i] != w {
					t.Fatalf("step %d at %dµs, decision %d of %d, bucket %s (%v, step %v, %v of %d):\n got %+v\nwant %+v", step, now, j+1, n, reqs[i].ID, reqs[i].Limit, reqs[i].Limit.Resolution(), reqs[i].Kind, reqs[i].Cost, res[j][i], w)
				}
			}
		}
	}
	if steps >= 500 && (allowedCount == 0 || allowedCount == decisions) {
		t.Fatalf("%d of %d decisions allowed: the run exercised only one outcome", allowedCount, decisions)
	}
	if steps >= 500 && limitChanges == 0 {
		t.Fatalf("no limit changed in %d steps", steps)
	}
	if steps >= 500 && (kinds[limiter.Charge] == 0 || kinds[limiter.Refund] == 0) {
		t.Fatalf("no charge or no refund in %d steps: %v", steps, kinds)
	}
	return now
}
