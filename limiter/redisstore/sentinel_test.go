package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestSentinel: a master with a password, watched by a Sentinel with its
// own password; a store dialled through the Sentinel decides on the master.
func TestSentinel(t *testing.T) {
	master := redistest.StartWith(t, redistest.Config{Password: "master-pw"})
	sentinel := redistest.StartSentinel(t, master.Addr, "fg-master", "requirepass sentinel-pw", "sentinel auth-pass fg-master master-pw")
	o := redisstore.Options{
		Addresses:        []string{sentinel.Addr},
		SentinelMaster:   "fg-master",
		Password:         "master-pw",
		SentinelPassword: "sentinel-pw",
		Timeout:          time.Second,
		DialTimeout:      2 * time.Second,
	}
	c := mustClient(t, o)
	if err := redisstore.CheckServer(context.Background(), c); err != nil {
		t.Fatalf("CheckServer through the Sentinel: %v", err)
	}
	s := redisstore.New(c, "")
	r := limiter.Request{Name: "sentinel", ID: "a", Limit: limiter.MustLimit(3, "1/60"), Cost: 1}
	for i, want := range []bool{true, true, true, false} {
		ok, _, _, err := tryTake(s, r)
		if err != nil || ok != want {
			t.Fatalf("decision %d: allowed %v, err %v; want %v", i, ok, err, want)
		}
	}
	// The decisions landed on the master.
	if n := master.Client().Exists(context.Background(), s.Key("sentinel", "a")).Val(); n != 1 {
		t.Error("the bucket's key is not on the master the Sentinel names")
	}

	for _, tc := range []struct {
		name string
		edit func(*redisstore.Options)
		want string
	}{
		{"a wrong sentinel password", func(o *redisstore.Options) { o.SentinelPassword = "guess" }, "WRONGPASS"},
		{"no sentinel password", func(o *redisstore.Options) { o.SentinelPassword = "" }, "NOAUTH"},
		{"a master the Sentinel does not watch", func(o *redisstore.Options) { o.SentinelMaster = "other" }, "know no master by the configured name"},
		{"a wrong master password", func(o *redisstore.Options) { o.Password = "guess" }, "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := o
			tc.edit(&o)
			_, _, took, err := tryTake(redisstore.New(mustClient(t, o), ""), r)
			t.Logf("after %v: %v", took, err)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one mentioning %q", err, tc.want)
			}
			if took > 2*time.Second {
				t.Errorf("refused after %v: want an answer, not a wait", took)
			}
		})
	}
}

// TestSentinelFailover: a master, its replica and a Sentinel. The master
// dies; the Sentinel promotes the replica; the same store keeps deciding,
// on the new master, with the state the replica had copied.
func TestSentinelFailover(t *testing.T) {
	ctx := context.Background()
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0") // sync at once
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port))
	// Start the Sentinel once the replica is in sync, so that its first
	// INFO of the master lists the replica (the next comes 10s later).
	waitFor(t, 10*time.Second, "the replica to sync", func() error {
		info, err := master.Client().Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, fmt.Sprintf("port=%d,state=online", replica.Port)) {
			return fmt.Errorf("master replication info: %s", info)
		}
		return nil
	})
	sentinel := redistest.StartSentinel(t, master.Addr, "fg-master")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sentinel log:\n%s", sentinel.Log())
		}
	})
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr})
	defer sc.Close()
	waitFor(t, 10*time.Second, "the Sentinel to see the replica in sync", func() error {
		reps, err := sc.Replicas(ctx, "fg-master").Result()
		if err != nil {
			return err
		}
		for _, r := range reps {
			if net.JoinHostPort(r["ip"], r["port"]) == replica.Addr && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("replicas: %v", reps)
	})

	s := redisstore.New(mustClient(t, redisstore.Options{Addresses: []string{sentinel.Addr}, SentinelMaster: "fg-master", Timeout: 500 * time.Millisecond, DialTimeout: 2 * time.Second}), "")
	r := limiter.Request{Name: "failover", ID: "a", Limit: limiter.MustLimit(5, "1/3600"), Cost: 2}
	if ok, _, _, err := tryTake(s, r); err != nil || !ok {
		t.Fatalf("before the failover: %v %v", ok, err)
	}
	if n, err := master.Client().Wait(ctx, 1, 2*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d %v", n, err)
	}

	master.Kill()
	start := time.Now()
	r.Cost = 1
	var errs int
	waitFor(t, 15*time.Second, "a decision on the new master", func() error {
		ok, res, _, err := tryTake(s, r)
		if err != nil {
			errs++
			return err
		}
		if !ok || res[0].Remaining != 2 {
			return fmt.Errorf("allowed %v, %+v: want the replicated bucket (3 left) paying 1", ok, res[0])
		}
		return nil
	})
	t.Logf("decisions resumed %v after the master died (%d failed meanwhile)", time.Since(start), errs)
	addr, err := sc.GetMasterAddrByName(ctx, "fg-master").Result()
	if err != nil || net.JoinHostPort(addr[0], addr[1]) != replica.Addr {
		t.Errorf("the Sentinel names %v (%v) as master, want the replica %s", addr, err, replica.Addr)
	}
}

// waitFor polls f until it returns nil, failing t after within.
func waitFor(t *testing.T, within time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: %v", within, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
