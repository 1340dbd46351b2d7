package resilient_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/resilient"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// tally counts one caller's decisions.
type tally struct {
	decisions, admitted, degraded, failed int
}

// TestOneClusterMasterDownDegradesOnlyItsKeys runs the store as serve wires
// it (pipelined Redis store on a 3-master Cluster, breaker, on_failure:
// local; a 200ms deadline rather than the default 50ms, so that a busy test
// machine stalling the process does not time decisions out of its own) under 8-way load from three callers: one whose bucket
// lives on a healthy master and one whose bucket lives on the master that
// is then killed (or stopped: SIGSTOP, so its connections hang rather than
// refuse). Until Redis declares the cluster failed, the caller on the
// healthy master must stay exactly limited (its 10 tokens, nothing from the
// failure mode), while the other takes the failure path. A third caller's
// decisions span both masters (two identities): all-or-nothing, they cannot
// be exact on one master alone, so they take the failure path too, and
// their failures count against the dead master's breaker only.
func TestOneClusterMasterDownDegradesOnlyItsKeys(t *testing.T) {
	for _, fault := range []string{"killed", "stopped"} {
		t.Run(fault, func(t *testing.T) {
			// Without full coverage the surviving masters keep serving
			// their slots after the node timeout too, so the test does
			// not race the cluster declaring itself failed.
			cl := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
			const timeout = 200 * time.Millisecond
			client, err := redisstore.Dial(redisstore.Options{Addresses: cl.Addrs(), Timeout: timeout, DialTimeout: 250 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			ctx := context.Background()
			if err := redisstore.CheckServer(ctx, client); err != nil {
				t.Fatal(err)
			}
			store := redisstore.NewPipelined(client, "", servePipeline)
			defer store.Close()
			rs, err := resilient.New(store, resilient.Options{
				Timeout:       timeout,
				Breaker:       serveBreaker,
				Fallback:      storetest.Memory(nil),
				FallbackShare: whole,
			})
			if err != nil {
				t.Fatal(err)
			}
			const name = "api"
			// Two identities on node 0 and two on node 2.
			var on0, on2 []string
			for i := 0; len(on0) < 2 || len(on2) < 2; i++ {
				if i == 1000 {
					t.Fatal("no identities found on nodes 0 and 2")
				}
				id := fmt.Sprint("caller-", i)
				switch cl.NodeFor(store.Key(name, id)) {
				case cl.Nodes[0]:
					on0 = append(on0, id)
				case cl.Nodes[2]:
					on2 = append(on2, id)
				}
			}
			healthy, doomed, spanning := on0[0], on2[0], on0[1]+"+"+on2[1]
			l := limiter.MustLimit(10, "1/3600") // nothing refills during the test
			req := func(id string) []limiter.Request {
				if id == spanning {
					return []limiter.Request{{Name: name, ID: on0[1], Limit: l, Cost: 1}, {Name: name, ID: on2[1], Limit: l, Cost: 1}}
				}
				return []limiter.Request{{Name: name, ID: id, Limit: l, Cost: 1}}
			}
			// Both callers' nodes have answered once: connections and
			// scripts are in place, as in a store that has been serving.
			for _, id := range []string{healthy, doomed, spanning} {
				res := make([]limiter.Result, len(req(id)))
				if ok, err := rs.Take(ctx, req(id), res); !ok || err != nil || res[0].Degraded {
					t.Fatalf("before the fault, caller %s: allowed %v, err %v, %+v", id, ok, err, res[0])
				}
			}
			if fault == "killed" {
				cl.Nodes[2].Kill()
			} else {
				cl.Nodes[2].Pause()
				defer cl.Nodes[2].Resume()
			}

			var mu sync.Mutex
			counts := map[string]*tally{healthy: {}, doomed: {}, spanning: {}}
			var wg sync.WaitGroup
			stop := time.Now().Add(3 * time.Second)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 150 && time.Now().Before(stop); i++ {
						id := []string{healthy, doomed, spanning}[(i+g)%3]
						res := make([]limiter.Result, len(req(id)))
						ok, err := rs.Take(ctx, req(id), res)
						mu.Lock()
						c := counts[id]
						c.decisions++
						switch {
						case err != nil:
							c.failed++
						case res[0].Degraded:
							c.degraded++
						case ok:
							c.admitted++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			h, d, sp := counts[healthy], counts[doomed], counts[spanning]
			t.Logf("healthy master's caller: %+v; dead master's caller: %+v; spanning both: %+v", *h, *d, *sp)
			if h.degraded != 0 || h.failed != 0 {
				t.Errorf("the caller on a healthy master had %d degraded and %d failed decisions of %d: one master down degraded every shard", h.degraded, h.failed, h.decisions)
			}
			if h.admitted != 9 { // 10 tokens, one taken before the fault
				t.Errorf("the caller on a healthy master was admitted %d times exactly, want its 9 remaining tokens", h.admitted)
			}
			if d.degraded == 0 || d.admitted != 0 || d.failed != 0 {
				t.Errorf("the caller on the dead master: %+v; want every decision from the failure mode", *d)
			}
			if sp.degraded == 0 || sp.admitted != 0 || sp.failed != 0 {
				t.Errorf("the caller spanning both masters: %+v; want every decision from the failure mode", *sp)
			}
			if rs.Exact() {
				t.Error("Exact() reports every decision exact while a master is down")
			}
			states := rs.ShardStates()
			for i, want := range []resilient.State{resilient.Closed, resilient.Closed, resilient.Open} {
				if got, ok := states[cl.Nodes[i].Addr]; (ok || want != resilient.Closed) && got != want {
					t.Errorf("master %d's breaker is %v, want %v (all: %v)", i, got, want, states)
				}
			}
			if got := rs.Breaker().State(); got != resilient.Closed {
				t.Errorf("the store-wide breaker is %v, want closed: every decision had its masters", got)
			}
		})
	}
}
