package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/limiter/redistest"
)

// localRedisConfig is the configuration make run-redis serves.
const localRedisConfig = "internal/config/local-redis.yaml"

// TestTheLocalRedisConfigValidatesAndServes: the file make run-redis
// serves validates as shipped, and served (on a real redis-server, free
// ports) decides in Redis: the sample policy's burst of 5, then a denial,
// with the bucket's key in Redis.
func TestTheLocalRedisConfigValidatesAndServes(t *testing.T) {
	path := filepath.Join("..", "..", localRedisConfig)
	if out, err := exec.Command(binary, "validate", "--config", path).CombinedOutput(); err != nil {
		t.Fatalf("validate %s: %v\n%s", localRedisConfig, err, out)
	}
	mk, err := exec.Command("make", "-s", "-n", "-C", "../..", "run-redis").CombinedOutput()
	if err != nil || !strings.Contains(string(mk), "./cmd/floodgate serve --config "+localRedisConfig) {
		t.Fatalf("make run-redis does not serve %s: %v\n%s", localRedisConfig, err, mk)
	}
	shipped, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Start(t)
	cfg := strings.NewReplacer(
		"grpc: 127.0.0.1:9191", "grpc: 127.0.0.1:0",
		"admin: 127.0.0.1:9192", "admin: 127.0.0.1:0",
		"addresses: [127.0.0.1:6379]", "addresses: ["+r.Addr+"]",
	).Replace(string(shipped))
	if strings.Count(cfg, "127.0.0.1:0") != 2 || !strings.Contains(cfg, r.Addr) {
		t.Fatalf("%s no longer listens on 127.0.0.1:9191 and :9192 with Redis at 127.0.0.1:6379:\n%s", localRedisConfig, shipped)
	}
	p := startFloodgate(t, cfg)
	for i := 1; i <= 6; i++ {
		resp := p.Check(t, request(t, "/api/items", "203.0.113.9"))
		if allowed := isAllowed(resp); allowed != (i <= 5) {
			t.Fatalf("request %d allowed: %v; want the burst of 5, then a denial", i, allowed)
		}
		if hdr(resp, "x-ratelimit-degraded") != "" {
			t.Fatalf("request %d was decided degraded, not in Redis", i)
		}
	}
	keys, err := r.Client().Keys(context.Background(), "fg:sample-per-caller:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys in Redis: %v (%v); want the one bucket", keys, err)
	}
}
