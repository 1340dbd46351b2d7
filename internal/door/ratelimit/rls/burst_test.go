package rls

import (
	"errors"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// TestBurstNamesAreUnambiguous: a top-level key `a.b` and a key `a` with a
// key `b` below it have the same name in ratelimit's form (d.a.b); each is
// then named by its Quoted name (d."a.b" and d.a."b"), a burst given the
// ambiguous name is refused naming both, and each burst reaches the limit
// it names. A name with a quote is read level by level; one without it is
// ratelimit's form, which still names a limit no other shares
// (d.c_10.0.0.1).
func TestBurstNamesAreUnambiguous(t *testing.T) {
	const twoPlaces = `domain: d
descriptors:
  - key: a.b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: c
    value: 10.0.0.1
    rate_limit: {unit: minute, requests_per_unit: 3}
`
	cfg := mustConfig(t, twoPlaces)
	top, nested := cfg.Select("d", kv("a.b", "x")), cfg.Select("d", kv("a", "x", "b", "y"))
	if top.Key != `d."a.b"` || nested.Key != `d.a."b"` {
		t.Fatalf("keys %s and %s, want d.\"a.b\" and d.a.\"b\"", top.Key, nested.Key)
	}
	var be BurstErrors
	if err := cfg.SetBursts(map[string]int64{"d.a.b": 5}); !errors.As(err, &be) || len(be) != 1 || !strings.Contains(be[0].Msg, `d."a.b", d.a."b"`) {
		t.Fatalf("a burst for the ambiguous d.a.b: %v, want it refused naming both", err)
	}
	if err := cfg.SetBursts(map[string]int64{`d."a.b"`: 5, `"d"."a"."b"`: 6, "d.c_10.0.0.1": 7}); err != nil {
		t.Fatal(err)
	}
	if top.Burst != 5 || nested.Burst != 6 || cfg.Select("d", kv("c", "10.0.0.1")).Burst != 7 {
		t.Fatalf("bursts: top %d, nested %d, want 5 and 6", top.Burst, nested.Burst)
	}
	cfg = mustConfig(t, twoPlaces)
	if err := cfg.SetBursts(map[string]int64{`d."c_10.0.0.1"`: 7, "d.nothing": 1}); !errors.As(err, &be) || len(be) != 1 || be[0].Key != "d.nothing" {
		t.Fatalf("a quoted name and an unknown one: %v, want only d.nothing refused", err)
	}
}

// TestABurstBelowTheRateSmoothsTheLimit: a burst smaller than
// requests_per_unit is a smaller bucket at the same rate: 60 a minute with
// a burst of 2 lets two through at once, then one a second.
func TestABurstBelowTheRateSmoothsTheLimit(t *testing.T) {
	cfg := mustConfig(t, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 60}\n")
	if err := cfg.SetBursts(map[string]int64{"edge.k": 2}); err != nil {
		t.Fatal(err)
	}
	clock := limiter.NewManualClock(time.Unix(1_000_000, 0))
	c := serve(t, NewService(cfg, ServiceOptions{Hash: plainHash, Store: storetest.Memory(clock)}))
	var got []rlsv3.RateLimitResponse_Code
	for range 3 {
		got = append(got, ask(t, c, desc("k", "v")).OverallCode)
	}
	clock.Advance(time.Second)
	got = append(got, ask(t, c, desc("k", "v")).OverallCode)
	if ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT; got[0] != ok || got[1] != ok || got[2] != over || got[3] != ok {
		t.Fatalf("codes %v, want OK OK OVER_LIMIT, then OK a second later", got)
	}
}

// TestALimitThatCannotBeCountedIsRefused: a burst no bucket can hold
// exactly is refused, naming the limit's file and line, and the limits
// keep the buckets they had.
func TestALimitThatCannotBeCountedIsRefused(t *testing.T) {
	cfg := mustConfig(t, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 4294967291}\n")
	before := cfg.Select("edge", kv("k", "v")).Bucket()
	err := cfg.SetBursts(map[string]int64{"edge.k": 1 << 62})
	if err == nil || !strings.Contains(err.Error(), "test.yaml:4") || !strings.Contains(err.Error(), "cannot be counted exactly") {
		t.Fatalf("a burst of 2^62 at a prime count a year: %v", err)
	}
	if cfg.Select("edge", kv("k", "v")).Bucket() != before {
		t.Error("a refused burst changed the limit")
	}
}
