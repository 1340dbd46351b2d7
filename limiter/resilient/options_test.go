package resilient_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/resilient"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// serveBreaker and servePipeline are the settings these tests run the
// store with: floodgate serve's defaults (docs/configuration.md), which
// live in internal/config, a floor this package's tests do not import;
// whole is the fallback share of on_failure: local by default, the whole
// limit.
var (
	serveBreaker  = resilient.BreakerOptions{Failures: 5, OpenFor: 500 * time.Millisecond}
	servePipeline = redisstore.PipelineOptions{MaxBatch: 128, Flushers: 1, Wait: 100 * time.Microsecond}
	whole         = resilient.Whole
)

// TestNewRefusesWhatItOnceDefaulted: a Timeout, breaker options or (with a
// fallback) a fallback share left zero or negative is refused with the
// field named, not replaced by a default of the library's own.
func TestNewRefusesWhatItOnceDefaulted(t *testing.T) {
	ok := resilient.Options{Timeout: time.Second, Breaker: serveBreaker, Fallback: storetest.Memory(nil), FallbackShare: whole}
	for _, tc := range []struct {
		name string
		edit func(o *resilient.Options)
		want string
	}{
		{"no timeout", func(o *resilient.Options) { o.Timeout = 0 }, "Options.Timeout must be positive"},
		{"a negative timeout", func(o *resilient.Options) { o.Timeout = -time.Second }, "Options.Timeout must be positive"},
		{"no breaker failures", func(o *resilient.Options) { o.Breaker.Failures = 0 }, "BreakerOptions.Failures must be at least 1"},
		{"negative breaker failures", func(o *resilient.Options) { o.Breaker.Failures = -1 }, "BreakerOptions.Failures must be at least 1"},
		{"no open time", func(o *resilient.Options) { o.Breaker.OpenFor = 0 }, "BreakerOptions.OpenFor must be positive"},
		{"a fallback without a share", func(o *resilient.Options) { o.FallbackShare = resilient.Share{} }, "a fallback needs its share of every limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			s, err := resilient.New(storetest.Memory(nil), o)
			if err == nil {
				s.Close()
				t.Fatalf("New accepted %+v", o)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one containing %q", err, tc.want)
			}
		})
	}
	// The same options, unedited, are accepted; and without a fallback
	// the share is not used, so it may be left zero.
	for _, o := range []resilient.Options{ok, {Timeout: time.Second, Breaker: serveBreaker}} {
		s, err := resilient.New(storetest.Memory(nil), o)
		if err != nil {
			t.Fatalf("New(%+v): %v", o, err)
		}
		s.Close()
	}
}

// TestNewBreakerRefusesWhatItOnceDefaulted: NewBreaker panics, naming the
// field, on options New would refuse.
func TestNewBreakerRefusesWhatItOnceDefaulted(t *testing.T) {
	for _, tc := range []struct {
		o    resilient.BreakerOptions
		want string
	}{
		{resilient.BreakerOptions{OpenFor: time.Second}, "BreakerOptions.Failures must be at least 1: the consecutive failures that open the breaker (got 0)"},
		{resilient.BreakerOptions{Failures: 5}, "BreakerOptions.OpenFor must be positive"},
		{resilient.BreakerOptions{Failures: 5, OpenFor: -time.Second}, "(got -1s)"},
	} {
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, tc.want) {
					t.Errorf("NewBreaker(%+v) panicked with %q, want %q", tc.o, msg, tc.want)
				}
			}()
			resilient.NewBreaker(tc.o, nil)
		}()
	}
}
