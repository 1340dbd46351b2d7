package redisstore

import (
	"encoding/binary"
	"math"

	"github.com/floodgate/floodgate/limiter"
)

// The scripts' arguments. tokenbucket.lua reads each distinct limit once per
// call and a (limit, kind, cost) triple per bucket, all in one binary
// string; refund.lua, which only a denial across Redis Cluster slots runs,
// reads five integers per bucket. Both are built here, from the same bucket
// description.

// limitArgs is a limit as the scripts read it: capacity C (tokens), K units
// per token, G units gained per step, and j, the resolution (a step is
// 10^j µs).
type limitArgs struct {
	c, k, g int64
	j       uint8
}

// limitArgsOf is l as the scripts read it.
func limitArgsOf(l limiter.Limit) limitArgs {
	k, g := l.Units()
	var j uint8
	for r := l.Resolution().Microseconds(); r >= 10; r /= 10 {
		j++
	}
	return limitArgs{l.Capacity, k, g, j}
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
	a := make([]byte, 0, 4+25*len(limits)+2*n+11*total+8)
	a = le.AppendUint16(a, uint16(n))
	a = le.AppendUint16(a, uint16(len(limits)))
	for _, l := range limits {
		a = appendFloat(a, l.c)
		a = appendFloat(a, l.k)
		a = appendFloat(a, l.g)
		a = append(a, l.j)
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

// refundArgv is refund.lua's ARGV: C, K, G, j and the cost per bucket.
func refundArgv(buckets []bucketArgs) []any {
	a := make([]any, 0, 5*len(buckets))
	for _, b := range buckets {
		a = append(a, b.c, b.k, b.g, int64(b.j), b.cost)
	}
	return a
}
