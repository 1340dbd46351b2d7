package config

import (
	"strings"
	"testing"
)

func TestRuntimeDefaultsAndBounds(t *testing.T) {
	c, err := Parse("min.yaml", []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Runtime; r.GOGC == nil || *r.GOGC != DefaultGOGC || r.MemoryLimitRatio == nil || *r.MemoryLimitRatio != DefaultMemoryLimitRatio {
		t.Fatalf("defaults: gogc %v, ratio %v; want %d, %v", r.GOGC, r.MemoryLimitRatio, DefaultGOGC, DefaultMemoryLimitRatio)
	}
	c, err = Parse("r.yaml", []byte("runtime: {gogc: 150, memory_limit_ratio: 0}\n"+goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if *c.Runtime.GOGC != 150 || *c.Runtime.MemoryLimitRatio != 0 {
		t.Errorf("gogc %d ratio %v; want 150, 0", *c.Runtime.GOGC, *c.Runtime.MemoryLimitRatio)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"runtime:\n  gogc: 5\n", `bad.yaml:2: runtime.gogc: must be between 10 and 10000 percent (got 5`},
		{"runtime:\n  gogc: off\n", `bad.yaml:2:`},
		{"runtime:\n  memory_limit_ratio: 1.5\n", `bad.yaml:2: runtime.memory_limit_ratio: must be a fraction in [0, 1]`},
		{"runtime:\n  memory_limit_ratio: -0.1\n", `bad.yaml:2: runtime.memory_limit_ratio: must be a fraction in [0, 1]`},
	} {
		_, err := Parse("bad.yaml", []byte(tc.yaml+goodPolicy))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %s", tc.yaml, err, tc.want)
		}
	}
}

func TestListenDecoder(t *testing.T) {
	c, err := Parse("min.yaml", []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.Decoder != "fast" {
		t.Errorf("default decoder %q, want fast", c.Listen.Decoder)
	}
	c, err = Parse("p.yaml", []byte("listen: {decoder: protobuf}\n"+goodPolicy))
	if err != nil || c.Listen.Decoder != "protobuf" {
		t.Fatalf("decoder %q, err %v", c.Listen.Decoder, err)
	}
	_, err = Parse("bad.yaml", []byte("listen:\n  decoder: slow\n"+goodPolicy))
	if want := `bad.yaml:2: listen.decoder: must be fast or protobuf (got "slow")`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %s", err, want)
	}
}
