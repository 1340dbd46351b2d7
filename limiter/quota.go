package limiter

import (
	"errors"
	"fmt"
	"time"
)

// Windows is a calendar of fixed windows (limiter/calendar): every instant
// is in exactly one, and each window ends where the next one starts.
type Windows interface {
	// Window returns the window holding t: start <= t < end.
	Window(t time.Time) (start, end time.Time)
}

// Quota is a fixed-window counter, a calendar quota: at most Limit tokens
// are taken in each window of Windows, and the next window starts with none
// taken. A request names it through Request.Quota; its bucket is then the
// quota's count in the current window, decided with the decision's other
// buckets all or nothing, as a bucket is:
//
//   - A Take of n is allowed iff the count plus n is at most Limit (a look,
//     n = 0, needs one token left); RetryAfter is then the time to the
//     window's end, or ExceedsCapacity when n is above Limit.
//   - A Charge adds its cost whatever the count, up to twice Limit (the
//     bound a bucket's debt has: a quota may end its window over its
//     limit, and the next one starts at zero all the same); a Refund takes
//     its cost off, down to zero.
//   - Remaining = Limit − count (0 over the limit), ResetAfter the time to
//     the window's end, Result.Window the window's length.
//
// The window is chosen by the store's clock: Redis' TIME for the Redis
// store, whatever its replica's clock says.
type Quota struct {
	Limit   int64
	Windows Windows
}

// MaxQuota bounds a quota's limit: a count of twice the limit, tagged
// with the window it is in, stays an exact integer in the Redis script's
// doubles (below 2^53).
const MaxQuota = 1 << 48

// ErrQuota reports a quota without windows or with a limit out of range.
var ErrQuota = errors.New("limiter: a quota's limit must be a whole number from 1 to 2^48, and its windows set")

// valid reports whether q can be decided.
func (q *Quota) valid() error {
	if q.Windows == nil || q.Limit < 1 || q.Limit > MaxQuota {
		return fmt.Errorf("%w (got limit %d)", ErrQuota, q.Limit)
	}
	return nil
}

// Fits reports whether a Take of cost tokens can be paid by a window in
// which used tokens are taken: a look (cost 0) needs one token left.
func (q *Quota) Fits(used, cost int64) bool {
	need := max(cost, 1)
	return need <= q.Limit && used <= q.Limit-need
}

// Apply returns the count once a request of kind and cost is applied to a
// window in which used tokens are taken: a Take's cost added (the caller
// checked that it Fits), a Charge's up to twice the limit, a Refund's taken
// off down to zero. It never overflows, for any cost >= 0.
func (q *Quota) Apply(used int64, kind Kind, cost int64) int64 {
	switch kind {
	case Charge:
		if top := 2 * q.Limit; cost >= top-used {
			return max(top, used)
		}
	case Refund:
		return used - min(cost, used)
	}
	return used + cost
}

// Result returns what a caller needs to know about the window after a
// decision: used tokens taken in it, the request's kind and cost, whether
// a Take was or could have been allowed, the time left until the window
// ends and the window's length.
func (q *Quota) Result(used int64, kind Kind, cost int64, allowed bool, left, length time.Duration) Result {
	r := Result{
		Allowed:    allowed || kind != Take,
		Limit:      q.Limit,
		ResetAfter: left,
		Window:     length,
		InDebt:     used > q.Limit,
	}
	if used < q.Limit {
		r.Remaining = q.Limit - used
	}
	if kind != Take {
		if r.InDebt {
			r.RetryAfter = left
		}
		return r
	}
	if cost > q.Limit {
		r.ExceedsCapacity = true
		return r
	}
	if !allowed {
		r.RetryAfter = left
	}
	return r
}
