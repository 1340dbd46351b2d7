package store

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter/redisstore"
)

// EvictionWarnings reads maxmemory-policy from every master the client
// reaches (INFO memory, which managed Redis services allow where they
// refuse CONFIG GET) and returns one warning per master whose policy can
// evict Floodgate's keys; none when every policy is noeviction. An error
// means the policy could not be read.
//
// Every bucket key carries an expiry (it expires when the bucket is full
// again), so the volatile-* policies can evict it as surely as the
// allkeys-* ones; an evicted bucket reads as a caller never seen, with a
// full burst to spend. With noeviction a full Redis refuses the write
// instead, and store.on_failure answers, visibly (degraded, counted).
func EvictionWarnings(ctx context.Context, c redis.UniversalClient) ([]string, error) {
	var (
		mu       sync.Mutex
		warnings []string
	)
	check := func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("%s: INFO memory: %w", node.Options().Addr, err)
		}
		if w := evictionWarning(node.Options().Addr, info); w != "" {
			mu.Lock()
			warnings = append(warnings, w)
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch cc := c.(type) {
	case *redis.ClusterClient:
		err = cc.ForEachMaster(ctx, check)
	case *redis.Client:
		err = check(ctx, cc)
	default:
		return nil, fmt.Errorf("cannot read maxmemory-policy through a %T", c)
	}
	sort.Strings(warnings)
	return warnings, err
}

// evictionWarning is the warning for one server's INFO memory, "" when its
// policy cannot evict Floodgate's keys.
func evictionWarning(addr, info string) string {
	policy := redisstore.InfoField(info, "maxmemory_policy")
	if policy == "" || policy == "noeviction" {
		return ""
	}
	limit := "no maxmemory is set yet, so nothing is evicted until one is"
	if m := redisstore.InfoField(info, "maxmemory"); m != "" && m != "0" {
		limit = "maxmemory is " + m + " bytes"
	}
	return fmt.Sprintf("redis %s has maxmemory-policy %s (%s): a full Redis evicts rate-limit buckets, "+
		"and a caller whose bucket was evicted starts again with a full burst; set maxmemory-policy noeviction, "+
		"so that a full Redis refuses the write and store.on_failure answers, counted as degraded, instead of limits being forgotten silently",
		addr, policy, limit)
}

// warnEviction logs evictionWarnings at start, once the server answered.
func warnEviction(ctx context.Context, c redis.UniversalClient, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ws, err := EvictionWarnings(ctx, c)
	if err != nil {
		log.Warn("could not read redis' maxmemory-policy: make sure it is noeviction, or a full Redis forgets rate-limit buckets", zap.Error(err))
	}
	for _, w := range ws {
		log.Warn(w)
	}
}
