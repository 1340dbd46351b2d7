// Package redisstore is the limiter.Store shared by every Floodgate replica:
// one Lua script (tokenbucket.lua) is the whole algorithm, run atomically
// inside Redis with Redis' clock. The Go side only builds keys and arguments
// and reads the reply.
//
// Key layout: <prefix><bucket name>:{<identity>}. The braces are a Redis
// Cluster hash tag, so all of one identity's buckets share a slot and one
// script call decides them together. Identities reach this package already
// hashed where they carry secrets (extauthz does that).
//
// Each key is one small integer with an expiry at the instant its bucket is
// full again; see the script for the exact encoding. Requires Redis >= 7.0
// (PEXPIRETIME).
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
)

//go:embed tokenbucket.lua
var scriptSource string

// Script is the token-bucket script; its SHA1 is what EVALSHA names.
var Script = redis.NewScript(scriptSource)

// DefaultPrefix starts every key Floodgate writes.
const DefaultPrefix = "fg:"

// Store is a limiter.Store backed by Redis. Safe for concurrent use.
type Store struct {
	client redis.Scripter
	prefix string
	script *redis.Script
}

// New returns a store that runs its script on client (a *redis.Client,
// *redis.ClusterClient or any other redis.Scripter) and prefixes every key
// with prefix (DefaultPrefix when empty).
func New(client redis.Scripter, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Store{client: client, prefix: prefix, script: Script}
}

// Key returns the Redis key of bucket (name, id).
func (s *Store) Key(name, id string) string {
	return s.prefix + name + ":{" + id + "}"
}

// Take implements limiter.Store with one script call: one round trip.
func (s *Store) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	return s.take(ctx, reqs, res)
}

// take runs the script; extra arguments follow the buckets' (tests use them
// to hand a clock to a script whose TIME call they replaced).
func (s *Store) take(ctx context.Context, reqs []limiter.Request, res []limiter.Result, extra ...any) (bool, error) {
	if err := limiter.Check(reqs, res); err != nil {
		return false, err
	}
	keys := make([]string, len(reqs))
	args := make([]any, 0, 4*len(reqs)+len(extra))
	for i := range reqs {
		r := &reqs[i]
		keys[i] = s.Key(r.Name, r.ID)
		k, g := r.Limit.Units()
		args = append(args, r.Limit.Capacity, k, g, r.Cost)
	}
	args = append(args, extra...)
	reply, err := s.script.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return false, fmt.Errorf("redis: token-bucket script: %w", explain(err))
	}
	if len(reply) != len(reqs)+1 {
		return false, fmt.Errorf("redis: token-bucket script returned %d values for %d buckets", len(reply), len(reqs))
	}
	allowed := reply[0] == 1
	for i := range reqs {
		r := &reqs[i]
		m := reply[i+1]
		fits := allowed || r.Limit.Fits(m, r.Cost)
		res[i] = r.Limit.Result(m, r.Cost, fits)
	}
	return allowed, nil
}

// ErrNoMaster reports Sentinels that answered but named no master: they
// monitor none by the configured name.
var ErrNoMaster = errors.New("the Sentinels know no master by the configured name")

// explain adds what a user can act on to go-redis errors that lack it. The
// script and INFO never reply nil, so a nil reply is the Sentinels' answer
// to a master name they do not monitor.
func explain(err error) error {
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: %w", ErrNoMaster, err)
	}
	return err
}

// MinVersion is the oldest Redis the script runs on (PEXPIRETIME, SET PXAT).
const MinVersion = "7.0.0"

// ErrVersion reports a Redis server too old for the script.
var ErrVersion = errors.New("redis: server too old")

// CheckServer verifies that the server answers and is recent enough, so a
// misconfiguration is reported at start-up with a message a user can act on
// rather than as a script error on the first request.
func CheckServer(ctx context.Context, c redis.UniversalClient) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("redis: cannot read server info: %w", explain(err))
	}
	v := infoField(info, "redis_version")
	if v == "" {
		return fmt.Errorf("redis: server info has no redis_version")
	}
	if versionLess(v, MinVersion) {
		return fmt.Errorf("%w: Floodgate needs Redis >= %s (PEXPIRETIME), the server is %s", ErrVersion, MinVersion, v)
	}
	return nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// versionLess compares dotted numeric versions ("6.2.14" < "7.0.0").
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
