package rlqs

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// epoch is where the tests' clocks start: on a window's boundary.
var epoch = time.Unix(1_800_000_000, 0)

// limits is a QuotaSource for the tests: domain "edge", each chain (its
// pairs as k=v joined by commas) with its limit, per second.
type limits struct {
	perSecond map[string]uint32 // chain → requests a second; 0: Never
	unlimited map[string]bool
	shadow    map[string]bool
}

func (l limits) HasDomain(d string) bool { return d == "edge" }

func (l limits) Quota(domain string, chain []door.Entry) door.Quota {
	if domain != "edge" {
		return door.Quota{}
	}
	var parts []string
	for _, e := range chain {
		parts = append(parts, e.Key+"="+e.Value)
	}
	k := strings.Join(parts, ",")
	if l.unlimited[k] {
		return door.Quota{Meets: door.Unlimited, Name: k, Report: "rls:edge/" + k}
	}
	n, ok := l.perSecond[k]
	if !ok {
		return door.Quota{}
	}
	q := door.Quota{Meets: door.Bucketed, Name: k, Report: "rls:edge/" + k, Shadow: l.shadow[k], RequestsPerUnit: n, UnitSeconds: 1,
		Key: k, Caller: "-"}
	if n == 0 {
		q.Meets = door.Never
		return q
	}
	rate, _ := limiter.PerSecond(int64(n))
	lim, err := limiter.NewLimit(int64(n), rate)
	if err != nil {
		panic(err)
	}
	q.Bucket = limiter.Request{Name: "rls/edge/" + k, ID: "id:" + k, Limit: lim}
	return q
}

func perSecond(pairs ...any) limits {
	l := limits{perSecond: map[string]uint32{}, unlimited: map[string]bool{}, shadow: map[string]bool{}}
	for i := 0; i < len(pairs); i += 2 {
		l.perSecond[pairs[i].(string)] = uint32(pairs[i+1].(int))
	}
	return l
}

// rig is a quota door on loopback gRPC over a store, its clock, board and
// metrics.
type rig struct {
	t     *testing.T
	clock *limiter.ManualClock
	board *door.QuotaBoard
	door  *quotaDoor
	reg   *prometheus.Registry
	conn  *grpc.ClientConn
	addr  string
	srv   *grpc.Server
}

type rigOptions struct {
	store    limiter.Store // nil: an in-memory store on the clock
	clock    *limiter.ManualClock
	interval time.Duration
	cfg      func(*config.Config)
	recorder decide.Recorder
}

func newRig(t *testing.T, src door.QuotaSource, o rigOptions) *rig {
	t.Helper()
	if o.clock == nil {
		o.clock = limiter.NewManualClock(epoch)
	}
	env := door.Env{Log: zap.NewNop(), Registerer: prometheus.NewRegistry(), Recorder: o.recorder}.ForBuild()
	if o.store == nil {
		o.store = storetest.Memory(o.clock)
	}
	env.Store = &store.Stores{Main: o.store, Shadow: o.store}
	c := config.Default()
	c.RLS.Config = "limits.yaml"
	if o.cfg != nil {
		o.cfg(c)
	}
	r := &rig{t: t, clock: o.clock, board: env.Quotas(), reg: env.Registerer.(*prometheus.Registry)}
	if src != nil {
		r.board.Publish(src)
	}
	r.door = New(door.NewConfig(c, nil), env, Options{Clock: o.clock, Interval: o.interval}).(*quotaDoor)
	r.listen("127.0.0.1:0")
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r.conn = conn
	t.Cleanup(func() { conn.Close(); r.srv.Stop() })
	return r
}

func (r *rig) listen(addr string) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr = lis.Addr().String()
	r.srv = grpc.NewServer()
	r.door.Register(r.srv)
	go r.srv.Serve(lis)
}

// envoy is an Envoy of domain edge on the rig's clock.
func (r *rig) envoy(o EnvoyOptions) *Envoy {
	if o.Domain == "" {
		o.Domain = "edge"
	}
	if o.Clock == nil {
		o.Clock = r.clock
	}
	e := NewEnvoy(r.conn, o)
	r.t.Cleanup(e.Close)
	return e
}

// settle waits for e's answers.
func settle(t *testing.T, e *Envoy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !e.Settle(ctx) {
		t.Fatal("the reports were not answered within 5s")
	}
}

// counter is the value of the metric name with labels, 0 when absent.
func (r *rig) metric(name string, labels ...string) float64 {
	r.t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels []string) bool {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// burst sends n requests of bucket through e, spread evenly over d of the
// clock, and returns how many were allowed.
func burst(clock *limiter.ManualClock, es []*Envoy, n []int, bucket map[string]string, d time.Duration) []int {
	const steps = 100
	allowed := make([]int, len(es))
	sent := make([]int, len(es))
	for s := 1; s <= steps; s++ {
		clock.Advance(d / steps)
		for i, e := range es {
			for sent[i] < n[i]*s/steps {
				sent[i]++
				if e.Request(bucket) {
					allowed[i]++
				}
			}
		}
	}
	return allowed
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
