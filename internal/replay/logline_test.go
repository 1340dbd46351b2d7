package replay

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/doors"
)

// TestLinesBecomeTheRequestsEnvoyChecked replays two requests of one
// caller against a policy of capacity 1 for each kind of line Envoy's
// json_format access logger writes, and checks which caller the second one
// was denied as: the identity replay read from the line.
func TestLinesBecomeTheRequestsEnvoyChecked(t *testing.T) {
	const head = `{"start_time":"2026-11-30T12:00:0%d.250Z","method":"GET","path":"/api/items?page=2","authority":"Api.Example.com:443","downstream_remote_address":"ADDR"`
	for _, tc := range []struct {
		name, key, rest string
		match           string
		addr            string // downstream_remote_address, 10.0.0.7:40000 when ""
		caller          string // the denied caller, "" when none is denied
	}{
		{name: "a header, its name in any case", key: "header:x-api-key",
			rest: `,"request_headers":{"X-API-Key":" k1 "}}`, caller: "header:x-api-key k1"},
		{name: "a long API key is shown only in part", key: "header:x-api-key",
			rest: `,"request_headers":{"x-api-key":"sk_live_0123456789abcdefghij"}}`, caller: "header:x-api-key sk_live_0123…"},
		{name: "a null header is absent: the next source decides", key: "header:x-api-key, client_ip",
			rest: `,"request_headers":{"x-api-key":null,"x-forwarded-for":"203.0.113.9, 10.0.0.1"}}`, caller: "client_ip 203.0.113.9"},
		{name: "X-Forwarded-For too short for trusted_hops: the connection's address", key: "client_ip",
			rest: `,"request_headers":{"x-forwarded-for":"203.0.113.9"}}`, caller: "client_ip 10.0.0.7"},
		{name: "dynamic metadata as %DYNAMIC_METADATA(ns)% writes it", key: "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub",
			rest:   `,"metadata":{"envoy.filters.http.jwt_authn":{"jwt_payload":{"sub":"alice","exp":1796040000}}}}`,
			caller: "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub alice"},
		{name: "context_extensions", key: "context:tenant",
			rest: `,"context_extensions":{"tenant":"acme"}}`, caller: "context:tenant acme"},
		{name: "the host matched without port and case", key: "client_ip", match: `hosts: [api.example.com]`,
			rest: `}`, caller: "client_ip 10.0.0.7"},
		{name: "the path matched without its query", key: "client_ip", match: `path: /api/items`,
			rest: `}`, caller: "client_ip 10.0.0.7"},
		{name: "a header match on a header not logged does not fit", key: "client_ip", match: `headers: [{name: x-tier, value: gold}]`,
			rest: `}`, caller: ""},
		{name: "an IPv6 peer as %DOWNSTREAM_REMOTE_ADDRESS% writes it, bucketed by /64", key: "client_ip",
			addr: "[2001:db8::7]:40000", rest: `}`, caller: "client_ip 2001:db8::/64"},
		{name: "other keys are ignored", key: "client_ip",
			rest: `,"response_code":429,"upstream_host":null,"bytes":{"in":1}}`, caller: "client_ip 10.0.0.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			match := "{}"
			if tc.match != "" {
				match = "{" + tc.match + "}"
			}
			cfg, err := doors.Parse("t.yaml", []byte(`
client_ip: {trusted_hops: 1}
policies:
  - name: p
    match: `+match+`
    key: [`+tc.key+`]
    on_missing_key: skip
    capacity: 1
    refill_per_second: 1/3600
`))
			if err != nil {
				t.Fatal(err)
			}
			addr := tc.addr
			if addr == "" {
				addr = "10.0.0.7:40000"
			}
			h := strings.Replace(head, "ADDR", addr, 1)
			log := strings.Replace(h, "%d", "1", 1) + tc.rest + "\r\n" + strings.Replace(h, "%d", "2", 1) + tc.rest // CRLF, no final newline
			res, err := Run(context.Background(), strings.NewReader(log), Options{Workers: 2, MaxLineBytes: DefaultMaxLineBytes, Engine: cfg.Engine, MaxBuckets: cfg.Store.Memory.MaxBuckets, ReorderWindow: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			res.Report(ReportOptions{Top: 10})
			if res.Lines != 2 || res.Skipped != 0 {
				t.Fatalf("lines %d, skipped %d", res.Lines, res.Skipped)
			}
			p := res.Policies[0]
			got := ""
			if len(p.TopDenied) > 0 {
				got = p.TopDenied[0].Caller
			}
			if got != tc.caller {
				t.Errorf("denied caller %q, want %q (requests %d, denied %d)", got, tc.caller, p.Requests, p.Denied)
			}
		})
	}
}

// TestMalformedLinesAreCountedAndNamed checks that bad lines are skipped,
// counted and named on standard error, the first few only, and that a line
// past the length limit is one of them.
func TestMalformedLinesAreCountedAndNamed(t *testing.T) {
	cfg, err := doors.Parse("t.yaml", []byte("policies: [{name: p, key: [client_ip], capacity: 5, refill_per_second: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	good := `{"start_time":"2026-11-30T12:00:00Z","method":"GET","path":"/","downstream_remote_address":"10.0.0.7:1"}`
	lines := []string{good, "", "not json", `{"method":"GET"}`, `{"start_time":"2026-11-30T12:00:00Z"}`,
		`{"start_time":12,"method":"GET"}`, `{"start_time":"2026-11-30T12:00:00Z","method":"GET","context_extensions":[1]}`,
		`{"start_time":"2026-11-30T12:00:00Z","method":"GET","path":"/` + strings.Repeat("x", 2000) + `"}`, good}
	var stderr bytes.Buffer
	res, err := Run(context.Background(), strings.NewReader(strings.Join(lines, "\n")+"\n"),
		Options{Workers: 2, Engine: cfg.Engine, MaxBuckets: cfg.Store.Memory.MaxBuckets, Malformed: &stderr, ShowMalformed: 4, MaxLineBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Lines != 9 || res.Decided != 2 || res.Skipped != 7 {
		t.Errorf("lines %d, decided %d, skipped %d; want 9, 2, 7", res.Lines, res.Decided, res.Skipped)
	}
	want := []string{"line 3: not JSON: ", // then the parser's own words
		"line 4: start_time is missing (Envoy's \"%START_TIME%\")",
		"line 5: method is missing (Envoy's \"%REQ(:METHOD)%\")",
		"line 6: start_time is not a string: log Envoy's \"%START_TIME%\", an RFC 3339 time such as 2026-11-30T12:00:01.250Z"}
	got := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("stderr names %d lines, want the first %d:\n%s", len(got), len(want), stderr.String())
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) || (i > 0 && got[i] != want[i]) {
			t.Errorf("stderr line %d: %s\nwant: %s", i+1, got[i], want[i])
		}
	}
}

// TestRunRefusesNoBucketCap: MaxBuckets is taken as given (a
// configuration's store.memory.max_buckets, filled in by config when the
// file leaves it out); below 1 it is refused, not replaced by a default.
func TestRunRefusesNoBucketCap(t *testing.T) {
	cfg, err := doors.Parse("t.yaml", []byte("policies: [{name: p, key: [client_ip], capacity: 5, refill_per_second: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store.Memory.MaxBuckets != config.DefaultMaxBuckets {
		t.Errorf("max_buckets left out is %d, want config's default %d", cfg.Store.Memory.MaxBuckets, config.DefaultMaxBuckets)
	}
	for _, n := range []int{0, -1} {
		_, err := Run(context.Background(), strings.NewReader(""), Options{Workers: 2, MaxLineBytes: DefaultMaxLineBytes, Engine: cfg.Engine, MaxBuckets: n})
		if want := fmt.Sprintf("replay: MaxBuckets must be at least 1 (got %d)", n); err == nil || err.Error() != want {
			t.Errorf("MaxBuckets %d: %v, want %q", n, err, want)
		}
	}
	// The other settings are taken as given too: nothing turns a zero into a default.
	ok := Options{Engine: cfg.Engine, MaxBuckets: 10, Workers: 1, MaxLineBytes: 1}
	for _, tc := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Workers = 0 }, "replay: Workers must be at least 1 (got 0)"},
		{func(o *Options) { o.MaxLineBytes = 0 }, "replay: MaxLineBytes must be at least 1 (got 0)"},
		{func(o *Options) { o.ShowMalformed = -1 }, "replay: ShowMalformed must not be negative (got -1)"},
		{func(o *Options) { o.ReorderWindow = -time.Second }, "replay: ReorderWindow must not be negative (got -1s)"},
	} {
		o := ok
		tc.edit(&o)
		if _, err := Run(context.Background(), strings.NewReader(""), o); err == nil || err.Error() != tc.want {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
	if _, err := Run(context.Background(), strings.NewReader(""), ok); err != nil {
		t.Errorf("the smallest plain values: %v", err)
	}
}
