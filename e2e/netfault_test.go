package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/redistest/netfault"
)

// The faults a network brings between Floodgate and Redis: the built binary
// serves both doors (ext_authz Check and the rate limit service's
// ShouldRateLimit) on a Redis reached through a netfault proxy, under a
// bounded, paced load on both doors at once, while the test slows, cuts,
// resets and starves the proxy's connections. Each case reports, per door,
// the decisions answered (exact or by the failure mode), the RPC errors
// (there must be none), the slowest answer (it must come within the deadline
// the design promises: the store timeout, plus a margin for this machine),
// and, once the fault has healed, whether the buckets in Redis agree with
// what was allowed: every request has a bucket of its own (a unique API key,
// or descriptor value), so each bucket was charged once (an exact allow, or
// a failure-mode answer whose script had run) or never, and one charged
// twice is a decision paid twice. chaos_test.go (make chaos) holds the long
// cases: the production timeouts, bandwidth, Redis Cluster failovers and
// moving slots.

// answerMargin is what an answer may take beyond the store timeout: Go's
// scheduler, the gRPC round trip and the failure mode's answer on this
// machine (two cores shared with other work), not Redis.
const answerMargin = 150 * time.Millisecond

// charge is the time one token takes to refill in the rig's limits (10 an
// hour): a bucket's key expires when the bucket is full again, so its
// remaining time to live, in these, is how many tokens it has paid.
const charge = 360 * time.Second

// door is one of Floodgate's two gRPC doors.
type frontEnd int

const (
	checkDoor frontEnd = iota // ext_authz Check
	rlsDoor                   // the rate limit service's ShouldRateLimit
)

func (d frontEnd) String() string { return [...]string{"Check", "ShouldRateLimit"}[d] }

// keyPattern is the Redis keys of the door's one-request buckets (prefix
// "nf:"; the rate limit service's bucket names are rls/DOMAIN/ and the
// limit's place in the tree).
func (d frontEnd) keyPattern() string {
	return [...]string{"nf:per-request:*", "nf:rls/nf/nf.api_key:*"}[d]
}

// hotPattern is the Redis keys of the door's hot buckets (asked many times
// each, see faultRig.askHot).
func (d frontEnd) hotPattern() string { return [...]string{"nf:hot:*", "nf:rls/nf/nf.hot_key:*"}[d] }

var frontEnds = []frontEnd{checkDoor, rlsDoor}

// rigOptions shape a fault rig.
type rigOptions struct {
	// timeout is store.redis.timeout (default 50 ms, as in production).
	timeout time.Duration
	// store is added to store.redis (YAML flow entries, e.g.
	// "pipeline: false").
	store string
	// cluster, when set, is the Redis Cluster floodgate uses (seeded with
	// its nodes, no proxy) instead of a redis-server behind a proxy.
	cluster *redistest.Cluster
}

// faultRig is one floodgate serve process on Redis: a redis-server behind a
// netfault proxy, or a Redis Cluster.
type faultRig struct {
	t       *testing.T
	timeout time.Duration
	// deadline is each request's deadline, as Envoy's timeout sets it:
	// envoy/envoy.yaml's 0.25 s at a 50 ms store timeout, 0.2 s above the
	// store timeout in general. An answer later than that is an RPC error
	// (DEADLINE_EXCEEDED) to Envoy.
	deadline time.Duration
	redis    *redistest.Server  // nil on a cluster
	cluster  *redistest.Cluster // nil on a redis-server
	proxy    *netfault.Proxy    // nil on a cluster
	fg       *replica
	rls      rlsv3.RateLimitServiceClient
	seq      int // names each load's requests apart
	// stall is the longest this process's timers have run late during a
	// load: the machine's stall, added to the bound an answer is held to.
	stall time.Duration

	mu    sync.Mutex
	total map[frontEnd]*tally // every request the rig sent, by door: what Redis' counts must agree with
}

// bound is what the design promises an answer within: each decision's
// Redis work is cut at the store timeout, and the answer follows.
func (r *faultRig) bound() time.Duration { return r.timeout + answerMargin }

// startFaultRig starts Redis (and the proxy to it) and floodgate on it.
func startFaultRig(t *testing.T, o rigOptions) *faultRig {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = 50 * time.Millisecond
	}
	r := &faultRig{t: t, timeout: o.timeout, deadline: o.timeout + 200*time.Millisecond, cluster: o.cluster,
		total: map[frontEnd]*tally{checkDoor: {}, rlsDoor: {}}}
	var addrs []string
	if o.cluster != nil {
		addrs = o.cluster.Addrs()
	} else {
		r.redis = redistest.Start(t)
		p, err := netfault.Start(r.redis.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		r.proxy, addrs = p, []string{p.Addr()}
	}
	limits := filepath.Join(t.TempDir(), "ratelimit.yaml")
	if err := os.WriteFile(limits, []byte(`domain: nf
descriptors:
  - key: api_key
    rate_limit: {name: per-request, unit: hour, requests_per_unit: 10}
  - key: hot_key
    rate_limit: {name: hot, unit: hour, requests_per_unit: 10}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	store := ""
	if o.store != "" {
		store = ", " + o.store
	}
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = strconv.Quote(a)
	}
	cfg := fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addresses: [%s], timeout: %v, prefix: "nf:"%s}
  on_failure: allow
identity: {hash_secret_env: FLOODGATE_E2E_SECRET}
policies:
  - name: per-request
    match: {path_prefix: /v1/}
    key: [header:x-api-key]
    capacity: 10
    refill_per_second: 10/3600
  - name: hot
    match: {path_prefix: /v2/}
    key: [header:x-api-key]
    capacity: 10
    refill_per_second: 10/3600
rls:
  config: %q
`, strings.Join(quoted, ", "), o.timeout, store, limits)
	r.fg = startReplica(t, "floodgate", cfg, secretEnv)
	conn, err := grpc.NewClient(r.fg.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.rls = rlsv3.NewRateLimitServiceClient(conn)
	r.healthy()
	return r
}

// direct returns clients straight to the servers holding buckets (every
// running node of a cluster), for counting.
func (r *faultRig) direct() []*redis.Client {
	if r.cluster == nil {
		return []*redis.Client{r.redis.Client()}
	}
	var out []*redis.Client
	for _, n := range r.cluster.Nodes {
		if n.Running() && n.Role() == "master" {
			out = append(out, n.Client())
		}
	}
	return out
}

// outcome is one request's answer.
type outcome int

const (
	allowed  outcome = iota // exact: the store decided and allowed
	denied                  // exact: the store decided and denied
	degraded                // the failure mode answered (on_failure: allow)
	rpcError                // no decision: must never happen
)

// ask sends one request through door d for the bucket of id, with Envoy's
// deadline, classifies the answer and counts it in the rig's totals.
func (r *faultRig) ask(d frontEnd, id string) (outcome, time.Duration, error) {
	o, took, err := r.send(d, id)
	r.mu.Lock()
	r.total[d].add(o, took, err)
	r.mu.Unlock()
	return o, took, err
}

func (r *faultRig) send(d frontEnd, id string) (outcome, time.Duration, error) {
	return r.sendTo(d, id, false)
}

// sendTo is send to the door's one-request buckets, or its hot ones.
func (r *faultRig) sendTo(d frontEnd, id string, hot bool) (outcome, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.deadline)
	defer cancel()
	start := time.Now()
	path, descriptor := "/v1/items", "api_key"
	if hot {
		path, descriptor = "/v2/items", "hot_key"
	}
	if d == checkDoor {
		resp, err := r.fg.client.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
				SocketAddress: &corev3.SocketAddress{Address: "198.51.100.7"}}}},
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Method: "GET", Path: path, Headers: map[string]string{":path": path, "x-api-key": id}}},
		}})
		took := time.Since(start)
		switch {
		case err != nil:
			return rpcError, took, err
		case hasHeader(resp, "x-ratelimit-degraded"):
			return degraded, took, nil
		case resp.GetStatus().GetCode() == 0:
			return allowed, took, nil
		}
		return denied, took, nil
	}
	resp, err := r.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "nf", Descriptors: []*commonrlv3.RateLimitDescriptor{{
		Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: descriptor, Value: id}},
	}}})
	took := time.Since(start)
	switch {
	case err != nil:
		return rpcError, took, err
	case len(resp.GetStatuses()) != 1:
		return rpcError, took, fmt.Errorf("%d statuses, want 1", len(resp.GetStatuses()))
	case resp.GetStatuses()[0].GetCurrentLimit() == nil:
		// The failure mode (allow) answers OK without the limit, which
		// only a decision of the store knows.
		return degraded, took, nil
	case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
		return allowed, took, nil
	}
	return denied, took, nil
}

func hasHeader(resp *authv3.CheckResponse, name string) bool {
	for _, h := range resp.GetOkResponse().GetHeaders() {
		if strings.EqualFold(h.GetHeader().GetKey(), name) {
			return true
		}
	}
	for _, h := range resp.GetOkResponse().GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetHeader().GetKey(), name) {
			return true
		}
	}
	return false
}

// healthy waits (bounded) until both doors decide exactly.
func (r *faultRig) healthy() time.Duration {
	r.t.Helper()
	start := time.Now()
	for _, d := range frontEnds {
		for {
			r.seq++
			o, _, err := r.ask(d, fmt.Sprintf("healthy-%d", r.seq))
			if o == allowed {
				break
			}
			if time.Since(start) > 10*time.Second {
				r.t.Fatalf("%v: not exact within 10s of the fault ending: last answer %v (%v)", d, o, err)
			}
			time.Sleep(10 * time.Millisecond) // paces the probing requests
		}
	}
	return time.Since(start)
}

// tally is what one door answered in one load.
type tally struct {
	sent, allowed, denied, degraded, rpcErrors int
	lateErrors                                 int // of the RPC errors, the deadline's (DEADLINE_EXCEEDED)
	worst                                      time.Duration
	lats                                       []time.Duration
	errs                                       []string // the first few RPC errors
}

func (t *tally) add(o outcome, took time.Duration, err error) {
	t.sent++
	t.worst = max(t.worst, took)
	t.lats = append(t.lats, took)
	switch o {
	case allowed:
		t.allowed++
	case denied:
		t.denied++
	case degraded:
		t.degraded++
	case rpcError:
		t.rpcErrors++
		if status.Code(err) == codes.DeadlineExceeded {
			t.lateErrors++
		}
		if len(t.errs) < 3 {
			t.errs = append(t.errs, err.Error())
		}
	}
}

// load is the bounded load: per door, workers that each send a request every
// interval (paced, so a fast answer does not turn into more load) for
// duration, each request for a bucket of its own.
type load struct {
	workers  int
	interval time.Duration
	duration time.Duration
}

// defaultLoad is about 200 requests a second on each door.
var defaultLoad = load{workers: 4, interval: 20 * time.Millisecond, duration: 1500 * time.Millisecond}

// run applies l to both doors at once and returns each door's tally. during,
// when set, runs on its own goroutine once the load has started (a fault
// that comes and goes within the load).
func (r *faultRig) run(l load, during func()) map[frontEnd]*tally {
	r.seq++
	phase := r.seq
	out := map[frontEnd]*tally{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := time.Now().Add(l.duration)
	maxPerWorker := int(l.duration/l.interval) + 1 // bounded in count as well as time
	for _, d := range frontEnds {
		out[d] = &tally{}
		for w := 0; w < l.workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				next := time.Now()
				for n := 0; n < maxPerWorker && time.Now().Before(stop); n++ {
					o, took, err := r.ask(d, fmt.Sprintf("p%d-w%d-%d", phase, w, n))
					mu.Lock()
					out[d].add(o, took, err)
					mu.Unlock()
					next = next.Add(l.interval)
					time.Sleep(time.Until(next)) // pacing, not synchronisation
				}
			}()
		}
	}
	if during != nil {
		wg.Add(1)
		go func() { defer wg.Done(); during() }()
	}
	// How late this process's timers run meanwhile: a stall of the machine
	// (two cores shared with other work), which no store timeout bounds.
	stalled := make(chan struct{})
	go func() {
		defer close(stalled)
		for time.Now().Before(stop) {
			start := time.Now()
			time.Sleep(time.Millisecond)
			if late := time.Since(start) - time.Millisecond; late > r.stall {
				r.stall = late
			}
		}
	}()
	wg.Wait()
	<-stalled
	return out
}

// charges counts the buckets whose keys match pattern by the tokens each
// has paid: paid[k] is the number of buckets that paid k tokens (k >= 1).
func (r *faultRig) charges(pattern string) map[int]int {
	r.t.Helper()
	ctx := context.Background()
	paid := map[int]int{}
	for _, rc := range r.direct() {
		iter := rc.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			ttl, err := rc.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				r.t.Fatal(err)
			}
			if ttl <= 0 {
				continue // expired meanwhile: full, as if never charged
			}
			paid[int(math.Ceil(float64(ttl)/float64(charge)))]++
		}
		if err := iter.Err(); err != nil {
			r.t.Fatal(err)
		}
	}
	return paid
}

// breakerOpenings reads floodgate_breaker_transitions_total{to="open"}.
func (r *faultRig) breakerOpenings() int {
	r.t.Helper()
	resp, err := http.Get("http://" + r.fg.admin + "/metrics")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^floodgate_breaker_transitions_total\{to="open"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// report is one case's figures on one door: a row of the summary table.
type report struct {
	fault                                              string
	frontEnd                                           frontEnd
	sent, exact, degraded, rpcErrors                   int
	worst, p99                                         time.Duration
	openings                                           int
	chargedOnce, chargedMore, exactAllowed, toleranced int
	healed                                             time.Duration
}

func (rp report) String() string {
	return fmt.Sprintf("| %s | %v | %d | %d | %d | %d | %v | %v | %d | %d of [%d, %d] | %d | %v |",
		rp.fault, rp.frontEnd, rp.sent, rp.exact, rp.degraded, rp.rpcErrors, rp.worst.Round(time.Millisecond), rp.p99.Round(time.Millisecond),
		rp.openings, rp.chargedOnce, rp.exactAllowed, rp.exactAllowed+rp.toleranced, rp.chargedMore, rp.healed.Round(time.Millisecond))
}

// reportHeader heads the rows of report.String.
const reportHeader = "| fault | frontEnd | sent | exact | failure mode | RPC errors | worst | p99 | breaker openings | buckets charged once, of [exact allows, + failure-mode answers] | charged twice | exact again after |"

func p99(lats []time.Duration) time.Duration {
	if len(lats) == 0 {
		return 0
	}
	s := slices.Clone(lats)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// faultCase is one fault and what it must leave intact.
type faultCase struct {
	name string
	rig  rigOptions
	// apply brings the fault on (the load starts right after) and returns
	// what heals it (called when the load ends).
	apply func(r *faultRig) (heal func())
	// during, when set, runs alongside the load (a fault that comes and
	// goes within it); apply may then be nil.
	during func(r *faultRig)
	load   load
	// steady: Redis answers, slowly or on all but one connection, and the
	// breaker must not open.
	steady bool
	// lost bounds the exact allows whose charge may be missing from Redis
	// afterwards (a failover losing the writes its replica had not yet
	// received); 0 for every fault that keeps the data.
	lost int
}

// runFaultCase runs fc on a rig of its own (r, when not nil) and checks, for
// each door: no RPC error; every answer within the bound; no bucket charged
// twice; the buckets charged once at least the exact allows (less fc.lost)
// and at most those plus the failure-mode answers (whose script may or may
// not have run); no exact denial (each bucket is asked once, with room for
// ten); exact decisions again after the fault. It returns the door's report
// rows.
func runFaultCase(t *testing.T, r *faultRig, fc faultCase) []report {
	t.Helper()
	if r == nil {
		r = startFaultRig(t, fc.rig)
	}
	before := r.breakerOpenings()
	heal := func() {}
	if fc.apply != nil {
		heal = fc.apply(r)
	}
	var during func()
	if fc.during != nil {
		during = func() { fc.during(r) }
	}
	l := fc.load
	if l.workers == 0 {
		l = defaultLoad
	}
	tallies := r.run(l, during)
	heal()
	healed := r.healthy()
	openings := r.breakerOpenings() - before
	r.run(load{workers: 2, interval: 20 * time.Millisecond, duration: 300 * time.Millisecond}, nil) // exact after, and counted
	var rows []report
	for _, d := range frontEnds {
		ft, all := tallies[d], r.total[d]
		paid := r.charges(d.keyPattern())
		more := 0
		for k, n := range paid {
			if k > 1 {
				more += n
			}
		}
		rp := report{fault: fc.name, frontEnd: d, sent: ft.sent, exact: ft.allowed + ft.denied, degraded: ft.degraded, rpcErrors: ft.rpcErrors,
			worst: ft.worst, p99: p99(ft.lats), openings: openings, chargedOnce: paid[1], chargedMore: more,
			exactAllowed: all.allowed, toleranced: all.degraded, healed: healed}
		t.Logf("%v: %d sent during the fault: %d exact, %d by the failure mode, %d RPC errors; worst %v, p99 %v; breaker opened %d times; "+
			"Redis: %d buckets charged once (exact allows %d, failure-mode answers %d), %d charged more; exact again %v after the fault; "+
			"this process's timers ran up to %v late",
			d, ft.sent, rp.exact, ft.degraded, ft.rpcErrors, ft.worst.Round(time.Millisecond), rp.p99.Round(time.Millisecond), openings,
			paid[1], all.allowed, all.degraded, more, healed.Round(time.Millisecond), r.stall.Round(time.Millisecond))
		switch {
		case all.rpcErrors > all.lateErrors || (all.lateErrors > 0 && r.stall < r.deadline-r.bound()):
			t.Errorf("%v: %d RPC errors (first: %q): a decision is never an RPC error", d, all.rpcErrors, all.errs)
		case all.lateErrors > 0:
			// This process's timers ran later than the deadline leaves
			// beyond the bound: the machine stalled, the load generator
			// with it, and its own deadline expired.
			t.Logf("%v: %d answers came past their deadline while this machine stalled for %v: not counted against floodgate",
				d, all.lateErrors, r.stall.Round(time.Millisecond))
		}
		if all.worst > r.bound()+r.stall {
			t.Errorf("%v: an answer took %v: past the store timeout (%v), the margin and this machine's longest stall (%v), %v in all",
				d, all.worst, r.timeout, r.stall.Round(time.Millisecond), r.bound()+r.stall)
		}
		if more > 0 {
			t.Errorf("%v: %d buckets charged more than once (%v): a decision paid twice", d, more, paid)
		}
		if paid[1] < all.allowed-fc.lost || paid[1] > all.allowed+all.degraded {
			t.Errorf("%v: %d buckets charged, want between the %d exact allows (less %d the fault may lose) and those plus the %d failure-mode answers",
				d, paid[1], all.allowed, fc.lost, all.degraded)
		}
		if all.denied > 0 {
			t.Errorf("%v: %d exact denials of buckets asked once, with room for ten", d, all.denied)
		}
		rows = append(rows, rp)
	}
	if fc.steady && openings > 0 {
		t.Errorf("the breaker opened %d times with Redis answering: a slow Redis, or one bad connection, is not an outage", openings)
	}
	return rows
}

// logTable logs the summary of a test's cases.
func logTable(t *testing.T, rows []report) {
	var b strings.Builder
	b.WriteString(reportHeader + "\n")
	for _, rp := range rows {
		b.WriteString(rp.String() + "\n")
	}
	t.Logf("summary (%s):\n%s", time.Now().Format("2006-01-02"), b.String())
}

// roundTrip is a Latency fault on both directions adding rtt, plus or minus
// jitter, to each round trip.
func roundTrip(rtt, jitter time.Duration) netfault.Latency {
	return netfault.Latency{Dir: netfault.Both, Delay: rtt / 2, Jitter: jitter / 2}
}

// latencyCases are a Redis that answers late: just below the store timeout
// (90% of it), beyond it (120%), and jitter across it (100% ± 30%).
func latencyCases(timeout time.Duration, steady bool) []faultCase {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }
	var out []faultCase
	for _, c := range []struct {
		rtt, jitter time.Duration
		steady      bool
	}{
		{timeout * 9 / 10, 0, steady},
		{timeout * 12 / 10, 0, false},
		{timeout, timeout * 3 / 10, false},
	} {
		name := "round trip " + ms(c.rtt)
		if c.jitter > 0 {
			name += " ± " + ms(c.jitter)
		}
		out = append(out, faultCase{name: name + " (timeout " + ms(timeout) + ")", rig: rigOptions{timeout: timeout}, steady: c.steady,
			// Enough workers that decisions overlap round trips: at most
			// one request in flight each.
			load: load{workers: 8, interval: 20 * time.Millisecond, duration: max(1500*time.Millisecond, 8*timeout)},
			apply: func(r *faultRig) func() {
				id := r.proxy.Add(roundTrip(c.rtt, c.jitter))
				return func() { r.proxy.Remove(id) }
			}})
	}
	return out
}

// runCases runs each case as a subtest and logs the summary table.
func runCases(t *testing.T, cases []faultCase) {
	var rows []report
	for _, fc := range cases {
		t.Run(fc.name, func(t *testing.T) { rows = append(rows, runFaultCase(t, nil, fc)...) })
	}
	logTable(t, rows)
}

// TestRedisLatency: Redis answers, but late, at ten times the production
// store timeout (500 ms), so that the margin just below it (50 ms) dwarfs
// this machine's scheduling noise: a slow but answering Redis must not open
// the breaker, and one beyond the timeout must not hold requests past it.
// chaos_test.go runs the production timeout (45 ms at 50 ms).
func TestRedisLatency(t *testing.T) {
	runCases(t, latencyCases(500*time.Millisecond, true))
}

// busiest returns the proxy's connection that has carried the most bytes:
// the one the pool is using.
func busiest(t *testing.T, p *netfault.Proxy) *netfault.Conn {
	t.Helper()
	var best *netfault.Conn
	var most int64 = -1
	for _, c := range p.Conns() {
		if up, _ := c.Bytes(); up > most {
			best, most = c, up
		}
	}
	if best == nil {
		t.Fatal("no connection through the proxy")
	}
	return best
}

// pooled is what the blackhole and half-open cases run on: the pipelined
// store as serve builds it, with four idle connections kept beside the one
// in use, so that the fault can take one of several.
var pooled = rigOptions{store: "min_idle_conns: 4"}

// TestRedisBlackholeAndHalfOpen: bytes accepted and never answered, and a
// connection half-open (Redis' side closed, the client's held silent), on
// the one pooled connection in use and on every connection.
func TestRedisBlackholeAndHalfOpen(t *testing.T) {
	one := func(f netfault.Fault) func(r *faultRig) func() {
		return func(r *faultRig) func() {
			if n := len(r.proxy.Conns()); n < 2 {
				r.t.Fatalf("%d connections through the proxy, want several", n)
			}
			id := busiest(r.t, r.proxy).Add(f)
			return func() { r.proxy.Remove(id) }
		}
	}
	all := func(f netfault.Fault) func(r *faultRig) func() {
		return func(r *faultRig) func() {
			id := r.proxy.Add(f)
			return func() { r.proxy.Remove(id) }
		}
	}
	blackhole := netfault.Blackhole{Dir: netfault.Downstream} // Redis runs the calls; their replies are lost
	runCases(t, []faultCase{
		{name: "blackhole on the connection in use, of 5", rig: pooled, steady: true, apply: one(blackhole)},
		{name: "blackhole on every connection", rig: pooled, apply: all(blackhole)},
		{name: "half-open: the connection in use, of 5", rig: pooled, steady: true, apply: one(netfault.HalfOpen{})},
		{name: "half-open: every connection", rig: pooled, apply: all(netfault.HalfOpen{})},
	})
}

// TestRedisResetsMidBatch: every open connection is reset after a random
// part of its next reply, every 50 ms while the load runs, so that batches
// in flight lose the replies of calls Redis has run (a round trip of 2 ms
// makes decisions queue, and batches carry several). Every decision must
// still be answered, none charged twice; before each reset's batch, a reset
// before the request reaches Redis (upstream) costs no charge at all.
func TestRedisResetsMidBatch(t *testing.T) {
	resets := func(dir netfault.Dir) func(r *faultRig) {
		return func(r *faultRig) {
			rng := rand.New(rand.NewPCG(1, uint64(dir)))
			for stop := time.Now().Add(defaultLoad.duration); time.Now().Before(stop); time.Sleep(50 * time.Millisecond) {
				for _, c := range r.proxy.Conns() {
					c.Add(netfault.Reset{Dir: dir, After: rng.Int64N(400)})
				}
			}
		}
	}
	slow := func(r *faultRig) func() {
		id := r.proxy.Add(roundTrip(2*time.Millisecond, 0))
		return func() { r.proxy.Remove(id) }
	}
	runCases(t, []faultCase{
		{name: "reset after part of a reply (2 ms round trip)", apply: slow, during: resets(netfault.Downstream)},
		{name: "reset before a request reaches Redis (2 ms round trip)", apply: slow, during: resets(netfault.Upstream)},
	})
}
