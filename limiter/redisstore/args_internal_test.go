package redisstore

import (
	"fmt"
	"testing"
)

// TestTakeArgvSendsEachLimitOnce: the script call's ARGV names each
// distinct limit once, in order of first use, and every bucket by its
// limit's position and its cost.
func TestTakeArgvSendsEachLimitOnce(t *testing.T) {
	a := limitArgs{100, 10000, 1}
	b := limitArgs{5, 1000000, 3}
	decisions := [][]bucketArgs{
		{{a, 1}},
		{{b, 2}, {a, 1}},
		{{a, 3}},
	}
	got := takeArgv(len(decisions), func(j int) []bucketArgs { return decisions[j] })
	want := []any{
		3, 2, // decisions, distinct limits
		int64(100), int64(10000), int64(1), int64(5), int64(1000000), int64(3),
		1, 1, int64(1), // decision 1: one bucket, limit 1, cost 1
		2, 2, int64(2), 1, int64(1), // decision 2: limit 2 cost 2, limit 1 cost 1
		1, 1, int64(3),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("takeArgv = %v\nwant        %v", got, want)
	}
	if r := refundArgv(decisions[1]); fmt.Sprint(r) != fmt.Sprint([]any{int64(5), int64(1000000), int64(3), int64(2), int64(100), int64(10000), int64(1), int64(1)}) {
		t.Errorf("refundArgv = %v", r)
	}
}
