package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/peertest"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// egRoute is one route of an Envoy Gateway golden .routes.yaml: the rate
// limits it gives Envoy, per domain, each a list of actions.
type egRoute struct {
	RouteName          string                     `yaml:"routeName"`
	RateLimitsByDomain map[string][]egRateLimitIn `yaml:"rateLimitsByDomain"`
}

type egRateLimitIn struct {
	Actions []struct {
		ActionSpecifier map[string]map[string]any `yaml:"ActionSpecifier"`
	} `yaml:"actions"`
}

// egEntry is one descriptor entry Envoy would send for an action: its key,
// and its value, fixed by the action or taken from the request.
type egEntry struct {
	key, value  string
	fromRequest bool
}

// entries are the descriptor entries Envoy's rate limit filter builds for
// a list of actions (source/common/router/router_ratelimit.cc: generic_key,
// header_value_match, query_parameter_value_match and remote address
// matches carry their descriptor_key and descriptor_value;
// request_headers takes its value from the request's header; a value in
// %...% is a substitution Envoy makes from the request).
func (r egRateLimitIn) entries(t *testing.T, golden string) []egEntry {
	t.Helper()
	var out []egEntry
	for i, a := range r.Actions {
		if len(a.ActionSpecifier) != 1 {
			t.Fatalf("%s: action %d: %v", golden, i, a.ActionSpecifier)
		}
		for kind, f := range a.ActionSpecifier {
			key, _ := f["descriptor_key"].(string)
			value, _ := f["descriptor_value"].(string)
			if key == "" {
				t.Fatalf("%s: action %d (%s) names no descriptor_key", golden, i, kind)
			}
			switch kind {
			case "GenericKey", "HeaderValueMatch", "QueryParameterValueMatch", "RemoteAddressMatch":
				if strings.Contains(value, "%") {
					out = append(out, egEntry{key: key, value: "192.168.7.7", fromRequest: true})
				} else {
					out = append(out, egEntry{key: key, value: value})
				}
			case "RequestHeaders":
				out = append(out, egEntry{key: key, value: "caller-of-" + golden, fromRequest: true})
			default:
				t.Fatalf("%s: action %d: %s is an action this test does not know", golden, i, kind)
			}
		}
	}
	return out
}

// impliedLimit walks a golden RateLimitConfig as the entries would: at
// each level the descriptor of the entry's key whose value is the entry's,
// or, for a value the request brings, the one with no value; the limit at
// the last entry, nil when the walk stops short of one.
func impliedLimit(c *rlsconfv3.RateLimitConfig, es []egEntry) (*rlsconfv3.RateLimitPolicy, bool) {
	level := c.GetDescriptors()
	var d *rlsconfv3.RateLimitDescriptor
	for _, e := range es {
		d = nil
		for _, cand := range level {
			if cand.GetKey() == e.key && (cand.GetValue() == e.value || (e.fromRequest && cand.GetValue() == "")) {
				d = cand
				break
			}
		}
		if d == nil {
			return nil, false
		}
		level = d.GetDescriptors()
	}
	return d.GetRateLimit(), d.GetShadowMode()
}

func egDescriptor(es []egEntry, hits *wrapperspb.UInt64Value) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{HitsAddend: hits}
	for _, e := range es {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e.key, Value: e.value})
	}
	return d
}

func readDocs[T any](t *testing.T, file string) []T {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []T
	for {
		var v T
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out = append(out, v)
	}
}

// TestEnvoyGatewaysRateLimitConfigsAreAnsweredAsTheirRoutesImply runs
// Floodgate as ratelimit with the environment Envoy Gateway gives its rate
// limit Deployment (its golden default.yaml Deployment, read from its
// module: xDS from the control plane over mutual TLS, gRPC over TLS, Redis),
// only the addresses and the certificates' paths changed, and a real
// go-control-plane xDS server in the test as the control plane. It pushes,
// one after the other, every RateLimitConfig golden of Envoy Gateway's
// translator (internal/xds/translator/testdata/out/ratelimit-config, read
// from its module), and for every route of the golden's .routes.yaml sends
// the descriptors Envoy builds from its actions to the domain they name,
// requiring the limit the golden configuration puts there: its
// requests_per_unit and unit in current_limit, a request costing one more
// than the limit denied (taking nothing), one costing the limit allowed
// with nothing left; shadow mode answering OK; a rule shared between
// routes drawing from one bucket; and, for limits of an hour or more, a
// request-path check costing 0 then a response cost
// (cost.request/cost.response: Envoy Gateway's translator,
// internal/xds/translator/ratelimit.go buildRouteRateLimits, puts them in
// hits_addend, the second with apply_on_stream_done) taken from what is
// left.
func TestEnvoyGatewaysRateLimitConfigsAreAnsweredAsTheirRoutesImply(t *testing.T) {
	gw := peertest.Module(t, peertest.Gateway)
	goldens, _ := filepath.Glob(filepath.Join(gw, "internal", "xds", "translator", "testdata", "out", "ratelimit-config", "*.routes.yaml"))
	if len(goldens) < 20 {
		t.Fatalf("%d route goldens", len(goldens))
	}
	redis := redistest.Start(t)
	ca := peertest.NewCA(t, "envoy-gateway")
	certs := t.TempDir() // the envoy-rate-limit Secret Envoy Gateway mounts at /certs
	rl := ca.Issue("envoy-ratelimit", []string{"envoy-ratelimit"}, net.IPv4(127, 0, 0, 1))
	for name, from := range map[string]string{"tls.crt": rl.CertFile, "tls.key": rl.KeyFile, "ca.crt": ca.File} {
		data, _ := os.ReadFile(from)
		writeFile(t, filepath.Join(certs, name), string(data))
	}
	control := ca.Issue("envoy-gateway", []string{"envoy-gateway"}, net.IPv4(127, 0, 0, 1))
	xds := peertest.StartXDS(t, ca.ServerTLS(control))

	env := peertest.GatewayEnv(t, filepath.Join(gw, "internal", "infrastructure", "kubernetes", "ratelimit", "testdata", "deployments", "default.yaml"))
	grpcAddr, httpAddr := peertest.FreeAddr(t), peertest.FreeAddr(t)
	var list []string
	for k, v := range env {
		switch {
		case strings.HasPrefix(v, "/certs/"):
			v = filepath.Join(certs, strings.TrimPrefix(v, "/certs/"))
		case k == "REDIS_URL":
			v = redis.Addr
		case k == "CONFIG_GRPC_XDS_SERVER_URL":
			v = xds.Addr
		case k == "PROMETHEUS_ADDR":
			v = peertest.FreeAddr(t)
		}
		list = append(list, k+"="+v)
	}
	// Its addresses (Envoy Gateway leaves them at the peer's defaults,
	// 0.0.0.0:8081 and :8080), and no over-limit cache: the test empties
	// Redis between goldens, which a cache would not know.
	list = append(list, "GRPC_HOST=127.0.0.1", "GRPC_PORT="+port(grpcAddr), "HOST=127.0.0.1", "PORT="+port(httpAddr), "LOCAL_CACHE_SIZE_IN_BYTES=0")
	p := peertest.Start(t, peertest.AsRatelimit(t, binary), list)
	p.WaitListening(t, grpcAddr, 15*time.Second)
	// Envoy reaches it over TLS without a client certificate: Envoy
	// Gateway's GRPC_SERVER_TLS_CA_CERT is not read (by the peer either).
	c := rlClient(t, grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})))

	ask := func(domain string, hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: ds})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v\n%s", err, p.Output())
		}
		return r
	}
	var checked, shadows, shared, costs int
	domainsSeen := map[string]bool{}
	for gi, routesFile := range goldens {
		golden := strings.TrimSuffix(filepath.Base(routesFile), ".routes.yaml")
		configs, err := peertest.FromYAML(mustRead(t, strings.TrimSuffix(routesFile, ".routes.yaml")+".yaml"))
		if err != nil {
			t.Fatalf("%s: %v", golden, err)
		}
		version := fmt.Sprintf("%d-%s", gi, golden)
		xds.Push("envoy-ratelimit", version, configs...)
		xds.WaitAcked(version)
		if err := redis.Client().FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		// Costs first, on the limits that do not refill within the test,
		// then Redis emptied again for the routes.
		for _, cfg := range configs {
			for _, l := range leafLimits(cfg) {
				if l.limit.GetUnit() == rlsconfv3.RateLimitUnit_SECOND || l.limit.GetUnit() == rlsconfv3.RateLimitUnit_MINUTE || l.limit.GetRequestsPerUnit() < 3 || l.limit.GetUnlimited() || l.shadow {
					continue
				}
				es := append([]egEntry(nil), l.entries...)
				for i := range es {
					if es[i].value == "" {
						es[i].value, es[i].fromRequest = "cost-caller", true
					}
				}
				n := l.limit.GetRequestsPerUnit()
				before := ask(cfg.GetDomain(), 0, egDescriptor(es, wrapperspb.UInt64(0))) // cost.request: 0, a check
				ask(cfg.GetDomain(), 0, egDescriptor(es, wrapperspb.UInt64(2)))           // cost.response: 2, when the stream is done
				after := ask(cfg.GetDomain(), 0, egDescriptor(es, wrapperspb.UInt64(0)))
				if before.Statuses[0].LimitRemaining != n || after.Statuses[0].LimitRemaining != n-2 || after.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Errorf("%s: %s.%v: check, response cost 2, check: %d then %d left (%v), want %d then %d", golden, cfg.GetDomain(), es, before.Statuses[0].LimitRemaining, after.Statuses[0].LimitRemaining, after.OverallCode, n, n-2)
				}
				costs++
			}
		}
		if err := redis.Client().FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		byDomain := map[string]*rlsconfv3.RateLimitConfig{}
		for _, cfg := range configs {
			byDomain[cfg.GetDomain()] = cfg
		}
		seen := map[string]int{} // domain + entries → the route (document) that sent them first
		for ri, route := range readDocs[egRoute](t, routesFile) {
			for domain, rls := range route.RateLimitsByDomain {
				cfg := byDomain[domain]
				if cfg == nil {
					t.Errorf("%s: route %s names domain %s, which the push does not hold", golden, route.RouteName, domain)
					continue
				}
				domainsSeen[domain] = true
				var looks []*rlcommon.RateLimitDescriptor
				var wants []*rlsconfv3.RateLimitPolicy
				for _, rl := range rls {
					es := rl.entries(t, golden)
					want, shadow := impliedLimit(cfg, es)
					at := fmt.Sprintf("%s: route %s, domain %s, %v", golden, route.RouteName, domain, es)
					looks, wants = append(looks, egDescriptor(es, wrapperspb.UInt64(0))), append(wants, want)
					key := domain + fmt.Sprint(es)
					if first, again := seen[key]; again {
						// The rule is shared with an earlier route: one bucket, so
						// two of its descriptors in one request, each costing the
						// limit, are over it; separate buckets would allow both.
						if want != nil && !want.GetUnlimited() && first != ri {
							r := ask(domain, want.GetRequestsPerUnit(), egDescriptor(es, nil), egDescriptor(es, nil))
							if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT && !shadow {
								t.Errorf("%s: shared with route %d of the golden, yet two descriptors costing the limit each are allowed: %v", at, first, r)
							}
							shared++
						}
						continue
					}
					seen[key] = ri
					if want == nil || want.GetUnlimited() {
						r := ask(domain, 0, egDescriptor(es, nil))
						if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
							t.Errorf("%s: no limit implied (unlimited %v), answered %v", at, want.GetUnlimited(), r)
						}
						if want.GetUnlimited() && r.Statuses[0].LimitRemaining != math.MaxUint32 {
							t.Errorf("%s: unlimited, %d left", at, r.Statuses[0].LimitRemaining)
						}
						continue
					}
					n := want.GetRequestsPerUnit()
					if n < math.MaxUint32 {
						r := ask(domain, n+1, egDescriptor(es, nil))
						wantCode := rlsv3.RateLimitResponse_OVER_LIMIT
						if shadow {
							wantCode = rlsv3.RateLimitResponse_OK
							shadows++
						}
						if r.OverallCode != wantCode {
							t.Errorf("%s: a request costing %d on a limit of %d: %v, want %v", at, n+1, n, r, wantCode)
						}
					}
					r := ask(domain, n, egDescriptor(es, nil))
					lim := r.Statuses[0].GetCurrentLimit()
					if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 ||
						lim.GetRequestsPerUnit() != n || lim.GetUnit().String() != want.GetUnit().String() {
						t.Errorf("%s: a request costing the limit (%d/%s): %v, want OK with the limit and nothing left", at, n, want.GetUnit(), r)
					}
					checked++
				}
				// The route's descriptors together, as Envoy sends them, each
				// costing nothing: every status names its implied limit.
				if len(looks) > 0 {
					r := ask(domain, 0, looks...)
					for i, st := range r.Statuses {
						w := wants[i]
						if w.GetUnlimited() {
							w = nil
						}
						if st.GetCurrentLimit().GetRequestsPerUnit() != w.GetRequestsPerUnit() || (w != nil && st.GetCurrentLimit().GetUnit().String() != w.GetUnit().String()) {
							t.Errorf("%s: route %s: descriptor %d together with the others: %v, want the limit %v", golden, route.RouteName, i, st, w)
						}
					}
				}
			}
		}
	}
	if checked < 30 || shadows == 0 || shared == 0 || costs == 0 || len(domainsSeen) < 3 {
		t.Errorf("checked %d limits, %d in shadow mode, %d shared between routes, %d costs, %d domains: the goldens no longer exercise what this test is for", checked, shadows, shared, costs, len(domainsSeen))
	}
	t.Logf("%d goldens: %d limits answered as implied, %d in shadow mode, %d rules shared between routes, %d request/response costs, domains %v", len(goldens), checked, shadows, shared, costs, slices.Sorted(mapKeys(domainsSeen)))
	if code, body := peertest.Healthcheck(httpAddr); code != 200 || body != "OK" {
		t.Errorf("/healthcheck after the pushes: %d %q", code, body)
	}
	if _, page := httpGet(t, "http://"+httpAddr+"/debug/xds"); !strings.Contains(page, "accepted, 0 rejected") {
		t.Errorf("/debug/xds:\n%s", page)
	}
}

// leaf is a limit of a golden configuration and the entries that reach it.
type leaf struct {
	entries []egEntry
	limit   *rlsconfv3.RateLimitPolicy
	shadow  bool
}

func leafLimits(c *rlsconfv3.RateLimitConfig) []leaf {
	var out []leaf
	var walk func(ds []*rlsconfv3.RateLimitDescriptor, path []egEntry)
	walk = func(ds []*rlsconfv3.RateLimitDescriptor, path []egEntry) {
		for _, d := range ds {
			p := append(append([]egEntry(nil), path...), egEntry{key: d.GetKey(), value: d.GetValue()})
			if d.GetRateLimit() != nil {
				out = append(out, leaf{entries: p, limit: d.GetRateLimit(), shadow: d.GetShadowMode()})
			}
			walk(d.GetDescriptors(), p)
		}
	}
	walk(c.GetDescriptors(), nil)
	return out
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
