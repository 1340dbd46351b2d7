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
		// Down to zero, or a credit an operator's Add gave (a count below
		// zero) left as it is: a refund gives back what was counted, never
		// more than the window's limit.
		return used - min(cost, max(used, 0))
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

// MaxQuotaCredit bounds what an operator's Add may give a quota beyond its
// limit in one window: the count goes no lower than −MaxQuotaCredit.
const MaxQuotaCredit = MaxQuota

// CheckQuota reports an adjustment q cannot take: a Set outside [−Limit,
// Limit + MaxQuotaCredit] (a count of at most twice the limit, at least
// −MaxQuotaCredit), an Add of the most negative int64, an unknown Op.
func (a Adjustment) CheckQuota(q *Quota) error {
	return a.check(-q.Limit, q.Limit+MaxQuotaCredit, "a debt of at most the limit, a credit of at most 2^48 beyond it")
}

// Count returns the window's count once a is applied to a window in which
// used tokens are taken. An Add of n > 0 gives n more requests in this
// window, beyond the limit if need be (the count goes below zero, to at
// most −MaxQuotaCredit): "500 more today" on a quota of 100 is 500 more,
// not 100. A negative Add counts |n| as a Charge does (up to twice the
// limit); a Set of n leaves n to take (count Limit − n); a Reset empties
// the window. Both stores apply it, the Redis store's script with the same
// arithmetic. It never overflows for an a that CheckQuota accepts.
func (q *Quota) Count(used int64, a Adjustment) int64 {
	switch a.Op {
	case OpAdd:
		if a.N >= 0 {
			if a.N >= used+MaxQuotaCredit {
				return -MaxQuotaCredit
			}
			return used - a.N
		}
		return q.Apply(used, Charge, -a.N)
	case OpSet:
		return q.Limit - a.N
	case OpReset:
		return 0
	}
	return used
}

// Balance is the Balance of a window [start, end) in which used tokens
// are taken, read at now.
func (q *Quota) Balance(used int64, start, end, now time.Time) Balance {
	b := Balance{Limit: q.Limit, Missing: used, Quota: true, WindowStart: start, WindowEnd: end, ResetAfter: max(end.Sub(now), 0)}
	if used < q.Limit {
		b.Remaining = q.Limit - used
	} else {
		b.Debt = used - q.Limit
	}
	return b
}
