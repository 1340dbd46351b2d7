package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestPermanentErrorsAreTold: each misconfiguration is made real against a
// real redis-server, and the store's error is classified with its fix;
// outages (a dead server, a timeout) are not.
func TestPermanentErrorsAreTold(t *testing.T) {
	auth := redistest.StartWith(t, redistest.Config{
		Password: "default-pw",
		ACL:      []string{"user app on >app-pw ~fg:* +@all", "user weak on >weak-pw ~fg:* +info +ping"},
	})
	plain := redistest.Start(t)
	renamed := redistest.Start(t, "--rename-command", "EVALSHA", "", "--rename-command", "EVAL", "")
	r := limiter.Request{Name: "perm", ID: "a", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}
	base := func(addr string) redisstore.Options {
		return redisstore.Options{Addresses: []string{addr}, Timeout: time.Second, DialTimeout: time.Second, Prefix: "fg:"}
	}
	for _, tc := range []struct {
		name string
		o    func() redisstore.Options
		kind string
	}{
		{"no password", func() redisstore.Options { return base(auth.Addr) }, "noauth"},
		{"wrong password", func() redisstore.Options { o := base(auth.Addr); o.Password = "nope"; return o }, "wrongpass"},
		{"an ACL user without the script commands", func() redisstore.Options {
			o := base(auth.Addr)
			o.Username, o.Password = "weak", "weak-pw"
			return o
		}, "noperm"},
		{"two standalone addresses taken as a Cluster", func() redisstore.Options {
			o := base(plain.Addr)
			o.Addresses = []string{plain.Addr, renamed.Addr}
			return o
		}, "cluster_disabled"},
		{"scripting renamed away", func() redisstore.Options { return base(renamed.Addr) }, "unknown_command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dialStore(t, tc.o())
			_, _, _, err := tryTake(s, r)
			kind, fix, ok := redisstore.Permanent(err)
			t.Logf("%v → %s: %s", err, kind, fix)
			if !ok || kind != tc.kind || fix == "" {
				t.Errorf("Permanent(%v) = %q, %v; want kind %q", err, kind, ok, tc.kind)
			}
			// Wrapped as the resilient store wraps it, the same.
			if k, _, ok := redisstore.Permanent(fmt.Errorf("%w: %w", limiter.ErrUnavailable, err)); !ok || k != tc.kind {
				t.Errorf("wrapped: %q %v", k, ok)
			}
		})
	}
	t.Run("outages are not permanent", func(t *testing.T) {
		dead := redistest.Start(t)
		s := dialStore(t, base(dead.Addr))
		dead.Kill()
		_, _, _, err := tryTake(s, r)
		if _, _, ok := redisstore.Permanent(err); ok || err == nil {
			t.Errorf("a dead server: %v classified permanent=%v", err, ok)
		}
		paused := redistest.Start(t)
		o := base(paused.Addr)
		o.Timeout = 100 * time.Millisecond
		s = dialStore(t, o)
		paused.Pause()
		defer paused.Resume()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = s.Take(ctx, []limiter.Request{r}, make([]limiter.Result, 1))
		if _, _, ok := redisstore.Permanent(err); ok || err == nil {
			t.Errorf("a paused server: %v classified permanent=%v", err, ok)
		}
		if _, _, ok := redisstore.Permanent(syscall.ECONNREFUSED); ok {
			t.Error("ECONNREFUSED classified permanent")
		}
		if _, _, ok := redisstore.Permanent(errors.New("LOADING Redis is loading the dataset in memory")); ok {
			t.Error("LOADING classified permanent")
		}
	})
}
