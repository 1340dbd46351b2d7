package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/lease"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestLeasesWhileTheirSlotMoves: two replicas lease hot buckets of one
// slot of a 3-master Redis Cluster while the slot moves, key by key, to
// another master (ASK redirections for the keys already moved). No
// decision fails, no bucket admits more than its capacity, and once the
// leases go back each bucket holds its capacity less what it admitted:
// the leases' tokens were neither lost nor minted by the move.
func TestLeasesWhileTheirSlotMoves(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client, err := redisstore.Dial(redisstore.Options{Addresses: cl.Addrs(), Timeout: 500 * time.Millisecond, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s := redisstore.NewPipelined(client, "lm:", redisstore.PipelineOptions{MaxBatch: 128, Flushers: 1})
	defer s.Close()

	const slot, capacity = 901, 300
	hot := idsInSlot(slot, 4, "hot-")
	l := limiter.MustLimit(capacity, "1/3600")
	from := cl.NodeFor("lm:h:{" + hot[0] + "}")
	var to *redistest.Server
	for _, n := range cl.Nodes {
		if n != from {
			to = n
			break
		}
	}
	reg := prometheus.NewRegistry()
	replicas := []*lease.Store{lease.New(s, lease.Options{Hot: 2, Registerer: reg}), lease.New(s, lease.Options{Hot: 2})}
	var mu sync.Mutex
	admitted := map[string]int64{}
	var errs []error
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := replicas[g%2]
			res := make([]limiter.Result, 1)
			for i := 0; i < 5000; i++ {
				select {
				case <-done:
					return
				default:
				}
				id := hot[(g+i)%len(hot)]
				ok, err := r.Take(context.Background(), []limiter.Request{{Name: "h", ID: id, Limit: l, Cost: 1, Lease: true}}, res)
				mu.Lock()
				if err != nil && len(errs) < 5 {
					errs = append(errs, err)
				}
				if err == nil && ok {
					admitted[id]++
				}
				mu.Unlock()
				time.Sleep(200 * time.Microsecond) // paces the callers
			}
		}()
	}
	// Every bucket in Redis, and leased, before the move begins.
	redistest.Eventually(t, 10*time.Second, "every hot bucket decided a few times", func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range hot {
			if admitted[id] < 10 {
				return fmt.Errorf("%s admitted %d", id, admitted[id])
			}
		}
		return nil
	})
	mig := cl.StartMigration(slot, from, to)
	moved := mig.MoveAll(1, 5*time.Millisecond) // decisions meanwhile, some answered by ASK
	mig.Finish()
	close(done)
	wg.Wait()
	for _, r := range replicas {
		r.Close()
	}
	t.Logf("slot %d moved from %s to %s (%d keys) while leased: admitted %v, errors %v", slot, from.Addr, to.Addr, moved, admitted, errs)
	if moved == 0 {
		t.Fatal("no key moved: the slot held none")
	}
	if len(errs) > 0 {
		t.Errorf("decisions failed while the slot moved: %v", errs)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "floodgate_lease_decisions_total" && mf.GetMetric()[0].GetCounter().GetValue() == 0 {
			t.Error("no decision was served from a lease: the move was not tested under leases")
		}
	}
	res := make([]limiter.Result, 1)
	for _, id := range hot {
		if admitted[id] > capacity {
			t.Errorf("bucket %s admitted %d, more than its capacity %d", id, admitted[id], capacity)
		}
		if _, err := s.Take(context.Background(), []limiter.Request{{Name: "h", ID: id, Limit: l}}, res); err != nil {
			t.Fatal(err)
		}
		if want := capacity - admitted[id]; res[0].Remaining != want {
			t.Errorf("bucket %s holds %d after the leases went back, want %d (its capacity less the %d admitted)", id, res[0].Remaining, want, admitted[id])
		}
	}
}
