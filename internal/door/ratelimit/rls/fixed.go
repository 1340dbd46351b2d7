package rls

import (
	"sync"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// epochWindows are envoyproxy/ratelimit's fixed windows: a whole number of
// seconds each, aligned to the Unix epoch (src/limiter/cache_key.go: the
// key holds now / divider · divider).
type epochWindows struct{ seconds int64 }

// Window implements limiter.Windows.
func (w epochWindows) Window(t time.Time) (start, end time.Time) {
	s := t.Unix()
	s -= ((s % w.seconds) + w.seconds) % w.seconds
	return time.Unix(s, 0), time.Unix(s+w.seconds, 0)
}

// String names the windows, as a report shows a quota's calendar.
func (w epochWindows) String() string {
	return (time.Duration(w.seconds) * time.Second).String() + " from the epoch"
}

// fixedQuotas holds one Quota per limit and window length, so that a
// decision allocates none.
var fixedQuotas sync.Map // fixedKey → *limiter.Quota

type fixedKey struct{ n, seconds int64 }

// fixedQuota is the quota of n requests a window that rls.windows: fixed
// counts a limit's descriptors in: the window is the bucket's (n tokens a
// window: its rate's inverse times n).
func fixedQuota(n int64, bucket limiter.Limit) *limiter.Quota {
	num, den := bucket.Rate.Fraction()
	k := fixedKey{n, n * den / num}
	if q, ok := fixedQuotas.Load(k); ok {
		return q.(*limiter.Quota)
	}
	q, _ := fixedQuotas.LoadOrStore(k, &limiter.Quota{Limit: n, Windows: epochWindows{k.seconds}})
	return q.(*limiter.Quota)
}
