package doors

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/check"
	"github.com/floodgate/floodgate/internal/door/httpauthz"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter/lease"
	"github.com/floodgate/floodgate/limiter/storetest"
)

const httpDoorFile = `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0"}
client_ip: {trusted_hops: 0}
http_authz:
  path_prefix: /authz
  trusted_hops: 1
policies:
  - name: per-ip
    key: [client_ip]
    capacity: 1
    refill_per_second: 1/60
`

func buildDoors(t *testing.T, yaml string) ([]door.Door, *door.Config) {
	t.Helper()
	c, err := Parse("http.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	st := &store.Stores{Main: storetest.Memory(nil)}
	st.Shadow = st.Main
	return Build(c, door.Env{Store: st, Log: zap.NewNop(), Registerer: prometheus.NewRegistry()}), c
}

// TestTheHTTPDoorIsAListenerDecidingCheckPolicies: with listen.http the
// door is on, a Listener at that address, reported under its own health
// name; it decides the policies with Check's server (one bucket per
// caller across the doors), reading the client address with its own
// trusted_hops.
func TestTheHTTPDoorIsAListenerDecidingCheckPolicies(t *testing.T) {
	doors, c := buildDoors(t, httpDoorFile)
	d, ok := find(doors, httpauthz.Name).(door.Listener)
	if !ok || d.Listen() != "127.0.0.1:0" || !d.On(c) || d.Handler() == nil || !slices.Equal(d.Services(), []string{httpauthz.HealthService}) {
		t.Fatalf("the HTTP door: %#v", find(doors, httpauthz.Name))
	}
	if got := Describe(c); !slices.Contains(got, "HTTP authorization on 127.0.0.1:0") {
		t.Errorf("Describe: %q", got)
	}
	if httpServer(doors).Engine().Policies[0] != checkServer(doors).Engine().Policies[0] {
		t.Error("the HTTP door's policies are not Check's")
	}
	ask := func(xff string) int {
		r := httptest.NewRequest(http.MethodGet, "/authz/x", nil)
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		d.Handler().ServeHTTP(w, r)
		return w.Code
	}
	// Envoy's own address last: trusted_hops 1 takes the client before it.
	if ask("198.51.100.1, 10.0.0.5") != 200 || ask("198.51.100.2, 10.0.0.5") != 200 || ask("198.51.100.1, 10.0.0.5") != 429 {
		t.Error("the door did not read the client one hop from the right")
	}
	resp, _ := checkServer(doors).Check(context.Background(), checkReq("198.51.100.2"))
	if resp.GetStatus().GetCode() == 0 {
		t.Error("Check of 198.51.100.2 after its HTTP request took its one token: allowed")
	}
	// A reload applies to the door: a new prefix.
	c2, err := Parse("http.yaml", []byte(strings.Replace(httpDoorFile, "path_prefix: /authz", "path_prefix: /check", 1)))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doors {
		d.Reload(c2)
	}
	if got := httpServer(doors).Engine(); got.Policies[0] != c2.Engine.Policies[0] {
		t.Error("the reload did not reach the HTTP door")
	}
}

// TestWithoutListenHTTPTheDoorIsOff: no listener, nothing built, health
// NOT_SERVING, and validate does not list it.
func TestWithoutListenHTTPTheDoorIsOff(t *testing.T) {
	doors, c := buildDoors(t, goodPolicy)
	d := find(doors, httpauthz.Name).(door.Listener)
	if d.Listen() != "" || d.On(c) || d.Handler() != nil || httpServer(doors) != nil {
		t.Errorf("off: listen %q on %v handler %v", d.Listen(), d.On(c), d.Handler())
	}
	for _, s := range Describe(c) {
		if strings.Contains(s, "HTTP") {
			t.Errorf("Describe lists %q", s)
		}
	}
}

func TestAnHTTPDoorNeedsPolicies(t *testing.T) {
	_, err := Parse("bad.yaml", []byte("listen:\n  http: 127.0.0.1:9193\nrls:\n  config: /etc/ratelimit\n"))
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:2: listen.http: the HTTP authorization door decides the policies, and none is listed") {
		t.Errorf("got %v", err)
	}
}

// checkReq is a Check of GET /x from source, with no X-Forwarded-For.
func checkReq(source string) *authv3.CheckRequest {
	return extauthztest.CheckRequest(source, map[string]string{":path": "/x"})
}

// checkServer is the ext_authz server the Check door of doors registers.
func checkServer(doors []door.Door) *extauthz.Server {
	var r registrar
	find(doors, check.Name).Register(&r)
	return r.impl.(*extauthz.Server)
}

// httpServer is the HTTP door's server among doors (nil when it is off).
func httpServer(doors []door.Door) *extauthz.HTTPServer {
	h, _ := find(doors, httpauthz.Name).(door.Listener).Handler().(*extauthz.HTTPServer)
	return h
}

// registrar keeps the implementation a door registers.
type registrar struct{ impl any }

func (r *registrar) RegisterService(_ *grpc.ServiceDesc, impl any) { r.impl = impl }

// find is the door named name among doors, nil when there is none.
func find(doors []door.Door, name string) door.Door {
	for _, d := range doors {
		if d.Name() == name {
			return d
		}
	}
	return nil
}

// TestTheHTTPDoorDecidesFromLeases: a policy with lease: auto is leased
// through the HTTP door as through Check (they share its requests): one
// caller's 50 requests all pass, most of them from a lease, and the
// bucket is charged for exactly what was admitted once the lease goes back.
func TestTheHTTPDoorDecidesFromLeases(t *testing.T) {
	c, err := Parse("http.yaml", []byte(`listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0"}
policies:
  - {name: global, key: [client_ip], capacity: 1000, refill_per_second: 1/3600, lease: auto}
`))
	if err != nil {
		t.Fatal(err)
	}
	base := storetest.Memory(nil)
	reg := prometheus.NewRegistry()
	leases := lease.New(base, lease.Options{Registerer: reg})
	ds := Build(c, door.Env{Store: &store.Stores{Main: leases, Shadow: base}, Log: zap.NewNop(), Registerer: prometheus.NewRegistry()})
	h := find(ds, httpauthz.Name).(door.Listener).Handler()
	for i := range 50 {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.Header.Set("X-Forwarded-For", "198.51.100.3")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "floodgate_lease_decisions_total" {
			served = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if served < 30 {
		t.Errorf("%v of 50 requests decided from a lease, want most", served)
	}
	leases.Close()
	// The bucket, read through a Check of the same caller: 1,000 less the
	// 50 admitted, less this one.
	resp, _ := checkServer(ds).Check(context.Background(), checkReq("198.51.100.3"))
	if resp.GetStatus().GetCode() != 0 {
		t.Fatalf("the Check after the HTTP requests was denied: %v", resp)
	}
	remaining := ""
	for _, h := range resp.GetOkResponse().GetResponseHeadersToAdd() {
		if h.GetHeader().GetKey() == "ratelimit-remaining" {
			remaining = h.GetHeader().GetValue()
		}
	}
	if remaining != "949" {
		t.Errorf("ratelimit-remaining %q after 51 requests of 1,000, want 949", remaining)
	}
}
