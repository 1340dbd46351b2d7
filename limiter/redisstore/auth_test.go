package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// dialStore dials o and returns a store on it; the client closes with the test.
func dialStore(t *testing.T, o redisstore.Options) *redisstore.Store {
	t.Helper()
	return redisstore.New(mustClient(t, o), o.Prefix)
}

// tryTake makes one decision with a bounded context and reports how long
// it took.
func tryTake(s *redisstore.Store, reqs ...limiter.Request) (bool, []limiter.Result, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	res := make([]limiter.Result, len(reqs))
	start := time.Now()
	ok, err := s.Take(ctx, reqs, res)
	return ok, res, time.Since(start), err
}

func TestAuthAndACL(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Config{
		Password: "default-pw",
		ACL:      []string{"user app on >app-pw ~fg:* +@all"},
	})
	r := limiter.Request{Name: "auth", ID: "a", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}
	base := redisstore.Options{Addresses: []string{srv.Addr}, Timeout: time.Second, DialTimeout: 2 * time.Second}

	decides := func(t *testing.T, o redisstore.Options) {
		t.Helper()
		s := dialStore(t, o)
		r := r
		r.ID = o.Username + "-decides"
		for i, want := range []bool{true, true, false} {
			ok, _, _, err := tryTake(s, r)
			if err != nil || ok != want {
				t.Fatalf("decision %d: allowed %v, err %v; want %v", i, ok, err, want)
			}
		}
	}
	refused := func(t *testing.T, o redisstore.Options, want string) {
		t.Helper()
		s := dialStore(t, o)
		_, _, took, err := tryTake(s, r)
		t.Logf("refused after %v: %v", took, err)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v; want one containing %q", err, want)
		}
		if took > 2*time.Second {
			t.Errorf("refused after %v: want an answer, not a wait", took)
		}
	}

	t.Run("the default user's password", func(t *testing.T) {
		o := base
		o.Password = "default-pw"
		decides(t, o)
	})
	t.Run("an ACL user", func(t *testing.T) {
		o := base
		o.Username, o.Password = "app", "app-pw"
		decides(t, o)
		if err := redisstore.CheckServer(context.Background(), mustClient(t, o)); err != nil {
			t.Errorf("CheckServer as the ACL user: %v", err)
		}
	})
	t.Run("the ACL user outside its key pattern", func(t *testing.T) {
		o := base
		o.Username, o.Password, o.Prefix = "app", "app-pw", "other:"
		refused(t, o, "NOPERM")
	})
	t.Run("a wrong password", func(t *testing.T) {
		o := base
		o.Password = "guess"
		refused(t, o, "WRONGPASS")
	})
	t.Run("a wrong ACL password", func(t *testing.T) {
		o := base
		o.Username, o.Password = "app", "default-pw"
		refused(t, o, "WRONGPASS")
	})
	t.Run("an unknown user", func(t *testing.T) {
		o := base
		o.Username, o.Password = "nobody", "app-pw"
		refused(t, o, "WRONGPASS")
	})
	t.Run("no password", func(t *testing.T) {
		refused(t, base, "NOAUTH")
	})
	t.Run("no password, pipelined decisions of many buckets", func(t *testing.T) {
		// A script call of more than ten parts from a connection that has
		// not authenticated gets a protocol error instead of NOAUTH; the
		// store says what it means.
		s := redisstore.NewPipelined(mustClient(t, base), "", redisstore.PipelineOptions{})
		defer s.Close()
		reqs := []limiter.Request{r}
		for i := 2; i <= 8; i++ { // 3 + 8 keys + 1 argument: 12 parts
			ri := r
			ri.Name = fmt.Sprint("auth", i)
			reqs = append(reqs, ri)
		}
		_, _, _, err := tryTake(s, reqs...)
		if !errors.Is(err, redisstore.ErrNoAuth) {
			t.Errorf("err = %v; want one wrapping ErrNoAuth", err)
		}
	})
}

// mustClient dials o; the client closes with the test.
func mustClient(t *testing.T, o redisstore.Options) redis.UniversalClient {
	t.Helper()
	c, err := redisstore.Dial(o)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
