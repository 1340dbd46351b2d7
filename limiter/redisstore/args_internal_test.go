package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/floodgate/floodgate/limiter"
)

// readArgv decodes tokenbucket.lua's ARGV[1] (see the script) into its
// numbers, in order: D, L; C, K, G, j per limit; then per decision n_j and
// (limit, kind, cost) per bucket. It fails when bytes are left over or
// missing.
func readArgv(t *testing.T, blob []byte) []int64 {
	t.Helper()
	var got []int64
	u16 := func() int64 {
		if len(blob) < 2 {
			t.Fatalf("argv ends inside a uint16")
		}
		v := int64(binary.LittleEndian.Uint16(blob))
		blob = blob[2:]
		got = append(got, v)
		return v
	}
	u8 := func() {
		if len(blob) < 1 {
			t.Fatalf("argv ends inside a uint8")
		}
		got = append(got, int64(blob[0]))
		blob = blob[1:]
	}
	f64 := func() {
		if len(blob) < 8 {
			t.Fatalf("argv ends inside a double")
		}
		got = append(got, int64(math.Float64frombits(binary.LittleEndian.Uint64(blob))))
		blob = blob[8:]
	}
	d, l := u16(), u16()
	for range l {
		f64()
		f64()
		f64()
		u8()
	}
	for range d {
		n := u16()
		for range n {
			u16()
			u8()
			f64()
		}
	}
	f64() // the deadline
	if len(blob) != 0 {
		t.Fatalf("%d bytes left after the deadline", len(blob))
	}
	return got
}

// TestTakeArgvSendsEachLimitOnce: the script call's ARGV names each
// distinct limit once, in order of first use, and every bucket by its
// limit's position, its kind and its cost.
func TestTakeArgvSendsEachLimitOnce(t *testing.T) {
	a := limitArgs{100, 10000, 1, 0, nil}
	b := limitArgs{5, 1000000, 3, 0, nil}
	c := limitArgs{1001, 259200000000, 1001, 1, nil} // 1001 a month: steps of 10 µs
	decisions := [][]bucketArgs{
		{{a, limiter.Take, 1}},
		{{b, limiter.Take, 2}, {a, limiter.Charge, 1}},
		{{a, limiter.Refund, 3}, {c, limiter.Take, 0}},
	}
	argv := takeArgv(len(decisions), func(j int) []bucketArgs { return decisions[j] })
	if len(argv) != 1 {
		t.Fatalf("takeArgv = %d arguments, want one string", len(argv))
	}
	got := readArgv(t, argv[0].([]byte))
	want := []int64{
		3, 3, // decisions, distinct limits
		100, 10000, 1, 0, 5, 1000000, 3, 0, 1001, 259200000000, 1001, 1,
		1, 1, 0, 1, // decision 1: one bucket, limit 1, a take of 1
		2, 2, 0, 2, 1, 1, 1, // decision 2: limit 2 take 2, limit 1 charge 1
		2, 1, 2, 3, 3, 0, 0, // decision 3: limit 1 refund 3, limit 3 look
		0, // no deadline
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("takeArgv = %v\nwant        %v", got, want)
	}
	if r := refundArgv(decisions[1], nil); fmt.Sprint(r) != fmt.Sprint([]any{int64(5), int64(1000000), int64(3), int64(0), int64(2), int64(100), int64(10000), int64(1), int64(0), int64(1)}) {
		t.Errorf("refundArgv = %v", r)
	}
}

// TestLimitArgsCarryTheResolution: the scripts read a limit's resolution as
// the power of ten of its step in microseconds.
func TestLimitArgsCarryTheResolution(t *testing.T) {
	for _, tc := range []struct {
		l limiter.Limit
		j uint8
	}{
		{limiter.MustLimit(10, "1"), 0},
		{limiter.MustLimit(1001, "1001/2592000"), 1},
		{limiter.MustLimit(123457, "123457/31536000"), 4},
		{limiter.MustLimit(1<<32, "4294967291/31536000"), 9},
	} {
		k, g := tc.l.Units()
		if got := limitArgsOf(tc.l); got != (limitArgs{tc.l.Capacity, k, g, tc.j, nil}) {
			t.Errorf("%v (step %v): limitArgs %+v, want j = %d", tc.l, tc.l.Resolution(), got, tc.j)
		}
	}
}
