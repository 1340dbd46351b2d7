package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel starts one Sentinel watching masterAddr (a 127.0.0.1 address)
// under masterName, with a quorum of 1, down-after-milliseconds 1000 and
// failover-timeout 3000, so a test can see a failover within seconds. conf
// lines are appended to its config file: "requirepass PW" protects the
// Sentinel itself (the returned Server's Password is set from it), "sentinel
// auth-pass NAME PW" lets it reach a master with a password. It returns once
// the Sentinel names the master and has connected to it.
func StartSentinel(t testing.TB, masterAddr, masterName string, conf ...string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		t.Fatalf("redistest: master address %q: %v", masterAddr, err)
	}
	lines := []string{
		fmt.Sprintf("sentinel monitor %s %s %s 1", masterName, host, port),
		fmt.Sprintf("sentinel down-after-milliseconds %s 1000", masterName),
		fmt.Sprintf("sentinel failover-timeout %s 3000", masterName),
	}
	lines = append(lines, conf...)
	var password string
	for _, l := range conf {
		if p, ok := strings.CutPrefix(l, "requirepass "); ok {
			password = p
		}
	}
	s := StartWith(t, Config{ConfFile: lines, Args: []string{"--sentinel"}, Password: password})
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Password: password, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	err = poll(10*time.Second, func(ctx context.Context) error {
		addr, err := c.GetMasterAddrByName(ctx, masterName).Result()
		if err != nil {
			return err
		}
		if got := net.JoinHostPort(addr[0], addr[1]); got != masterAddr {
			return fmt.Errorf("sentinel names %s as master %s, want %s", got, masterName, masterAddr)
		}
		m, err := c.Master(ctx, masterName).Result()
		if err != nil {
			return err
		}
		if m["flags"] != "master" {
			return fmt.Errorf("sentinel flags for %s are %q, want \"master\" (connected, up)", masterName, m["flags"])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sentinel on %s: %v; log: %s", s.Addr, err, s.Log())
	}
	return s
}
