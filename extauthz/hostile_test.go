package extauthz

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/floodgate/floodgate/limiter/memory"
)

// TestOversizedRequestsGetADecision feeds the handler requests far beyond
// what Envoy sends by default (it caps headers at 60 KiB): thousands of
// headers, megabyte values, long paths and X-Forwarded-For chains, in both
// header modes. Each gets a normal decision; XFF walking stops after
// MaxXFFEntries.
func TestOversizedRequestsGetADecision(t *testing.T) {
	r := newRig(t, []PolicySpec{apiPolicy, {Name: "ip", Match: MatchSpec{PathPrefix: "/"}, Key: []string{"client_ip"}, Capacity: 100, RefillPerSecond: "1"}},
		Options{ClientIP: ClientIPSpec{TrustedHops: 1}}, nil, ServerOptions{})
	many := map[string]string{}
	var raw []*corev3.HeaderValue
	for i := 0; i < 5000; i++ {
		k := fmt.Sprintf("x-h-%d", i)
		many[k] = "v"
		raw = append(raw, &corev3.HeaderValue{Key: k, RawValue: []byte("v")}, &corev3.HeaderValue{Key: "x-api-key", RawValue: []byte("k")})
	}
	huge := strings.Repeat("A", 1<<20)
	longXFF := strings.Repeat("203.0.113.9, ", 50_000) + "198.51.100.1, 10.0.0.1"
	cases := map[string]*authv3.CheckRequest{
		"5000 headers":               checkRequest("10.0.0.1", many),
		"a megabyte API key":         checkRequest("10.0.0.1", map[string]string{":path": "/v1/x", "x-api-key": huge}),
		"a 100 KB path":              checkRequest("10.0.0.1", map[string]string{":path": "/v1/" + strings.Repeat("p", 100_000)}),
		"50000 X-Forwarded-For hops": checkRequest("10.0.0.1", map[string]string{"x-forwarded-for": longXFF}),
	}
	rawReq := checkRequest("10.0.0.1", nil)
	rawReq.Attributes.Request.Http.Headers = nil
	rawReq.Attributes.Request.Http.Path = "/v1/raw"
	rawReq.Attributes.Request.Http.HeaderMap = &corev3.HeaderMap{Headers: raw}
	cases["10000 header_map entries, 5000 of one name"] = rawReq
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			if resp := r.check(t, req); resp.GetStatus() == nil {
				t.Fatal("no status")
			}
		})
	}
	// The XFF walk looked at the right end only.
	c := ClientIP{TrustedHops: 1, IPv4Prefix: 32}
	if got := c.Resolve(NewView(cases["50000 X-Forwarded-For hops"])).String(); got != "198.51.100.1/32" {
		t.Errorf("client from a 50000-hop chain = %s", got)
	}
	if v, _ := NewView(rawReq).Header("x-api-key"); len(v) != 2*5000-1 {
		t.Errorf("5000 x-api-key entries joined to %d bytes", len(v))
	}
}

// TestInFlightChecksSeeOneEngine swaps engines while Checks run: every
// answer must come wholly from one engine, never a mix of old and new.
func TestInFlightChecksSeeOneEngine(t *testing.T) {
	one := PolicySpec{Name: "one", Key: []string{"client_ip"}, Capacity: 1_000_000, RefillPerSecond: "1000"}
	two := PolicySpec{Name: "two", Key: []string{"client_ip"}, Capacity: 2_000_000, RefillPerSecond: "1000"}
	r := newRig(t, []PolicySpec{one}, Options{}, nil, ServerOptions{})
	e1, _ := Compile([]PolicySpec{one}, Options{})
	e2, _ := Compile([]PolicySpec{two}, Options{})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 2000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				r.server.SetEngine(e2)
			} else {
				r.server.SetEngine(e1)
			}
		}
	}()
	seen := map[string]int{}
	var mu sync.Mutex
	var checkers sync.WaitGroup
	for g := 0; g < 4; g++ {
		checkers.Add(1)
		go func() {
			defer checkers.Done()
			for i := 0; i < 200; i++ {
				resp := r.check(t, checkRequest("10.0.0.1", nil))
				limit, policy := headerOf(resp, HeaderLimit), headerOf(resp, HeaderPolicy)
				ok := (limit == "1000000" && strings.HasPrefix(policy, `"one"`)) || (limit == "2000000" && strings.HasPrefix(policy, `"two"`))
				if !ok {
					t.Errorf("an answer mixed engines: limit %s, policy %s", limit, policy)
					return
				}
				mu.Lock()
				seen[limit]++
				mu.Unlock()
			}
		}()
	}
	checkers.Wait()
	close(stop)
	wg.Wait()
	if len(seen) == 0 {
		t.Fatal("no answers")
	}
	t.Logf("answers by engine: %v", seen)
}

// bytesPerBucket bounds the in-memory store's memory per bucket of its cap:
// 32-byte slots in power-of-two tables kept at most three-quarters full.
// docs/performance.md quotes it.
const bytesPerBucket = 86

// TestAMillionCallersCostBoundedMemory sends a million distinct client
// addresses through the handler with the in-memory store capped at 100,000
// buckets: the heap grows by no more than the documented bound.
func TestAMillionCallersCostBoundedMemory(t *testing.T) {
	const maxBuckets = 100_000
	eng, err := Compile([]PolicySpec{{Name: "ip", Key: []string{"client_ip"}, Capacity: 10, RefillPerSecond: "1/60"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{MaxBuckets: maxBuckets, Shards: 256})
	s := NewServer(eng, store, ServerOptions{})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	req := checkRequest("10.0.0.1", nil)
	addr := req.Attributes.Source.GetAddress().GetSocketAddress()
	for i := 0; i < 1_000_000; i++ {
		addr.Address = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		if i >= 1<<24 {
			t.Fatal("address space exhausted")
		}
		resp, err := s.Check(context.Background(), req)
		if err != nil || resp.GetStatus().GetCode() != 0 {
			t.Fatalf("caller %d: %v %v", i, resp, err)
		}
	}
	grew := int64(heap()) - int64(before)
	t.Logf("1,000,000 callers: store holds %d buckets, heap grew %d KiB (bound %d KiB)", store.Len(), grew>>10, bytesPerBucket*maxBuckets>>10)
	if store.Len() > maxBuckets {
		t.Errorf("store holds %d buckets, cap %d", store.Len(), maxBuckets)
	}
	if grew > bytesPerBucket*maxBuckets+4<<20 {
		t.Errorf("heap grew %d bytes for a cap of %d buckets, bound %d", grew, maxBuckets, bytesPerBucket*maxBuckets)
	}
}
