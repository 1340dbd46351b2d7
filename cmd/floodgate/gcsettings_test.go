package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/config"
)

func TestPlanGC(t *testing.T) {
	gogc, ratio, zero := 400, 0.9, 0.0
	rt := config.Runtime{GOGC: &gogc, MemoryLimitRatio: &ratio}
	env := func(vars ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for _, v := range vars {
				if name, val, _ := strings.Cut(v, "="); name == k {
					return val, true
				}
			}
			return "", false
		}
	}
	limit := func(n int64) func() int64 { return func() int64 { return n } }
	for _, tc := range []struct {
		name      string
		rt        config.Runtime
		getenv    func(string) (string, bool)
		cgroup    int64
		store     int64
		percent   int
		memLimit  int64
		limitFrom string
	}{
		{"defaults in a container", rt, env(), 1 << 30, 0, 400, 966367641, "0.90 of the container's limit"},
		{"no container limit", rt, env(), 0, 0, 400, 0, "no container memory limit"},
		{"the shipped Deployment: 256 Mi less what Go's limit does not hold", rt, env(), 256 << 20, 0, 400, 208 << 20, "less 48 MiB"},
		{"a container too small for the allowance: half of it", rt, env(), 64 << 20, 0, 400, 32 << 20, "less 32 MiB"},
		{"a lower ratio than the allowance", config.Runtime{GOGC: &gogc, MemoryLimitRatio: func() *float64 { r := 0.5; return &r }()}, env(), 256 << 20, 0, 400, 128 << 20, "0.50 of the container's limit"},
		{"an in-memory store, no container limit", rt, env(), 0, 40 << 20, 400, 104 << 20, "the in-memory buckets at memory.max_buckets (41943040 bytes) + 64 MiB"},
		{"an in-memory store in a container", rt, env(), 1 << 30, 40 << 20, 400, 966367641, "0.90 of the container's limit"},
		{"GOGC wins", rt, env("GOGC=150"), 1 << 30, 0, -1, 966367641, "0.90"},
		{"GOMEMLIMIT wins", rt, env("GOMEMLIMIT=100MiB"), 1 << 30, 40 << 20, 400, 0, "GOMEMLIMIT"},
		{"ratio 0", config.Runtime{GOGC: &gogc, MemoryLimitRatio: &zero}, env(), 0, 40 << 20, 400, 0, "memory_limit_ratio: 0"},
	} {
		p := planGC(tc.rt, tc.store, tc.getenv, limit(tc.cgroup))
		if p.gcPercent != tc.percent || p.memLimit != tc.memLimit || !strings.Contains(p.limitFrom, tc.limitFrom) {
			t.Errorf("%s: percent %d, limit %d (%s); want %d, %d (%s)", tc.name, p.gcPercent, p.memLimit, p.limitFrom, tc.percent, tc.memLimit, tc.limitFrom)
		}
	}
	// What the start-up log says comes from the same reading of the environment.
	for _, tc := range []struct {
		getenv      func(string) (string, bool)
		gogc, limit string
	}{
		{env(), "400", "966367641"},
		{env("GOGC=150"), "150", "966367641"},
		{env("GOMEMLIMIT=100MiB"), "400", "100MiB"},
	} {
		if p := planGC(rt, 0, tc.getenv, limit(1<<30)); p.gogc != tc.gogc || p.limit != tc.limit {
			t.Errorf("logged gogc %q, memory_limit %q; want %q, %q", p.gogc, p.limit, tc.gogc, tc.limit)
		}
	}
}

// apply hands the plan to the runtime: the collector then runs at that
// percentage, under that limit.
func TestGCPlanApplies(t *testing.T) {
	prevPercent := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(-1)
	defer func() { debug.SetGCPercent(prevPercent); debug.SetMemoryLimit(prevLimit) }()
	gcPlan{gcPercent: 250, memLimit: 3 << 30}.apply()
	if got := debug.SetGCPercent(100); got != 250 {
		t.Errorf("GC percent %d, want 250", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Errorf("memory limit %d, want %d", got, 3<<30)
	}
	gcPlan{gcPercent: -1}.apply() // GOGC set: left alone
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent %d after a plan that leaves it, want 100", got)
	}
}

func TestReadCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		self  string
		files map[string]string
		want  int64
	}{
		{"v2 under its path", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "268435456\n"}, 268435456},
		{"v2 unlimited", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "max\n", "memory.max": "1000"}, 0},
		{"v2 in its own namespace", "0::/\n", map[string]string{"memory.max": "536870912"}, 536870912},
		{"v1 memory controller", "4:memory:/process_api/x\n1:cpu:/\n0::/\n", map[string]string{"memory/process_api/x/memory.limit_in_bytes": "1073741824"}, 1073741824},
		{"v1 joint controllers", "3:cpuacct,memory:/a\n", map[string]string{"memory/a/memory.limit_in_bytes": "2048"}, 2048},
		{"v1 unlimited", "4:memory:/x\n", map[string]string{"memory/x/memory.limit_in_bytes": "9223372036854771712"}, 0},
		{"nothing readable", "", nil, 0},
		{"garbage", "0::/\n", map[string]string{"memory.max": "lots"}, 0},
	} {
		root := t.TempDir()
		for name, content := range tc.files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		self := filepath.Join(root, "self-cgroup")
		if err := os.WriteFile(self, []byte(tc.self), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := readCgroupLimit(self, root); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
