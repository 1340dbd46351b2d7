package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster built by redis-cli --cluster create. Its first
// Masters nodes are the masters it was created with, Nodes[i] holding the
// i-th of the equal ranges redis-cli assigns (with 3 masters: slots 0-5460,
// 5461-10922, 10923-16383); the replicas follow (ReplicasOf says whose). A
// failover changes which nodes are masters: Role asks a node.
type Cluster struct {
	t       testing.TB
	Nodes   []*Server
	Masters int
}

// ClusterConfig describes a cluster for StartClusterWith.
type ClusterConfig struct {
	// Masters is 1, or at least 3.
	Masters int
	// Replicas is each master's number of replicas (redis-cli's
	// --cluster-replicas); a one-master cluster has none.
	Replicas int
	// Args are appended to every node's arguments (e.g.
	// "--cluster-require-full-coverage", "no").
	Args []string
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
	return StartClusterWith(t, ClusterConfig{Masters: masters, Args: extra})
}

// StartClusterWith is StartCluster with replicas: cfg.Replicas per master,
// each in sync with its master (master_link_status:up) when it returns, so
// that a failover finds the master's data on the replica it promotes.
func StartClusterWith(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	masters := cfg.Masters
	if masters != 1 && masters < 3 {
		t.Fatalf("redistest: a Redis Cluster needs 1, or at least 3 masters (asked for %d)", masters)
	}
	if masters == 1 && cfg.Replicas > 0 {
		t.Fatal("redistest: a one-master cluster is made without redis-cli, and has no replicas")
	}
	cli := lookPath(t, "redis-cli")
	c := &Cluster{t: t, Masters: masters}
	for i := 0; i < masters*(1+cfg.Replicas); i++ {
		c.Nodes = append(c.Nodes, StartWith(t, Config{
			Args: cfg.Args,
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
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.Replicas), "--cluster-yes")
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
	if cfg.Replicas > 0 {
		for _, n := range c.Nodes[masters:] {
			if err := n.waitInSync(20 * time.Second); err != nil {
				t.Fatalf("replica %s: %v", n.Addr, err)
			}
		}
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
		owner, err := c.ownerOf(ctx, cl, slot)
		if err != nil {
			c.t.Fatal(err)
		}
		return owner
	}
	c.t.Fatal("no cluster node is running")
	return nil
}

// ownerOf is the master that node cl says serves slot (CLUSTER SHARDS).
func (c *Cluster) ownerOf(ctx context.Context, cl *redis.Client, slot int64) (*Server, error) {
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SHARDS on %s: %w", cl.Options().Addr, err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, nd := range sh.Nodes {
				if nd.Role != "master" {
					continue
				}
				for _, m := range c.Nodes {
					if m.Addr == net.JoinHostPort(nd.IP, strconv.FormatInt(nd.Port, 10)) {
						return m, nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("node %s knows no master serving slot %d", cl.Options().Addr, slot)
}

// agreeOn waits until every running node says m is the master of the
// slots it serves: after a failover, a node that has not heard of it yet
// still names the old master.
func (c *Cluster) agreeOn(m *Server, within time.Duration) {
	c.t.Helper()
	mc := redis.NewClient(&redis.Options{Addr: m.Addr})
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	slots, err := mc.ClusterShards(ctx).Result()
	cancel()
	if err != nil {
		c.t.Fatalf("CLUSTER SHARDS on %s: %v", m.Addr, err)
	}
	var slot int64 = -1
	for _, sh := range slots {
		for _, nd := range sh.Nodes {
			if nd.Role == "master" && net.JoinHostPort(nd.IP, strconv.FormatInt(nd.Port, 10)) == m.Addr && len(sh.Slots) > 0 {
				slot = sh.Slots[0].Start
			}
		}
	}
	if slot < 0 {
		c.t.Fatalf("%s serves no slot", m.Addr)
	}
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		err := poll(within, func(ctx context.Context) error {
			owner, err := c.ownerOf(ctx, cl, slot)
			if err == nil && owner != m {
				err = fmt.Errorf("node %s still says %s serves slot %d, not %s", n.Addr, owner.Addr, slot, m.Addr)
			}
			return err
		})
		cl.Close()
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

// do runs one command on the server with a client of its own, bounded by
// 5s.
func (s *Server) do(args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, TLSConfig: s.TLSConfig, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// mustDo is do, failing the test on an error.
func (s *Server) mustDo(args ...any) any {
	s.t.Helper()
	v, err := s.do(args...)
	if err != nil {
		s.t.Fatalf("redis-server %s: %v: %v", s.Addr, args, err)
	}
	return v
}

// ID is the node's Redis Cluster ID (CLUSTER MYID).
func (s *Server) ID() string {
	s.t.Helper()
	id, _ := s.mustDo("CLUSTER", "MYID").(string)
	return id
}

// Role is "master" or "slave", as ROLE says.
func (s *Server) Role() string {
	s.t.Helper()
	r, ok := s.mustDo("ROLE").([]any)
	if !ok || len(r) == 0 {
		s.t.Fatalf("ROLE on %s: %v", s.Addr, r)
	}
	role, _ := r[0].(string)
	return role
}

// waitInSync polls INFO replication on a replica until its link to the
// master is up and the initial sync done.
func (s *Server) waitInSync(within time.Duration) error {
	return poll(within, func(ctx context.Context) error {
		v, err := s.do("INFO", "replication")
		if err != nil {
			return err
		}
		info, _ := v.(string)
		if !strings.Contains(info, "master_link_status:up") || strings.Contains(info, "master_sync_in_progress:1") {
			return fmt.Errorf("not in sync with its master:\n%s", info)
		}
		return nil
	})
}

// clusterNodes is CLUSTER NODES on n: one line per node, "id addr flags
// master-id ...".
func (s *Server) clusterNodes() ([][]string, error) {
	v, err := s.do("CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	text, _ := v.(string)
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if f := strings.Fields(line); len(f) >= 4 {
			out = append(out, f)
		}
	}
	return out, nil
}

// ReplicasOf returns the running replicas of master m, as CLUSTER NODES on
// m lists them.
func (c *Cluster) ReplicasOf(m *Server) []*Server {
	c.t.Helper()
	id := m.ID()
	lines, err := m.clusterNodes()
	if err != nil {
		c.t.Fatal(err)
	}
	var out []*Server
	for _, f := range lines {
		if f[3] != id {
			continue
		}
		for _, n := range c.Nodes {
			if n.Running() && n.ID() == f[0] {
				out = append(out, n)
			}
		}
	}
	return out
}

// Failover runs CLUSTER FAILOVER on replica, a manual failover (its master
// stops taking writes, the replica catches up and takes over its slots),
// and waits until the replica is a master, its old master a replica, and
// every running node reports cluster_state:ok.
func (c *Cluster) Failover(replica *Server) {
	c.t.Helper()
	var old *Server
	if r, ok := replica.mustDo("ROLE").([]any); ok && len(r) >= 3 {
		for _, n := range c.Nodes {
			if n.Addr == net.JoinHostPort(fmt.Sprint(r[1]), fmt.Sprint(r[2])) {
				old = n
			}
		}
	}
	replica.mustDo("CLUSTER", "FAILOVER")
	c.waitMaster(replica, 20*time.Second)
	c.agreeOn(replica, 20*time.Second)
	if old == nil {
		return
	}
	// The old master turns replica when it hears of the new one.
	if err := poll(20*time.Second, func(ctx context.Context) error {
		if role := old.Role(); role != "slave" {
			return fmt.Errorf("the old master %s is still a %s", old.Addr, role)
		}
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
}

// KillMaster kills master m and waits until one of its replicas has been
// promoted in its place (after the cluster's 2s node timeout) and every
// running node reports cluster_state:ok; it returns the new master.
func (c *Cluster) KillMaster(m *Server) *Server {
	c.t.Helper()
	replicas := c.ReplicasOf(m)
	if len(replicas) == 0 {
		c.t.Fatalf("master %s has no replica to promote", m.Addr)
	}
	m.Kill()
	var promoted *Server
	err := poll(30*time.Second, func(ctx context.Context) error {
		for _, r := range replicas {
			if v, err := r.do("ROLE"); err == nil {
				if role, ok := v.([]any); ok && len(role) > 0 && role[0] == "master" {
					promoted = r
					return nil
				}
			}
		}
		return fmt.Errorf("no replica of %s promoted yet", m.Addr)
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.waitMaster(promoted, 20*time.Second)
	c.agreeOn(promoted, 20*time.Second)
	return promoted
}

// waitMaster waits until n is a master and every running node reports
// cluster_state:ok.
func (c *Cluster) waitMaster(n *Server, within time.Duration) {
	c.t.Helper()
	err := poll(within, func(ctx context.Context) error {
		v, err := n.do("ROLE")
		if err != nil {
			return err
		}
		if role, ok := v.([]any); !ok || len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("%s is %v, not yet a master", n.Addr, v)
		}
		for _, o := range c.Nodes {
			if !o.Running() {
				continue
			}
			v, err := o.do("CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if info, _ := v.(string); !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("node %s: cluster not ok yet", o.Addr)
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("failover to %s: %v", n.Addr, err)
	}
}

// Announce makes node n announce port instead of its own
// (cluster-announce-port), so that clients following the slot map reach it
// there: a proxy in front of it. It waits until every running node's slot
// map names n at 127.0.0.1:port. The cluster bus is not affected.
func (c *Cluster) Announce(n *Server, port int) {
	c.t.Helper()
	n.mustDo("CONFIG", "SET", "cluster-announce-port", strconv.Itoa(port))
	id, want := n.ID(), net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	err := poll(20*time.Second, func(ctx context.Context) error {
		for _, o := range c.Nodes {
			if !o.Running() {
				continue
			}
			lines, err := o.clusterNodes()
			if err != nil {
				return err
			}
			for _, f := range lines {
				if f[0] == id && !strings.HasPrefix(f[1], want+"@") {
					return fmt.Errorf("node %s still names %s at %s", o.Addr, n.Addr, f[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// Migration moves one slot from one master to another in the steps of
// redis-cli --cluster reshard, which a test interleaves with its own
// commands: the slot is IMPORTING on the target and MIGRATING on the source
// (a key the source no longer holds is answered with an ASK redirection to
// the target), keys move with MIGRATE, and Finish gives the slot to the
// target on every master.
type Migration struct {
	c        *Cluster
	Slot     int
	From, To *Server
	fromID   string
	toID     string
}

// StartMigration marks slot as moving from master from to master to.
func (c *Cluster) StartMigration(slot int, from, to *Server) *Migration {
	c.t.Helper()
	m := &Migration{c: c, Slot: slot, From: from, To: to, fromID: from.ID(), toID: to.ID()}
	to.mustDo("CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID)
	from.mustDo("CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID)
	return m
}

// MoveKeys moves up to n of the slot's keys still on the source to the
// target and returns how many it moved.
func (m *Migration) MoveKeys(n int) int {
	m.c.t.Helper()
	v := m.From.mustDo("CLUSTER", "GETKEYSINSLOT", m.Slot, n)
	keys, _ := v.([]any)
	if len(keys) == 0 {
		return 0
	}
	host, port, _ := net.SplitHostPort(m.To.Addr)
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	args = append(args, keys...)
	m.From.mustDo(args...)
	return len(keys)
}

// MoveAll moves the slot's keys n at a time, pausing between batches so
// that the decisions under test meet the slot half moved (ASK
// redirections for the keys already on the target), and returns how many
// it moved.
func (m *Migration) MoveAll(n int, pause time.Duration) int {
	m.c.t.Helper()
	moved := 0
	for {
		k := m.MoveKeys(n)
		if k == 0 {
			return moved
		}
		moved += k
		time.Sleep(pause)
	}
}

// Finish moves the keys left and gives the slot to the target on every
// running master, target and source first, as redis-cli does.
func (m *Migration) Finish() {
	m.c.t.Helper()
	for m.MoveKeys(100) > 0 {
	}
	m.To.mustDo("CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID)
	m.From.mustDo("CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID)
	for _, n := range m.c.Nodes {
		if n != m.To && n != m.From && n.Running() && n.Role() == "master" {
			n.mustDo("CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID)
		}
	}
}
