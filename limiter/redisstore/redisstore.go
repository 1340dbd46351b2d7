// Package redisstore is the limiter.Store shared by every Floodgate replica:
// one Lua script (bucket.lua + tokenbucket.lua) is the whole algorithm, run atomically
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
//
// Topologies: Dial builds the client for a standalone server, a Redis Cluster
// or a Sentinel-managed master. On a Cluster, a decision whose buckets fall
// in several slots (several identities) runs the script once per slot and
// refunds the charged slots when another denies; see takeAcrossSlots.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
)

// The scripts: bucket.lua (the state encoding and the clock) followed by
// each script's own body.
var (
	//go:embed bucket.lua
	bucketSource string
	//go:embed tokenbucket.lua
	takeSource string
	//go:embed refund.lua
	refundBody string

	scriptSource = bucketSource + takeSource
	refundSource = bucketSource + refundBody
)

// Script is the token-bucket script; its SHA1 is what EVALSHA names.
var Script = redis.NewScript(scriptSource)

// RefundScript gives back what Script took from some buckets; only a
// decision spanning several Redis Cluster slots uses it.
var RefundScript = redis.NewScript(refundSource)

// DefaultPrefix starts every key Floodgate writes.
const DefaultPrefix = "fg:"

// ErrRefund reports a decision across Redis Cluster slots that was denied
// but whose refund of the slots already charged failed: the decision stands
// (Take returns false and fills the results), but those buckets may have
// paid. They recover at their refill rate.
var ErrRefund = fmt.Errorf("redis: refund after a denial across cluster slots failed (%w)", limiter.ErrDeniedDespite)

// Store is a limiter.Store backed by Redis. Safe for concurrent use.
type Store struct {
	client  redis.Scripter
	cluster *redis.ClusterClient // client, when it is a Redis Cluster client
	prefix  string
	script  *redis.Script
	refund  *redis.Script
	pipe    *coalescer // NewPipelined: decisions share round trips (pipeline.go)
}

// New returns a store that runs its script on client (a *redis.Client,
// *redis.ClusterClient or any other redis.Scripter) and prefixes every key
// with prefix (DefaultPrefix when empty).
func New(client redis.Scripter, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	cluster, _ := client.(*redis.ClusterClient)
	return &Store{client: client, cluster: cluster, prefix: prefix, script: Script, refund: RefundScript}
}

// Key returns the Redis key of bucket (name, id).
func (s *Store) Key(name, id string) string {
	return s.prefix + name + ":{" + id + "}"
}

// Take implements limiter.Store. Buckets that share a Redis Cluster slot
// (always, outside a Cluster; within one, all buckets of one identity) are
// decided by one script call: one round trip, atomic. On a
// *redis.ClusterClient, a decision spanning several slots takes the path of
// takeAcrossSlots: still all-or-nothing, but not atomic; in the rare case its
// refund fails, Take returns false, the filled results and an error wrapping
// ErrRefund.
func (s *Store) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	return s.takeBy(ctx, time.Time{}, reqs, res)
}

// TakeBy implements limiter.DeadlineStore: Take, ending at deadline too. A
// pipelined store waits for the deadline with a timer it reuses; otherwise
// it derives a context for it.
func (s *Store) TakeBy(ctx context.Context, deadline time.Time, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	return s.takeBy(ctx, deadline, reqs, res)
}

// take runs the script; extra arguments follow the buckets' (tests use them
// to hand a clock to a script whose TIME call they replaced).
func (s *Store) take(ctx context.Context, reqs []limiter.Request, res []limiter.Result, extra ...any) (bool, error) {
	return s.takeBy(ctx, time.Time{}, reqs, res, extra...)
}

func (s *Store) takeBy(ctx context.Context, deadline time.Time, reqs []limiter.Request, res []limiter.Result, extra ...any) (bool, error) {
	if err := limiter.Check(reqs, res); err != nil {
		return false, err
	}
	keys := make([]string, len(reqs))
	buckets := make([]bucketArgs, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		keys[i] = s.Key(r.Name, r.ID)
		k, g := r.Limit.Units()
		buckets[i] = bucketArgs{limitArgs{r.Limit.Capacity, k, g}, r.Cost}
	}
	acrossSlots := s.cluster != nil && len(keys) > 1 && !sameSlot(keys)
	if !deadline.IsZero() && (s.pipe == nil || acrossSlots) {
		// Only the pipeline waits for a deadline of its own: go-redis
		// needs it in the context.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
		deadline = time.Time{}
	}
	if acrossSlots {
		return s.takeAcrossSlots(ctx, reqs, res, keys, buckets, extra)
	}
	reply, err := s.run(ctx, deadline, keys, buckets, extra)
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

func sameSlot(keys []string) bool {
	first := Slot(keys[0])
	for _, k := range keys[1:] {
		if Slot(k) != first {
			return false
		}
	}
	return true
}

// takeAcrossSlots decides buckets that live in several Redis Cluster slots.
// Redis runs a script only over keys of one slot, so no single call can be
// atomic over them all. Instead:
//
//  1. The buckets are grouped by slot and the token-bucket script runs once
//     per group, all groups in one cluster pipeline: go-redis sends each node
//     its groups in one round trip, to all nodes at once. Each group is
//     all-or-nothing on its own.
//  2. If every group allowed, the decision is allowed: every bucket paid.
//  3. Otherwise the groups that were charged are refunded (refund.lua, again
//     one pipeline), so that no bucket paid; they report what they held
//     before the charge, as if never charged.
//
// The window. Between a group's charge and its refund (about one round trip)
// the charge is visible: a concurrent decision on those buckets may be
// denied for tokens that are about to come back. This errs towards denying,
// never towards admitting more than the limits allow, with one exception
// bounded by the window itself: a refund cannot make a bucket fuller than
// full, so if the bucket would have refilled to full during the window, the
// tokens it would have gained meanwhile are handed back too (rate × window,
// typically far below one token). The refund is not atomic with the denial
// either: if it fails (a node lost between the two steps), Take reports the
// denial with an error wrapping ErrRefund, and the charged buckets keep the
// charge until they refill.
//
// A group whose call fails leaves its own buckets uncertain (the script may
// or may not have run), as a failed call does on the single-slot path; the
// other groups are refunded and Take returns the error.
func (s *Store) takeAcrossSlots(ctx context.Context, reqs []limiter.Request, res []limiter.Result, keys []string, buckets []bucketArgs, extra []any) (bool, error) {
	// Group bucket indices by slot, in order of first appearance.
	var groups [][]int
	var slots []int
	for i, k := range keys {
		sl := Slot(k)
		g := 0
		for g < len(slots) && slots[g] != sl {
			g++
		}
		if g == len(slots) {
			slots = append(slots, sl)
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	gkeys := make([][]string, len(groups))
	gbuckets := make([][]bucketArgs, len(groups))
	for g, idx := range groups {
		gkeys[g] = make([]string, len(idx))
		gbuckets[g] = make([]bucketArgs, len(idx))
		for j, i := range idx {
			gkeys[g][j], gbuckets[g][j] = keys[i], buckets[i]
		}
	}

	takeArgs := make([][]any, len(groups))
	for g := range groups {
		takeArgs[g] = oneDecision(gbuckets[g], extra)
	}
	replies, errs := runPerSlot(ctx, s.cluster, s.script, gkeys, takeArgs)
	allowed := true
	var failed error
	for g, idx := range groups {
		if errs[g] == nil && len(replies[g]) != len(idx)+1 {
			errs[g] = fmt.Errorf("returned %d values for %d buckets", len(replies[g]), len(idx))
		}
		if errs[g] != nil {
			allowed = false
			if failed == nil {
				failed = fmt.Errorf("redis: token-bucket script (slot %d): %w", slots[g], errs[g])
			}
			continue
		}
		if replies[g][0] != 1 {
			allowed = false
		}
	}
	if allowed {
		for g, idx := range groups {
			for j, i := range idx {
				r := &reqs[i]
				res[i] = r.Limit.Result(replies[g][j+1], r.Cost, true)
			}
		}
		return true, nil
	}

	// Refund every group that was charged. The refund must happen even if
	// the caller has given up on the decision (its context cancelled or past
	// its deadline), so it runs without the caller's cancellation; the
	// client's own read and write timeouts still bound it.
	var charged []int
	for g := range groups {
		if errs[g] == nil && replies[g][0] == 1 {
			charged = append(charged, g)
		}
	}
	var refundErr error
	if len(charged) > 0 {
		rkeys := make([][]string, len(charged))
		rargs := make([][]any, len(charged))
		for j, g := range charged {
			rkeys[j], rargs[j] = gkeys[g], refundArgv(gbuckets[g], extra)
		}
		_, rerrs := runPerSlot(context.WithoutCancel(ctx), s.cluster, s.refund, rkeys, rargs)
		for j, err := range rerrs {
			if err != nil && refundErr == nil {
				refundErr = fmt.Errorf("%w (slot %d): %w", ErrRefund, slots[charged[j]], err)
			}
		}
	}
	if failed != nil {
		if refundErr != nil {
			return false, errors.Join(failed, refundErr)
		}
		return false, failed
	}
	for g, idx := range groups {
		wasCharged := replies[g][0] == 1
		for j, i := range idx {
			r := &reqs[i]
			m := replies[g][j+1]
			if wasCharged {
				// Report the bucket as it was before the charge.
				k, _ := r.Limit.Units()
				res[i] = r.Limit.Result(m-r.Cost*k, r.Cost, true)
			} else {
				res[i] = r.Limit.Result(m, r.Cost, r.Limit.Fits(m, r.Cost))
			}
		}
	}
	return false, refundErr
}

// runPerSlot runs script once per group of keys (each group within one
// slot) in one cluster pipeline, and once more with EVAL for the groups
// whose node did not have the script cached. It returns each group's reply
// or error.
func runPerSlot(ctx context.Context, c *redis.ClusterClient, script *redis.Script, keys [][]string, args [][]any) ([][]int64, []error) {
	cmds := make([]*redis.Cmd, len(keys))
	pipe := c.Pipeline()
	for g := range keys {
		cmds[g] = script.EvalSha(ctx, pipe, keys[g], args[g]...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var missing []int
	for g, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			missing = append(missing, g)
		}
	}
	if len(missing) > 0 {
		pipe = c.Pipeline()
		for _, g := range missing {
			cmds[g] = script.Eval(ctx, pipe, keys[g], args[g]...)
		}
		_, _ = pipe.Exec(ctx)
	}
	replies := make([][]int64, len(keys))
	errs := make([]error, len(keys))
	for g, cmd := range cmds {
		replies[g], errs[g] = cmd.Int64Slice()
	}
	return replies, errs
}

// ErrNoMaster reports Sentinels that answered but named no master: they
// monitor none by the configured name.
var ErrNoMaster = errors.New("the Sentinels know no master by the configured name")

// ErrNoAuth reports a server that wants a password the client did not
// send. Redis answers NOAUTH to a short command; to a longer one (more than
// ten parts, as a script call deciding several buckets or decisions is)
// from a connection that has not authenticated, it answers only "Protocol
// error: unauthenticated multibulk length" and closes the connection.
var ErrNoAuth = errors.New("NOAUTH: the Redis server requires a password (store.redis.password_file or password_env, and username for an ACL user)")

// explain adds what a user can act on to go-redis errors that lack it. The
// script and INFO never reply nil, so a nil reply is the Sentinels' answer
// to a master name they do not monitor.
func explain(err error) error {
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: %w", ErrNoMaster, err)
	}
	if err != nil && strings.Contains(err.Error(), "Protocol error: unauthenticated") {
		return fmt.Errorf("%w: %w", ErrNoAuth, err)
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
