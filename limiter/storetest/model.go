package storetest

import (
	"fmt"
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
// stores' integer encodings.
type model struct {
	limit    limiter.Limit
	capacity *big.Rat
	rate     *big.Rat // tokens per microsecond
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
}

// touch brings the bucket to time now under limit l. When l is not the limit
// it was held under (a policy's numbers changed), the bucket keeps the tokens
// it holds now under the old limit, capped at the new capacity and rounded
// down to the new limit's unit (1/K of a token: the stores count in units);
// a bucket full under the old limit is full under the new one, as a bucket
// never seen is. It refills at the new rate from then on.
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
	m.tokens.SetFrac(new(big.Int).Div(units.Num(), units.Denom()), big.NewInt(k))
}

// refill brings the bucket to time now: min(C, tokens + r·dt).
func (m *model) refill(now int64) {
	dt := new(big.Rat).SetInt64(now - m.last)
	m.tokens.Add(m.tokens, dt.Mul(dt, m.rate))
	if m.tokens.Cmp(m.capacity) > 0 {
		m.tokens.Set(m.capacity)
	}
	m.last = now
}

func floorRat(r *big.Rat) int64 { return new(big.Int).Div(r.Num(), r.Denom()).Int64() }

func ceilRat(r *big.Rat) int64 {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// result is what the reference says bucket m reports after a decision.
func (m *model) result(cost int64, fits, allowed bool) limiter.Result {
	r := limiter.Result{Allowed: fits, Remaining: floorRat(m.tokens)}
	r.Limit = floorRat(m.capacity)
	gap := new(big.Rat).Sub(m.capacity, m.tokens)
	r.ResetAfter = time.Duration(ceilRat(gap.Quo(gap, m.rate))) * time.Microsecond
	n := new(big.Rat).SetInt64(cost)
	if n.Cmp(m.capacity) > 0 {
		r.ExceedsCapacity = true
	} else if !allowed && !fits {
		need := n.Sub(n, m.tokens)
		r.RetryAfter = time.Duration(ceilRat(need.Quo(need, m.rate))) * time.Microsecond
	}
	return r
}

var modelRates = []string{"1", "0.5", "1/3", "7/60", "2", "1000", "12345/7", "10000", "0.001", "3"}

// RunModel drives a store through steps random decisions (time advances,
// costs, one to three buckets at once, and now and then a bucket's limit
// changed, as a reload changes a policy's numbers) and compares every
// decision and every reported figure with the rational reference model.
func RunModel(t *testing.T, seed uint64, steps int, take TakeAt) {
	RunModelBatched(t, seed, steps, 1, 3, func(at time.Duration, reqs [][]limiter.Request, res [][]limiter.Result) ([]bool, []error) {
		ok, err := take(at, reqs[0], res[0])
		return []bool{ok}, []error{err}
	})
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
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	const pool = 6
	type b struct {
		req   limiter.Request
		model *model
	}
	buckets := make([]b, pool)
	name := fmt.Sprintf("model-%d-%d", seed, time.Now().UnixNano())
	for i := range buckets {
		l := limiter.MustLimit(1+rng.Int64N(200), modelRates[rng.IntN(len(modelRates))])
		buckets[i] = b{limiter.Request{Name: name, ID: fmt.Sprint("b", i), Limit: l}, newModel(l)}
	}
	var now int64
	decisions, allowedCount, limitChanges := 0, 0, 0
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
			p.req.Limit = limiter.MustLimit(1+rng.Int64N(200), modelRates[rng.IntN(len(modelRates))])
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
				c := reqs[i].Limit.Capacity
				switch q := rng.IntN(10); {
				case q < 5:
					reqs[i].Cost = 1
				case q < 9:
					reqs[i].Cost = 1 + rng.Int64N(c)
				default:
					reqs[i].Cost = c + 1
				}
				models[i] = buckets[p].model
			}
			// Reference decision.
			want := true
			fits := make([]bool, len(reqs))
			for i, m := range models {
				m.touch(now, reqs[i].Limit)
				fits[i] = m.tokens.Cmp(new(big.Rat).SetInt64(reqs[i].Cost)) >= 0
				want = want && fits[i]
			}
			if want {
				for i, m := range models {
					m.tokens.Sub(m.tokens, new(big.Rat).SetInt64(reqs[i].Cost))
				}
				allowedCount++
			}
			batch[j], res[j], wantOK[j] = reqs, make([]limiter.Result, len(reqs)), want
			wantRes[j] = make([]limiter.Result, len(reqs))
			for i, m := range models {
				wantRes[j][i] = m.result(reqs[i].Cost, fits[i] || want, want)
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
					t.Fatalf("step %d at %dµs, decision %d of %d, bucket %s (%v, cost %d):\n got %+v\nwant %+v", step, now, j+1, n, reqs[i].ID, reqs[i].Limit, reqs[i].Cost, res[j][i], w)
				}
			}
		}
	}
	if allowedCount == 0 || allowedCount == decisions {
		t.Fatalf("%d of %d decisions allowed: the run exercised only one outcome", allowedCount, decisions)
	}
	if steps >= 500 && limitChanges == 0 {
		t.Fatalf("no limit changed in %d steps", steps)
	}
}
