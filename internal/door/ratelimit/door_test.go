package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/store"
)

// pushes is a Feed a test pushes to by hand.
type pushes struct {
	mu     sync.Mutex
	latest *Pushed
	fns    []func(Pushed)
}

func (p *pushes) Latest() (Pushed, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.latest == nil {
		return Pushed{}, false
	}
	return *p.latest, true
}

func (p *pushes) OnPush(fn func(Pushed)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fns = append(p.fns, fn)
}

func (p *pushes) push(files ...string) {
	pu := Pushed{Sources: map[string][]byte{}, Version: "v"}
	for i, f := range files {
		name := "xds:" + string(rune('a'+i))
		pu.Names = append(pu.Names, name)
		pu.Sources[name] = []byte(f)
	}
	p.mu.Lock()
	p.latest = &pu
	fns := p.fns
	p.mu.Unlock()
	for _, fn := range fns {
		fn(pu)
	}
}

// fedDoor builds the rate limit door of a configuration whose rls section
// is rls, fed by a hand-pushed feed, with in-memory buckets.
func fedDoor(t *testing.T, rls string) (door.Door, *door.Config, *pushes, *observer.ObservedLogs) {
	t.Helper()
	cfg := parsed(t, "rls:\n"+rls)
	st, err := store.Build(context.Background(), cfg.Config, zap.NewNop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	core, logs := observer.New(zap.InfoLevel)
	feed := &pushes{}
	d := newDoor(cfg, door.Env{Store: st, Log: zap.New(core)}, feed)
	return d, cfg, feed, logs
}

func parsed(t *testing.T, yaml string) *door.Config {
	t.Helper()
	c, problems := config.Check("test.yaml", []byte(yaml))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	eng, err := extauthz.Compile(c.Policies, door.EngineOptions(c))
	if err != nil {
		t.Fatal(err)
	}
	cfg := door.NewConfig(c, eng)
	if err := readLimits(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func ask(t *testing.T, d door.Door, domain, key, value string) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	return d.(*rateLimitDoor).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain,
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
}

func answers(t *testing.T, d door.Door, n int, domain, key, value string) string {
	t.Helper()
	var out []string
	for range n {
		r, err := ask(t, d, domain, key, value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.OverallCode.String())
	}
	return strings.Join(out, " ")
}

const edge3 = "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"

// TestAFedDoorAnswersByItsFailureModeUntilTheFirstPush: before a push,
// rls.on_failure: error answers UNAVAILABLE and the default answers as the
// store's failure mode (allow); the door is off for its health until the
// push, then decides with it.
func TestAFedDoorAnswersByItsFailureModeUntilTheFirstPush(t *testing.T) {
	x := "  xds: {server: \"cp:18001\", node_id: n}\n"
	d, cfg, feed, _ := fedDoor(t, x+"  on_failure: error\n")
	if _, err := ask(t, d, "edge", "k", "v"); status.Code(err) != codes.Unavailable {
		t.Errorf("rls.on_failure: error, before the first push: %v", err)
	}
	if d.On(cfg) {
		t.Error("the door is on before its first push")
	}
	feed.push(edge3)
	if !d.On(cfg) {
		t.Error("the door is off after its first push")
	}
	if got := answers(t, d, 4, "edge", "k", "v"); got != "OK OK OK OVER_LIMIT" {
		t.Errorf("after the push: %s", got)
	}
	d2, _, _, _ := fedDoor(t, x)
	if r, err := ask(t, d2, "edge", "k", "v"); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("the default failure mode, before the first push: %v %v, want OK", r, err)
	}
}

// TestBurstsApplyToEveryPushAndAReloadChangesThem: rls.burst applies to the
// pushed limits; a burst naming a limit the push lacks is said and the
// others still apply; a reload with other bursts re-applies the last push.
func TestBurstsApplyToEveryPushAndAReloadChangesThem(t *testing.T) {
	d, _, feed, logs := fedDoor(t, "  xds: {server: \"cp:18001\", node_id: n}\n  burst: {edge.k: 5, edge.gone: 9}\n")
	feed.push(edge3)
	if got := answers(t, d, 6, "edge", "k", "a"); got != "OK OK OK OK OK OVER_LIMIT" {
		t.Errorf("burst 5 on 3 an hour: %s", got)
	}
	if w := logs.FilterMessageSnippet("rls.burst names limits the push does not hold").All(); len(w) != 1 || fmt.Sprint(w[0].ContextMap()["refused"]) != "[edge.gone]" {
		t.Errorf("want one warning naming edge.gone: %v", logs.All())
	}
	d.Reload(parsed(t, "rls:\n  xds: {server: \"cp:18001\", node_id: n}\n  burst: {edge.k: 1}\n"))
	if got := answers(t, d, 2, "edge", "k", "b"); got != "OK OVER_LIMIT" {
		t.Errorf("after a reload to burst 1: %s", got)
	}
}

// TestShadowModeAnswersOKAndKeepsTheStatuses: rls.shadow_mode turns an
// over-limit answer into OK (the statuses still over the limit, as
// envoyproxy/ratelimit's SHADOW_MODE keeps them) without the body and
// content-type a denial carries.
func TestShadowModeAnswersOKAndKeepsTheStatuses(t *testing.T) {
	d, _, feed, _ := fedDoor(t, "  xds: {server: \"cp:18001\", node_id: n}\n  shadow_mode: true\n")
	feed.push("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	answers(t, d, 1, "edge", "k", "v")
	r, err := ask(t, d, "edge", "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT || r.RawBody != nil {
		t.Errorf("shadow mode, over the limit: %v", r)
	}
	for _, h := range r.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, "content-type") {
			t.Errorf("shadow mode kept the denial's %s header", h.Key)
		}
	}
}

// TestUnhealthyWithoutLimits: with rls.unhealthy_without_limits the door is
// off, and Healthy false, until the limits name a domain; an empty
// push turns it off again.
func TestUnhealthyWithoutLimits(t *testing.T) {
	d, cfg, feed, _ := fedDoor(t, "  xds: {server: \"cp:18001\", node_id: n}\n  unhealthy_without_limits: true\n")
	doors := []door.Door{d}
	if d.On(cfg) || door.Healthy(doors) {
		t.Error("healthy before any push")
	}
	feed.push(edge3)
	if !d.On(cfg) || !door.Healthy(doors) || strings.Join(servedDomains(doors), ",") != "edge" {
		t.Errorf("a push with domain edge: on %v, healthy %v, domains %v", d.On(cfg), door.Healthy(doors), servedDomains(doors))
	}
	feed.push()
	if d.On(cfg) || door.Healthy(doors) {
		t.Error("healthy after a push of no domain")
	}
	files, fcfg, _, _ := fedDoor(t, "  xds: {server: \"cp:18001\", node_id: n}\n")
	if files.On(fcfg) || !door.Healthy([]door.Door{files}) {
		t.Error("without the setting, Healthy must not depend on the limits")
	}
}

// servedDomains are the domains the rate limit door of doors serves now
// (none before a feed's first push).
func servedDomains(doors []door.Door) []string {
	if d := doors[0].(*rateLimitDoor); d.ready.Load() {
		return d.s.Limits().Domains()
	}
	return nil
}

// TestFixedWindowsCountEveryDescriptor: rls.windows: fixed reaches the
// service: a request over one of its two limits counts against the other
// too, as envoyproxy/ratelimit's binary counts (rls's
// TestFixedWindowsAnswerAsEnvoyproxyRatelimit compares the two).
func TestFixedWindowsCountEveryDescriptor(t *testing.T) {
	d, _, feed, _ := fedDoor(t, "  xds: {server: \"cp:18001\", node_id: n}\n  windows: fixed\n")
	feed.push("domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	answers(t, d, 1, "edge", "a", "x")
	r, err := d.(*rateLimitDoor).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "a", Value: "x"}}},
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "b", Value: "y"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[1].LimitRemaining != 4 {
		t.Errorf("over a's limit beside b: %v; want over, b counted (4 left)", r)
	}
}
