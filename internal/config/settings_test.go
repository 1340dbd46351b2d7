package config

import (
	"testing"
	"time"
)

func TestRedisPipeliningIsOnByDefaultAndConfigurable(t *testing.T) {
	c := mustParse(t, goodPolicy)
	if r := c.Store.Redis; r.Pipeline == nil || !*r.Pipeline || r.PipelineMaxBatch != 128 || r.PipelineFlushers != 1 {
		t.Errorf("default: pipeline %v, max batch %d, flushers %d; want on, the documented 128 and 1", r.Pipeline, r.PipelineMaxBatch, r.PipelineFlushers)
	}
	if DefaultPipelineMaxBatch != 128 || DefaultPipelineFlushers != 1 || DefaultPipelineWait != 100*time.Microsecond {
		t.Error("a pipeline default constant differs from its documented value")
	}
	c = mustParse(t, "store:\n  backend: redis\n  redis: {addresses: [\"r:6379\"], pipeline: true, pipeline_max_batch: 32, pipeline_flushers: 3}\n"+goodPolicy)
	if r := c.Store.Redis; !*r.Pipeline || r.PipelineMaxBatch != 32 || r.PipelineFlushers != 3 {
		t.Errorf("pipeline %v, max batch %d, flushers %d; want on, 32, 3", *r.Pipeline, r.PipelineMaxBatch, r.PipelineFlushers)
	}
	if w := c.Store.Redis.PipelineWait; w.Duration != 100*time.Microsecond || w.IsSet() {
		t.Errorf("pipeline_wait left out: %v (set %v); want the documented default, 100µs", w.Duration, w.IsSet())
	}
	for _, tc := range []struct {
		yaml string
		want time.Duration
	}{{"2ms", 2 * time.Millisecond}, {"0s", 0}, {"10ms", 10 * time.Millisecond}} {
		c = mustParse(t, "store:\n  backend: redis\n  redis: {addresses: [\"r:6379\"], pipeline_wait: "+tc.yaml+"}\n"+goodPolicy)
		if w := c.Store.Redis.PipelineWait; w.Duration != tc.want || !w.IsSet() {
			t.Errorf("pipeline_wait: %s read as %v (set %v)", tc.yaml, w.Duration, w.IsSet())
		}
	}
	c = mustParse(t, "store:\n  backend: redis\n  redis: {addresses: [\"r:6379\"], pipeline: false}\n"+goodPolicy)
	if *c.Store.Redis.Pipeline {
		t.Error("pipeline: false read as on")
	}
	// The defaults filled in do not count as set: without pipelining they
	// are not "settings that only apply with pipeline: true".
	if r := c.Store.Redis; r.PipelineMaxBatch != 128 || r.PipelineFlushers != 1 {
		t.Errorf("pipeline: false: max batch %d, flushers %d; want the defaults, unreported", r.PipelineMaxBatch, r.PipelineFlushers)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"store:\n  redis:\n    pipeline_max_batch: -1\n", `bad.yaml:3: store.redis.pipeline_max_batch: must be between 1 and 4096 (got -1)`},
		{"store:\n  redis:\n    pipeline_max_batch: 100000\n", `bad.yaml:3: store.redis.pipeline_max_batch: must be between 1 and 4096 (got 100000)`},
		{"store:\n  redis:\n    pipeline: false\n    pipeline_max_batch: 8\n", `bad.yaml:4: store.redis.pipeline_max_batch: only applies with pipeline: true`},
		{"store:\n  redis:\n    pipeline_flushers: 65\n", `bad.yaml:3: store.redis.pipeline_flushers: must be between 1 and 64 (got 65)`},
		{"store:\n  redis:\n    pipeline: false\n    pipeline_flushers: 2\n", `bad.yaml:4: store.redis.pipeline_flushers: only applies with pipeline: true`},
		{"store:\n  redis:\n    pipeline_wait: 11ms\n", `bad.yaml:3: store.redis.pipeline_wait: must be between 0s and 10ms, as every decision of a held batch waits that long (got 11ms)`},
		{"store:\n  redis:\n    pipeline_wait: -1ms\n", `bad.yaml:3: store.redis.pipeline_wait: must be between 0s and 10ms, as every decision of a held batch waits that long (got -1ms)`},
		{"store:\n  redis:\n    pipeline: false\n    pipeline_wait: 0s\n", `bad.yaml:4: store.redis.pipeline_wait: only applies with pipeline: true`},
		{"store:\n  redis:\n    pipeline: maybe\n", `bad.yaml:3:`},
	} {
		wantProblem(t, tc.yaml+goodPolicy, tc.want)
	}
}

func TestRuntimeDefaultsAndBounds(t *testing.T) {
	c := mustParse(t, goodPolicy)
	if r := c.Runtime; r.GOGC == nil || *r.GOGC != DefaultGOGC || r.MemoryLimitRatio == nil || *r.MemoryLimitRatio != DefaultMemoryLimitRatio {
		t.Fatalf("defaults: gogc %v, ratio %v; want %d, %v", r.GOGC, r.MemoryLimitRatio, DefaultGOGC, DefaultMemoryLimitRatio)
	}
	c = mustParse(t, "runtime: {gogc: 150, memory_limit_ratio: 0}\n"+goodPolicy)
	if *c.Runtime.GOGC != 150 || *c.Runtime.MemoryLimitRatio != 0 {
		t.Errorf("gogc %d ratio %v; want 150, 0", *c.Runtime.GOGC, *c.Runtime.MemoryLimitRatio)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"runtime:\n  gogc: 5\n", `bad.yaml:2: runtime.gogc: must be between 10 and 10000 percent (got 5`},
		{"runtime:\n  gogc: off\n", `bad.yaml:2:`},
		{"runtime:\n  memory_limit_ratio: 1.5\n", `bad.yaml:2: runtime.memory_limit_ratio: must be a fraction in [0, 1]`},
		{"runtime:\n  memory_limit_ratio: -0.1\n", `bad.yaml:2: runtime.memory_limit_ratio: must be a fraction in [0, 1]`},
	} {
		wantProblem(t, tc.yaml+goodPolicy, tc.want)
	}
}

func TestListenDecoder(t *testing.T) {
	c := mustParse(t, goodPolicy)
	if c.Listen.Decoder != "fast" {
		t.Errorf("default decoder %q, want fast", c.Listen.Decoder)
	}
	if c = mustParse(t, "listen: {decoder: protobuf}\n"+goodPolicy); c.Listen.Decoder != "protobuf" {
		t.Fatalf("decoder %q", c.Listen.Decoder)
	}
	wantProblem(t, "listen:\n  decoder: slow\n"+goodPolicy, `bad.yaml:2: listen.decoder: must be fast or protobuf (got "slow")`)
}

// TestTheOverLimitCacheDefaultLivesHere: serve passes max_entries to the
// resilience layer as it is; left out, it is the documented 100000 (0 turns
// the cache off).
func TestTheOverLimitCacheDefaultLivesHere(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want int
	}{
		{"", DefaultOverLimitEntries},
		{"store: {over_limit_cache: {max_entries: 0}}\n", 0},
		{"store: {over_limit_cache: {max_entries: 7}}\n", 7},
	} {
		c := mustParse(t, tc.yaml+goodPolicy)
		if m := c.Store.OverLimitCache.MaxEntries; m == nil || *m != tc.want {
			t.Errorf("%q: max_entries %v, want %d", tc.yaml, m, tc.want)
		}
	}
	if DefaultOverLimitEntries != 100_000 {
		t.Errorf("DefaultOverLimitEntries %d, want the documented 100000", DefaultOverLimitEntries)
	}
}
