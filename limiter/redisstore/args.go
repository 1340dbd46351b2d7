package redisstore

import (
	"encoding/binary"
	"math"
)

// The scripts' arguments. tokenbucket.lua reads each distinct limit once per
// call and a (limit, cost) pair per bucket, all in one binary string;
// refund.lua, which only a denial across Redis Cluster slots runs, reads
// four integers per bucket. Both are built here, from the same bucket
// description.

// limitArgs is a limit as the scripts read it: capacity C (tokens), K units
// per token, G units gained per microsecond.
type limitArgs struct{ c, k, g int64 }

// bucketArgs is one bucket of a decision: its limit and the cost to take.
type bucketArgs struct {
	limitArgs
	cost int64
}

// takeArgv is tokenbucket.lua's ARGV for n decisions decided in turn,
// decision j's buckets being buckets(j) (in KEYS order): one binary string
// (see the script).
func takeArgv(n int, buckets func(j int) []bucketArgs) []any {
	var small [4]limitArgs
	limits := small[:0]
	total := 0
	for j := 0; j < n; j++ {
		for _, b := range buckets(j) {
			_, limits = limitIndex(limits, b.limitArgs)
			total++
		}
	}
	a := make([]byte, 0, 4+24*len(limits)+2*n+10*total)
	a = le.AppendUint16(a, uint16(n))
	a = le.AppendUint16(a, uint16(len(limits)))
	for _, l := range limits {
		a = appendFloat(a, l.c)
		a = appendFloat(a, l.k)
		a = appendFloat(a, l.g)
	}
	for j := 0; j < n; j++ {
		bs := buckets(j)
		a = le.AppendUint16(a, uint16(len(bs)))
		for _, b := range bs {
			i, _ := limitIndex(limits, b.limitArgs)
			a = le.AppendUint16(a, uint16(i))
			a = appendFloat(a, b.cost)
		}
	}
	return []any{a}
}

var le = binary.LittleEndian

// appendFloat appends x as a little-endian double: exact, as every value the
// scripts read is below 2^53.
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

// refundArgv is refund.lua's ARGV: C, K, G and the cost per bucket.
func refundArgv(buckets []bucketArgs) []any {
	a := make([]any, 0, 4*len(buckets))
	for _, b := range buckets {
		a = append(a, b.c, b.k, b.g, b.cost)
	}
	return a
}
