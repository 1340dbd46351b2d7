package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
)

// connectTimeout bounds `validate --connect` as a whole: dialling, reading
// the server's version, loading the script and one decision.
const connectTimeout = 5 * time.Second

// connectRequest is the decision `validate --connect` makes: a scratch
// bucket no policy can name (policy names start with a letter or digit),
// full again a microsecond after it pays, so its key expires at once.
var connectRequest = limiter.Request{Name: "_validate", ID: "connect", Limit: limiter.MustLimit(1, "1000000"), Cost: 1}

// connectCheck dials the store cfg configures, checks the server, runs the
// token-bucket script once on a scratch key (loading it into the server's
// script cache) and reports each step on stdout, or what is wrong and how
// to fix it on stderr. It returns the exit status: 0 or 1.
func connectCheck(cfg *config.Config, stdout, stderr io.Writer) int {
	if cfg.Store.Backend != "redis" {
		fmt.Fprintf(stdout, "store: %s: nothing to connect to\n", cfg.Store.Backend)
		return 0
	}
	where := "Redis at " + strings.Join(cfg.Store.Redis.Addresses, ", ")
	fail := func(step string, err error) int {
		fmt.Fprintf(stderr, "store: %s: %s: %v\n", where, step, err)
		if _, fix, ok := redisstore.Permanent(err); ok {
			fmt.Fprintf(stderr, "  fix: %s\n", fix)
		} else {
			fmt.Fprintln(stderr, "  is the server running, and reachable from here? (store.redis.addresses, tls, dial_timeout)")
		}
		return 1
	}
	ro, err := cfg.RedisOptions()
	if err != nil {
		fmt.Fprintf(stderr, "store: %v\n", err)
		return 1
	}
	// Each read is bounded by connectTimeout, as the whole check is, not by
	// store.redis.timeout, a decision's budget: this asks whether the store
	// can serve floodgate at all, and a loaded machine (or a Redis far
	// away) must not make it say "cannot use the server".
	ro.Timeout = max(ro.Timeout, connectTimeout)
	redis.SetLogger(store.RedisLogger(zap.NewNop())) // failures are reported below, once
	client, err := redisstore.Dial(ro)
	if err != nil {
		fmt.Fprintf(stderr, "store: %v\n", err)
		return 1
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := redisstore.CheckServer(ctx, client); err != nil {
		return fail("cannot use the server", err)
	}
	fmt.Fprintf(stdout, "store: %s: answers, Redis >= %s\n", where, redisstore.MinVersion)
	if ws, err := store.EvictionWarnings(ctx, client); err != nil {
		fmt.Fprintf(stderr, "store: %s: warning: cannot read maxmemory-policy (%v): make sure it is noeviction, or a full Redis forgets rate-limit buckets\n", where, err)
	} else {
		for _, w := range ws {
			fmt.Fprintf(stderr, "store: warning: %s\n", w)
		}
	}
	rs := redisstore.New(client, ro.Prefix)
	var res [1]limiter.Result
	if _, err := rs.Take(ctx, []limiter.Request{connectRequest}, res[:]); err != nil {
		return fail("the token-bucket script failed", err)
	}
	fmt.Fprintf(stdout, "store: %s: the token-bucket script ran (one decision on scratch key %s)\n", where, rs.Key(connectRequest.Name, connectRequest.ID))
	return 0
}
