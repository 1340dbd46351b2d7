package redisstore

// The scripts' arguments. tokenbucket.lua reads each distinct limit once per
// call and a (limit, cost) pair per bucket; refund.lua reads four integers
// per bucket. Both are built here, from the same bucket description.

// limitArgs is a limit as the scripts read it: capacity C (tokens), K units
// per token, G units gained per microsecond.
type limitArgs struct{ c, k, g int64 }

// bucketArgs is one bucket of a decision: its limit and the cost to take.
type bucketArgs struct {
	limitArgs
	cost int64
}

// takeArgv is tokenbucket.lua's ARGV for n decisions decided in turn,
// decision j's buckets being buckets(j) (in KEYS order).
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
	a := make([]any, 0, 2+3*len(limits)+n+2*total)
	a = append(a, n, len(limits))
	for _, l := range limits {
		a = append(a, l.c, l.k, l.g)
	}
	for j := 0; j < n; j++ {
		bs := buckets(j)
		a = append(a, len(bs))
		for _, b := range bs {
			i, _ := limitIndex(limits, b.limitArgs)
			a = append(a, i, b.cost)
		}
	}
	return a
}

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
