package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters without replicas, built by
// redis-cli --cluster create. Nodes[i] holds the i-th of the equal ranges
// redis-cli assigns (with 3 masters: slots 0-5460, 5461-10922, 10923-16383).
type Cluster struct {
	t     testing.TB
	Nodes []*Server
}

// StartCluster starts masters (1, or >= 3) cluster-enabled redis-servers
// with a node timeout of 2s, joins them into one cluster covering all 16384
// slots and waits until every node reports cluster_state:ok. One master
// (which redis-cli --cluster create refuses) is given every slot with
// CLUSTER ADDSLOTSRANGE: a server that pays what cluster mode costs, on the
// same batches as a standalone one. extra is appended to
// every node's arguments (e.g. "--cluster-require-full-coverage", "no").
// The nodes are killed when the test ends; the test may kill any earlier.
func StartCluster(t testing.TB, masters int, extra ...string) *Cluster {
	t.Helper()
	if masters != 1 && masters < 3 {
		t.Fatalf("redistest: a Redis Cluster needs 1, or at least 3 masters (asked for %d)", masters)
	}
	cli := lookPath(t, "redis-cli")
	c := &Cluster{t: t}
	for i := 0; i < masters; i++ {
		c.Nodes = append(c.Nodes, StartWith(t, Config{
			Args: extra,
			PortArgs: func(port int) []string {
				return []string{
					"--cluster-enabled", "yes",
					"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
					"--cluster-node-timeout", "2000",
					// An explicit bus port: port+10000, the default, may
					// be taken or above 65535 for a high ephemeral port.
					"--cluster-port", strconv.Itoa(FreePort(t)),
				}
			},
		}))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if masters == 1 {
		host, port, _ := strings.Cut(c.Nodes[0].Addr, ":")
		args = []string{"-h", host, "-p", port, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.WaitOK(20 * time.Second); err != nil {
		t.Fatalf("cluster never became ready: %v\nredis-cli said:\n%s", err, out)
	}
	return c
}

// Addrs are the nodes' host:port addresses, in Nodes order.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
	}
	return a
}

// WaitOK polls CLUSTER INFO on every running node until each reports
// cluster_state:ok with all 16384 slots assigned and every node known.
func (c *Cluster) WaitOK(within time.Duration) error {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialerRetries: 1})
		err := poll(within, func(ctx context.Context) error {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:" + strconv.Itoa(len(c.Nodes))} {
				if !strings.Contains(info, want+"\r\n") && !strings.HasSuffix(strings.TrimSpace(info), want) {
					return fmt.Errorf("node %s: no %q in CLUSTER INFO", n.Addr, want)
				}
			}
			return nil
		})
		cl.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Client returns a cluster client seeded with every node, closed when the
// test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// NodeFor returns the node serving key, asking the cluster (CLUSTER
// KEYSLOT, then CLUSTER SLOTS) rather than computing it.
func (c *Cluster) NodeFor(key string) *Server {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		defer cl.Close()
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			c.t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
		}
		ranges, err := cl.ClusterSlots(ctx).Result()
		if err != nil {
			c.t.Fatalf("CLUSTER SLOTS: %v", err)
		}
		for _, r := range ranges {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				for _, m := range c.Nodes {
					if m.Addr == r.Nodes[0].Addr {
						return m
					}
				}
			}
		}
		c.t.Fatalf("no node serves slot %d of %s", slot, key)
	}
	c.t.Fatal("no cluster node is running")
	return nil
}
