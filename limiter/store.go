package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Request asks for Cost tokens from one bucket. A bucket is named by the pair
// (Name, ID): Name is the bucket family (a policy), ID the caller within it
// (an API-key hash, a client IP). Stores keep buckets of different pairs apart.
type Request struct {
	Name  string
	ID    string
	Limit Limit
	Cost  int64
}

// Result is everything a caller needs to know about one bucket after a
// decision: whether it alone could pay, its capacity, the whole tokens left,
// how long until it is full again and, when it could not pay, how long until
// it could. ExceedsCapacity marks a cost above the capacity: such a request can
// never pass, so RetryAfter stays 0 rather than promise a time that would lie.
type Result struct {
	Allowed         bool
	Limit           int64
	Remaining       int64
	ResetAfter      time.Duration
	RetryAfter      time.Duration
	ExceedsCapacity bool
	// Degraded marks a result decided without the shared store (the
	// per-replica fallback while Redis is unreachable): right in shape,
	// not exact across replicas.
	Degraded bool
}

// ErrUnavailable wraps the error of a store that could not decide (Redis
// unreachable, slow, or the circuit breaker open). Nothing was taken.
var ErrUnavailable = errors.New("limiter: store unavailable")

// ErrDeniedDespite wraps the error of a store that did decide, and denied,
// but failed to tidy up afterwards (a Redis Cluster refund, say): the
// denial stands, res is filled, and the error is for the logs and the
// breaker. A failure mode must not turn it into an allow.
var ErrDeniedDespite = errors.New("limiter: denied, with an error after the decision")

// Store applies the token-bucket arithmetic to buckets it keeps.
//
// Take decides reqs as one, all-or-nothing: if every bucket can pay its cost,
// every cost is taken and Take returns true; if any bucket cannot, nothing is
// taken from any bucket and Take returns false. res must have len(reqs); on
// return res[i] describes bucket i after the decision. An error means no
// decision was made (the store is unreachable, say) and nothing was taken.
type Store interface {
	Take(ctx context.Context, reqs []Request, res []Result) (allowed bool, err error)
}

// DeadlineStore is a Store that can also bound one decision by a deadline
// of its own. TakeBy is Take ending at deadline (with an error wrapping
// context.DeadlineExceeded) as well as with ctx; a zero deadline adds no
// bound. It exists for callers on the hot path that bound every decision:
// a context derived for the purpose costs a context, a timer and a
// registration with its parent each time, where a store can reuse its own.
type DeadlineStore interface {
	Store
	TakeBy(ctx context.Context, deadline time.Time, reqs []Request, res []Result) (allowed bool, err error)
}

// Validate checks a decision's input the same way for every store: at
// least one bucket, a result for each, names, identities and costs set,
// limits built by NewLimit, no bucket twice.
func Validate(reqs []Request, res []Result) error {
	if len(reqs) == 0 {
		return ErrNoBuckets
	}
	if len(res) != len(reqs) {
		return fmt.Errorf("limiter: %d results for %d requests", len(res), len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		if r.Name == "" || r.ID == "" {
			return fmt.Errorf("%w (request %d: name %q, id %q)", ErrKey, i, r.Name, r.ID)
		}
		if r.Cost < 0 {
			return fmt.Errorf("%w (request %d: got %d)", ErrCost, i, r.Cost)
		}
		if !r.Limit.Valid() {
			return fmt.Errorf("%w (request %d: limit not built by NewLimit)", ErrCapacity, i)
		}
		for j := 0; j < i; j++ {
			if reqs[j].Name == r.Name && reqs[j].ID == r.ID {
				return fmt.Errorf("%w (requests %d and %d: %s/%s)", ErrDuplicate, j, i, r.Name, r.ID)
			}
		}
	}
	return nil
}

// RetryAfter is how long a denied decision must wait before it could pass:
// the longest wait among the buckets that could not pay. It is 0 when the
// decision was allowed or when some bucket's cost exceeds its capacity.
func RetryAfter(res []Result) time.Duration {
	var d time.Duration
	for i := range res {
		if res[i].ExceedsCapacity {
			return 0
		}
		if !res[i].Allowed && res[i].RetryAfter > d {
			d = res[i].RetryAfter
		}
	}
	return d
}
