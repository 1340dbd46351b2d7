package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// isCountOrIndex reports whether value i (counted from 0) of the argument
// string below is a uint16: after the header and two limits (values 0–7),
// the layout is count, (index, cost)…, decision after decision.
func isCountOrIndex(i int) bool {
	// decision 1: 8 count, 9 index, 10 cost; decision 2: 11 count, 12 index,
	// 13 cost, 14 index, 15 cost; decision 3: 16 count, 17 index, 18 cost.
	switch i {
	case 8, 9, 11, 12, 14, 16, 17:
		return true
	}
	return false
}

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
	argv := takeArgv(len(decisions), func(j int) []bucketArgs { return decisions[j] })
	if len(argv) != 1 {
		t.Fatalf("takeArgv = %d arguments, want one string", len(argv))
	}
	blob := argv[0].([]byte)
	var got []any
	for len(blob) > 0 { // every value is a uint16, or a double that holds an integer
		switch {
		case len(got) < 2 || (len(got) >= 8 && isCountOrIndex(len(got))):
			got = append(got, int64(binary.LittleEndian.Uint16(blob)))
			blob = blob[2:]
		default:
			got = append(got, int64(math.Float64frombits(binary.LittleEndian.Uint64(blob))))
			blob = blob[8:]
		}
	}
	want := []any{
		3, 2, // decisions, distinct limits
		100, 10000, 1, 5, 1000000, 3,
		1, 1, 1, // decision 1: one bucket, limit 1, cost 1
		2, 2, 2, 1, 1, // decision 2: limit 2 cost 2, limit 1 cost 1
		1, 1, 3,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("takeArgv = %v\nwant        %v", got, want)
	}
	if r := refundArgv(decisions[1]); fmt.Sprint(r) != fmt.Sprint([]any{int64(5), int64(1000000), int64(3), int64(2), int64(100), int64(10000), int64(1), int64(1)}) {
		t.Errorf("refundArgv = %v", r)
	}
}
