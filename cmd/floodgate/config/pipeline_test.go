package config

import (
	"strings"
	"testing"
)

func TestRedisPipeliningIsOnByDefaultAndConfigurable(t *testing.T) {
	c, err := Parse("min.yaml", []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Redis.Pipeline == nil || !*c.Store.Redis.Pipeline || c.Store.Redis.PipelineMaxBatch != 0 {
		t.Errorf("default: pipeline %v, max batch %d; want on, 0 (the store's default)", c.Store.Redis.Pipeline, c.Store.Redis.PipelineMaxBatch)
	}
	c, err = Parse("p.yaml", []byte("store:\n  backend: redis\n  redis: {addresses: [\"r:6379\"], pipeline: true, pipeline_max_batch: 32, pipeline_flushers: 3}\n"+goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Store.Redis; !*r.Pipeline || r.PipelineMaxBatch != 32 || r.PipelineFlushers != 3 {
		t.Errorf("pipeline %v, max batch %d, flushers %d; want on, 32, 3", *r.Pipeline, r.PipelineMaxBatch, r.PipelineFlushers)
	}
	c, err = Parse("p.yaml", []byte("store:\n  backend: redis\n  redis: {addresses: [\"r:6379\"], pipeline: false}\n"+goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if *c.Store.Redis.Pipeline {
		t.Error("pipeline: false read as on")
	}
	for _, tc := range []struct{ yaml, want string }{
		{"store:\n  redis:\n    pipeline_max_batch: -1\n", `bad.yaml:3: store.redis.pipeline_max_batch: must be between 1 and 4096 (got -1)`},
		{"store:\n  redis:\n    pipeline_max_batch: 100000\n", `bad.yaml:3: store.redis.pipeline_max_batch: must be between 1 and 4096 (got 100000)`},
		{"store:\n  redis:\n    pipeline: false\n    pipeline_max_batch: 8\n", `bad.yaml:4: store.redis.pipeline_max_batch: only applies with pipeline: true`},
		{"store:\n  redis:\n    pipeline_flushers: 65\n", `bad.yaml:3: store.redis.pipeline_flushers: must be between 1 and 64 (got 65)`},
		{"store:\n  redis:\n    pipeline: false\n    pipeline_flushers: 2\n", `bad.yaml:4: store.redis.pipeline_flushers: only applies with pipeline: true`},
		{"store:\n  redis:\n    pipeline: maybe\n", `bad.yaml:3:`},
	} {
		_, err := Parse("bad.yaml", []byte(tc.yaml+goodPolicy))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %s", tc.yaml, err, tc.want)
		}
	}
}
