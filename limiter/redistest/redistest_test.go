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
