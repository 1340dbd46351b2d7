package redisstore

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// The scripts' arguments. tokenbucket.lua reads each distinct limit once per
// call and a (limit, kind, cost) triple per bucket, all in one binary
// string; refund.lua, which only a denial across Redis Cluster slots runs,
// reads five integers per bucket. Both are built here, from the same bucket
// description.

// limitArgs is a limit as the scripts read it: capacity C (tokens), K units
// per token, G units gained per step, and j, the resolution (a step is
// 10^j µs); a quota's is its limit, 1, 1, quotaRes and its windows q.
type limitArgs struct {
	c, k, g int64
	j       uint8
	q       *quotaArgs
}

// quotaRes is the resolution that marks a quota's limit in the scripts.
const quotaRes = 255

// quotaArgs are the windows a quota's decision may be counted in, cut from
// its calendar around the replica's estimate of Redis' clock: the start
// of the window before, the current window's start and end, and the end
// of the window after (microseconds since the Unix epoch). The script
// picks the one TIME is in.
type quotaArgs struct{ s0, s1, e1, e2 int64 }

// quotaArgsOf cuts q's windows around now.
func quotaArgsOf(q *limiter.Quota, now time.Time) *quotaArgs {
	s1, e1 := q.Windows.Window(now)
	s0, _ := q.Windows.Window(s1.Add(-time.Microsecond))
	_, e2 := q.Windows.Window(e1)
	return &quotaArgs{s0.UnixMicro(), s1.UnixMicro(), e1.UnixMicro(), e2.UnixMicro()}
}

// window returns the window the script chose (0 the one before, 1 the
// current one, 2 the one after).
func (q *quotaArgs) window(i int64) (start, end int64) {
	switch i {
	case 0:
		return q.s0, q.s1
	case 2:
		return q.e1, q.e2
	}
	return q.s1, q.e1
}

// quotaValue splits a quota's value in the script's reply into its count
// and the window the script chose.
func quotaValue(v int64) (count, window int64) { return v >> 2, v & 3 }

// limitArgsOf is l as the scripts read it.
func limitArgsOf(l limiter.Limit) limitArgs {
	k, g := l.Units()
	var j uint8
	for r := l.Resolution().Microseconds(); r >= 10; r /= 10 {
		j++
	}
	return limitArgs{c: l.Capacity, k: k, g: g, j: j}
}

// bucketArgs is one bucket of a decision: its limit, what it asks (kind:
// the script's 0 take, 1 charge, 2 refund, as limiter.Kind numbers them)
// and its cost.
type bucketArgs struct {
	limitArgs
	kind limiter.Kind
	cost int64
}

// takeArgv is tokenbucket.lua's ARGV for n decisions decided in turn,
// decision j's buckets being buckets(j) (in KEYS order), with no deadline:
// one binary string (see the script).
func takeArgv(n int, buckets func(j int) []bucketArgs) []any {
	return takeArgvBy(n, 0, buckets)
}

// takeArgvBy is takeArgv with the call's deadline, in microseconds since
// the Unix epoch by Redis' clock (0: none).
func takeArgvBy(n int, deadline int64, buckets func(j int) []bucketArgs) []any {
	var small [4]limitArgs
	limits := small[:0]
	total := 0
	for j := 0; j < n; j++ {
		for _, b := range buckets(j) {
			_, limits = limitIndex(limits, b.limitArgs)
			total++
		}
	}
	quotas := 0
	for _, l := range limits {
		if l.q != nil {
			quotas++
		}
	}
	a := make([]byte, 0, 4+25*len(limits)+32*quotas+2*n+11*total+8)
	a = le.AppendUint16(a, uint16(n))
	a = le.AppendUint16(a, uint16(len(limits)))
	for _, l := range limits {
		a = appendFloat(a, l.c)
		a = appendFloat(a, l.k)
		a = appendFloat(a, l.g)
		a = append(a, l.j)
		if l.q != nil {
			a = appendFloat(a, l.q.s0)
			a = appendFloat(a, l.q.s1)
			a = appendFloat(a, l.q.e1)
			a = appendFloat(a, l.q.e2)
		}
	}
	for j := 0; j < n; j++ {
		bs := buckets(j)
		a = le.AppendUint16(a, uint16(len(bs)))
		for _, b := range bs {
			i, _ := limitIndex(limits, b.limitArgs)
			a = le.AppendUint16(a, uint16(i))
			a = append(a, byte(b.kind))
			a = appendFloat(a, b.cost)
		}
	}
	return []any{appendFloat(a, deadline)}
}

var le = binary.LittleEndian

// appendFloat appends x as a little-endian double: exact for every value
// below 2^53, which every limit's numbers are; a cost above it (a charge of
// 2^63, say) is far beyond any bucket's bound, which it still is rounded.
func appendFloat(a []byte, x int64) []byte { return le.AppendUint64(a, math.Float64bits(float64(x))) }

// limitIndex returns l's position in limits, counted from 1 as the script
// counts, appending it when it is not there yet. Calls carry few distinct
// limits (one per policy), so a linear search is the fast one.
func limitIndex(limits []limitArgs, l limitArgs) (int, []limitArgs) {
	for i, x := range limits {
		if x == l {
			return i + 1, limits
		}
	}
	limits = append(limits, l)
	return len(limits), limits
}

// refundArgv is refund.lua's ARGV: C, K, G, j and the cost per bucket; for
// a quota, G is the start of the window its take was counted in, read
// from values, the take's reply (one value per bucket).
func refundArgv(buckets []bucketArgs, values []int64) []any {
	a := make([]any, 0, 5*len(buckets))
	for i, b := range buckets {
		g := b.g
		if b.q != nil {
			_, w := quotaValue(values[i])
			g, _ = b.q.window(w)
		}
		a = append(a, b.c, b.k, g, int64(b.j), b.cost)
	}
	return a
}
