package extauthz

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var perKeyPolicy = PolicySpec{Name: "per-key", Match: MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key", "client_ip"}, Capacity: 5, RefillPerSecond: "1/60"}

// repeatedKey is a request of the attack: the API key the upstream
// authenticates (fixed) beside a value rotated per request, fixed first or
// last, in one of Envoy's two header modes.
type repeatedKey struct {
	raw        bool // header_map (encode_raw_headers) rather than headers
	fixedFirst bool
}

func (m repeatedKey) String() string {
	return fmt.Sprintf("raw=%v/fixed-first=%v", m.raw, m.fixedFirst)
}

// request builds the i-th request. Envoy's headers map joins a repeated
// header's values with "," and no space ("Merge duplicate headers" in
// CheckRequestUtils::setRequestHeaders,
// source/extensions/filters/common/ext_authz/check_request_utils.cc); with
// encode_raw_headers each line is its own header_map entry
// (headerMapAddHeader, same file).
func (m repeatedKey) request(i int) *authv3.CheckRequest {
	vals := []string{"dupkey", "r" + strconv.Itoa(i)}
	if !m.fixedFirst {
		vals[0], vals[1] = vals[1], vals[0]
	}
	if !m.raw {
		return checkRequest("198.51.100.7", map[string]string{":path": "/v1/x", "x-api-key": vals[0] + "," + vals[1]})
	}
	req := checkRequest("198.51.100.7", map[string]string{":path": "/v1/x"})
	h := req.Attributes.Request.Http
	var raw []*corev3.HeaderValue
	for k, v := range h.Headers {
		raw = append(raw, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	for _, v := range vals {
		raw = append(raw, &corev3.HeaderValue{Key: "x-api-key", RawValue: []byte(v)})
	}
	h.Headers, h.HeaderMap = nil, &corev3.HeaderMap{Headers: raw}
	return req
}

// TestARepeatedIdentityHeaderMintsNoBuckets: a client sending its key
// header twice, one copy the key its upstream authenticates and the other
// rotated per request, in either order and either header mode, draws every
// such request from one bucket of the policy: it is limited after the
// policy's capacity, as one caller is, and the key's own bucket is
// untouched.
func TestARepeatedIdentityHeaderMintsNoBuckets(t *testing.T) {
	for _, m := range []repeatedKey{{false, true}, {false, false}, {true, true}, {true, false}} {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, []PolicySpec{perKeyPolicy}, Options{}, nil, ServerOptions{})
			for i := range 8 {
				resp := r.check(t, m.request(i))
				want := i < 5
				if allowed(resp) != want {
					t.Fatalf("request %d with a rotated second key: allowed %v, want %v (remaining %s)", i, allowed(resp), want, headerOf(resp, HeaderRemaining))
				}
				if want && headerOf(resp, HeaderRemaining) != strconv.Itoa(4-i) {
					t.Fatalf("request %d: remaining %s, want %d: each repeated request must draw from one bucket", i, headerOf(resp, HeaderRemaining), 4-i)
				}
			}
			resp := r.check(t, checkRequest("198.51.100.7", map[string]string{":path": "/v1/x", "x-api-key": "dupkey"}))
			if !allowed(resp) || headerOf(resp, HeaderRemaining) != "4" {
				t.Errorf("dupkey alone after the repeated requests: allowed %v remaining %s, want its own full bucket", allowed(resp), headerOf(resp, HeaderRemaining))
			}
		})
	}
}

// TestARepeatedIdentityHeaderLineMintsNoBucketsAtTheHTTPDoor: the same on
// the HTTP door, where the header arrives as two lines (net/http keeps
// both; View.Header joins them as Envoy does).
func TestARepeatedIdentityHeaderLineMintsNoBucketsAtTheHTTPDoor(t *testing.T) {
	for _, fixedFirst := range []bool{true, false} {
		t.Run("fixed-first="+strconv.FormatBool(fixedFirst), func(t *testing.T) {
			r := newHTTPRig(t, []PolicySpec{perKeyPolicy}, Options{}, 0, ServerOptions{}, HTTPOptions{}, nil)
			for i := range 8 {
				a, b := "dupkey", "r"+strconv.Itoa(i)
				if !fixedFirst {
					a, b = b, a
				}
				got := r.ask(t, http.MethodGet, "/v1/x", "api.example.com", "X-Api-Key", a, "X-Api-Key", b)
				if want := map[bool]int{true: 200, false: 429}[i < 5]; got.status != want {
					t.Fatalf("request %d: %d (remaining %s), want %d", i, got.status, got.header.Get("Ratelimit-Remaining"), want)
				}
			}
			if got := r.ask(t, http.MethodGet, "/v1/x", "api.example.com", "X-Api-Key", "dupkey"); got.status != 200 || got.header.Get("Ratelimit-Remaining") != "4" {
				t.Errorf("dupkey alone: %d remaining %s, want its own full bucket", got.status, got.header.Get("Ratelimit-Remaining"))
			}
		})
	}
}

// TestTheRepeatedBucketIsNamedByItsSource: the shared bucket of repeated
// headers is named for the operator by its source, never a value.
func TestTheRepeatedBucketIsNamedByItsSource(t *testing.T) {
	eng, err := Compile([]PolicySpec{perKeyPolicy}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := NewView(repeatedKey{}.request(1))
	var p Plan
	eng.Plan(v, &p)
	if len(p.Buckets) != 1 || p.Buckets[0].Request.ID != "+header:x-api-key" {
		t.Fatalf("plan %+v, want the repeated bucket +header:x-api-key", p.Buckets)
	}
	if src, val := eng.Caller(p.Policies[0], v); src != "header:x-api-key" || val != "+header:x-api-key" {
		t.Errorf("Caller = %q %q, want the source and the repeated bucket, no value", src, val)
	}
}

func TestRepeatedKeysAreCounted(t *testing.T) {
	r := newRig(t, []PolicySpec{perKeyPolicy}, Options{}, nil, ServerOptions{})
	for i := range 3 {
		r.check(t, repeatedKey{raw: true}.request(i))
	}
	r.check(t, checkRequest("198.51.100.7", map[string]string{":path": "/v1/x", "x-api-key": "dupkey"}))
	if n := testutil.ToFloat64(r.server.Metrics().IdentityRepeated.WithLabelValues("per-key")); n != 3 {
		t.Errorf("floodgate_identity_repeated_total = %v, want 3", n)
	}
}
