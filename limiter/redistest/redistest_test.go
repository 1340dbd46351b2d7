package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestServerClientsCarryTheirCredentials: Client() speaks TLS with the
// client certificate and sends the password; a password set together with
// ACL lines still protects the default user (Redis ignores requirepass once
// it loads an ACL file, so the harness writes the default user's line).
func TestServerClientsCarryTheirCredentials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca := redistest.NewCA(t)
	srv := redistest.StartWith(t, redistest.Config{
		Password: "pw",
		ACL:      []string{"user app on >app-pw ~app:* +@all"},
		TLS:      &redistest.TLS{CA: ca},
	})
	if err := srv.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("Client() on a TLS server with a password: %v", err)
	}
	anonymous := redis.NewClient(&redis.Options{Addr: srv.Addr, TLSConfig: ca.ClientConfig(true), MaxRetries: -1})
	defer anonymous.Close()
	if err := anonymous.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without the password: %v, want NOAUTH", err)
	}
	app := redis.NewClient(&redis.Options{Addr: srv.Addr, TLSConfig: ca.ClientConfig(true), Username: "app", Password: "app-pw", MaxRetries: -1})
	defer app.Close()
	if err := app.Set(ctx, "app:k", "v", 0).Err(); err != nil {
		t.Errorf("the ACL user in its key space: %v", err)
	}
	if err := app.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("the ACL user outside its key space: %v, want NOPERM", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "pw", MaxRetries: -1, DialTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("plain TCP to the TLS-only port answered")
	}
	noCert := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "pw", TLSConfig: ca.ClientConfig(false), MaxRetries: -1})
	defer noCert.Close()
	if err := noCert.Ping(ctx).Err(); err == nil {
		t.Error("a client without a certificate was let in where tls-auth-clients is yes")
	}
}

// A one-master cluster holds every slot: a cluster client reaches keys of
// any slot through it, and the node reports itself in cluster mode.
func TestOneMasterClusterServesEverySlot(t *testing.T) {
	cl := redistest.StartCluster(t, 1)
	if len(cl.Nodes) != 1 {
		t.Fatalf("%d nodes, want 1", len(cl.Nodes))
	}
	c := cl.Client()
	ctx := context.Background()
	for _, key := range []string{"a", "b", "{user:1}", "slot-12182"} {
		if err := c.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 4 {
		t.Errorf("DBSIZE = %d, %v; want 4 keys on the one master", n, err)
	}
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_size:1") {
		t.Errorf("CLUSTER INFO: %v\n%s", err, info)
	}
}

// A cluster with replicas: each master's replica is in sync at start, a
// manual failover and a killed master each promote a replica that holds
// the master's keys, and a slot moves to another master key by key with
// ASK redirections meanwhile.
func TestClusterReplicasFailOverAndSlotsMove(t *testing.T) {
	cl := redistest.StartClusterWith(t, redistest.ClusterConfig{Masters: 3, Replicas: 1})
	if len(cl.Nodes) != 6 || cl.Masters != 3 {
		t.Fatalf("%d nodes, %d masters; want 6 and 3", len(cl.Nodes), cl.Masters)
	}
	for i, n := range cl.Nodes {
		if want := map[bool]string{true: "master", false: "slave"}[i < 3]; n.Role() != want {
			t.Fatalf("node %d is a %s, want a %s", i, n.Role(), want)
		}
	}
	c := cl.Client()
	ctx := context.Background()
	for _, k := range []string{"{a}", "{b}", "{c}", "{d}"} {
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// WAIT: the replicas have the keys before their masters go.
	for _, m := range cl.Nodes[:3] {
		if n, err := m.Client().Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
			t.Fatalf("WAIT on %s: %d, %v", m.Addr, n, err)
		}
	}

	m := cl.NodeFor("{a}")
	replicas := cl.ReplicasOf(m)
	if len(replicas) != 1 {
		t.Fatalf("%s has replicas %v, want one", m.Addr, replicas)
	}
	cl.Failover(replicas[0])
	if replicas[0].Role() != "master" || m.Role() != "slave" || cl.NodeFor("{a}") != replicas[0] {
		t.Fatalf("after CLUSTER FAILOVER: %s is a %s, %s a %s", replicas[0].Addr, replicas[0].Role(), m.Addr, m.Role())
	}

	killed := cl.NodeFor("{b}")
	promoted := cl.KillMaster(killed)
	if cl.NodeFor("{b}") != promoted {
		t.Fatalf("{b} is served by %s, want the promoted %s", cl.NodeFor("{b}").Addr, promoted.Addr)
	}
	c.ReloadState(ctx) // this client would learn it at its next MOVED, or a dial to the dead node failing over
	if v, err := c.Get(ctx, "{b}").Result(); err != nil || v != "v" {
		t.Fatalf("{b} after its master was killed: %q, %v", v, err)
	}

	slot := int(redisSlot(t, c, "{c}"))
	from := cl.NodeFor("{c}")
	var to *redistest.Server
	for _, n := range cl.Nodes {
		if n.Running() && n != from && n.Role() == "master" {
			to = n
			break
		}
	}
	mig := cl.StartMigration(slot, from, to)
	if moved := mig.MoveKeys(10); moved != 1 {
		t.Fatalf("moved %d keys of slot %d, want {c}", moved, slot)
	}
	if err := from.Client().Get(ctx, "{c}").Err(); err == nil || !strings.HasPrefix(err.Error(), "ASK ") {
		t.Fatalf("GET {c} on the source after its key moved: %v, want an ASK redirection", err)
	}
	if v, err := c.Get(ctx, "{c}").Result(); err != nil || v != "v" {
		t.Fatalf("{c} through the cluster client during the migration: %q, %v", v, err)
	}
	mig.Finish()
	if cl.NodeFor("{c}") != to {
		t.Fatalf("slot %d still on %s after the migration", slot, cl.NodeFor("{c}").Addr)
	}
}

func redisSlot(t *testing.T, c *redis.ClusterClient, key string) int64 {
	t.Helper()
	s, err := c.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
