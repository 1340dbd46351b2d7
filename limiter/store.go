package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Request asks for Cost tokens from one bucket, or charges or refunds them
// (Kind). A bucket is named by the pair (Name, ID): Name is the bucket
// family (a policy), ID the caller within it (an API-key hash, a client IP).
// Stores keep buckets of different pairs apart.
type Request struct {
	Name  string
	ID    string
	Limit Limit
	Cost  int64
	// Kind is what the request does to its bucket: Take (the zero value)
	// unless set.
	Kind Kind
	// Lease marks a bucket whose Takes may be decided from a lease when it
	// is hot (limiter/lease: a policy's lease: auto); a store that leases
	// nothing ignores it.
	Lease bool
	// Quota, when set, makes the bucket a calendar quota's count in its
	// current window (see Quota), decided with the decision's token
	// buckets all or nothing; Limit must still be a valid limit, which
	// what knows no quotas reads as the quota's rough shape (capacity the
	// quota's limit), and the store ignores.
	Quota *Quota
}

// Kind is what a Request does to its bucket.
type Kind uint8

const (
	// Take asks for Cost tokens on the request path: allowed iff the
	// bucket holds them, all or nothing with the decision's other Takes,
	// and free when denied. A Take of cost 0 is a look: it takes nothing,
	// and is allowed iff the bucket holds at least one whole token (so an
	// empty bucket, or one in debt, denies it), its RetryAfter the time
	// until one token is there.
	Take Kind = iota
	// Charge takes Cost tokens whatever the bucket holds, for a cost known
	// only once the work is done (Envoy's hits_addend on stream done): it
	// never denies, and applies whatever the decision's Takes decide. The
	// bucket may go into debt, down to a whole capacity below empty (the
	// bound, MaxMissing: what a charge would take beyond it is forgotten,
	// so an outsized charge locks its caller out for about one refill
	// window past empty at most, as a fixed window forgets an overdraft at
	// its end); the debt refills at the limit's rate, and every Take, looks
	// included, is denied until it has been paid back and the cost fits.
	Charge
	// Refund gives Cost tokens back, up to the capacity; it never denies
	// and applies whatever the decision's Takes decide.
	Refund
)

// String names the kind as the Go constant does.
func (k Kind) String() string {
	switch k {
	case Take:
		return "Take"
	case Charge:
		return "Charge"
	case Refund:
		return "Refund"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Result is everything a caller needs to know about one bucket after a
// decision: whether it alone could pay, its capacity, the whole tokens left,
// how long until it is full again and, when it could not pay, how long until
// it could. ExceedsCapacity marks a cost above the capacity: such a request can
// never pass, so RetryAfter stays 0 rather than promise a time that would lie.
// A Charge or a Refund is always Allowed; a bucket in debt (InDebt: a Charge
// took more than it held) has Remaining 0, a ResetAfter longer than its
// refill window and, after a Charge or a Refund, a RetryAfter until one whole
// token is back.
type Result struct {
	Allowed         bool
	Limit           int64
	Remaining       int64
	ResetAfter      time.Duration
	RetryAfter      time.Duration
	ExceedsCapacity bool
	// InDebt: after the decision the bucket holds less than nothing, so a
	// Charge in it took more than was left (envoyproxy/ratelimit would
	// call its counter over the limit).
	InDebt bool
	// Window is a quota's current window's length (zero for a token
	// bucket): RateLimit-Policy's w.
	Window time.Duration
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
// Take decides reqs as one. The requests of kind Take are all-or-nothing:
// if every one of their buckets can pay its cost, every cost is taken and
// Take returns true; if any cannot, nothing is taken from any of them and
// Take returns false. Charges and Refunds are applied in the same decision
// whatever the Takes decide (they never deny), and do not count towards
// allowed: a decision of Charges and Refunds alone returns true. res must
// have len(reqs); on return res[i] describes bucket i after the decision.
// An error means the store could not decide (it is unreachable, say) and
// the caller must act as if nothing was taken or given back. A store
// should make that so (the Redis store's script decides nothing when it
// starts past the decision's deadline); where it cannot, the exception is
// its to bound and document (docs/failure-modes.md: a script started in
// time whose reply came late was applied, so a Charge retried after such an
// error may be charged twice).
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
// least one bucket, a result for each, names, identities set, costs >= 0
// (any int64: a Charge beyond the debt bound is clamped, a Take above the
// capacity denied), kinds known, limits built by NewLimit, no bucket twice.
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
		if r.Kind > Refund {
			return fmt.Errorf("%w (request %d: got %v)", ErrKind, i, r.Kind)
		}
		if !r.Limit.Valid() {
			return fmt.Errorf("%w (request %d: limit not built by NewLimit)", ErrCapacity, i)
		}
		if r.Quota != nil {
			if err := r.Quota.valid(); err != nil {
				return fmt.Errorf("%w (request %d)", err, i)
			}
		}
		if len(reqs) > maxPairwise {
			continue
		}
		for j := 0; j < i; j++ {
			if reqs[j].Name == r.Name && reqs[j].ID == r.ID {
				return fmt.Errorf("%w (requests %d and %d: %s/%s)", ErrDuplicate, j, i, r.Name, r.ID)
			}
		}
	}
	if len(reqs) > maxPairwise {
		return distinct(reqs)
	}
	return nil
}

// maxPairwise is the most buckets Validate compares pair by pair (no
// allocation); a larger decision is checked through a map, in linear time.
const maxPairwise = 16

// distinct reports the first bucket named twice in reqs.
func distinct(reqs []Request) error {
	type pair struct{ name, id string }
	seen := make(map[pair]int, len(reqs))
	for i := range reqs {
		p := pair{reqs[i].Name, reqs[i].ID}
		if j, dup := seen[p]; dup {
			return fmt.Errorf("%w (requests %d and %d: %s/%s)", ErrDuplicate, j, i, p.name, p.id)
		}
		seen[p] = i
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
