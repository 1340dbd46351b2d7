package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/limiter/redistest"
)

const topConfig = `
listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
log: {level: debug} # the denials' log lines carry the identities the report must show
identity: {hash_secret_file: %q}
store:
  backend: redis
  redis: {addresses: ["%s"]}
policies:
  - name: keys
    match: {path_prefix: /v1/}
    key: [header:x-api-key, client_ip]
    capacity: 3
    refill_per_second: 1/3600
  - name: ips
    match: {path_prefix: /ip/}
    key: [client_ip]
    capacity: 2
    refill_per_second: 1/3600
  - name: trial
    match: {path_prefix: /shadow/}
    key: [client_ip]
    capacity: 1
    refill_per_second: 1/3600
    mode: shadow
`

// getLimited reads a replica's /debug/limited as JSON.
func getLimited(t *testing.T, p *proc) limited.Report {
	t.Helper()
	resp, err := http.Get("http://" + p.Admin + "/debug/limited")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/debug/limited: %s %s\n%s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	var rep limited.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatalf("/debug/limited: %v\n%s", err, body)
	}
	return rep
}

// deniedIdentities are the identities a replica's debug log gave its
// denials under policy.
func deniedIdentities(p *proc, policy string) map[string]bool {
	ids := map[string]bool{}
	for _, l := range strings.Split(p.Output(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "denied" && m["policy"] == policy {
			ids[m["identity"].(string)] = true
		}
	}
	return ids
}

// TestTopMergesTwoReplicasDenialsExactly drives real denials over gRPC
// into two floodgate processes sharing one Redis, then reads each one's
// /debug/limited and `floodgate top --once --json` over both: the counts
// add up exactly, API keys appear only as the hashed identities the logs
// carry, an IPv6 client as its /64, and the shadow policy apart.
func TestTopMergesTwoReplicasDenialsExactly(t *testing.T) {
	srv := redistest.Start(t)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("top-test-secret-0123456789abcdef"), 0o600)
	cfg := fmt.Sprintf(topConfig, secret, srv.Addr)
	a, b := startFloodgate(t, cfg), startFloodgate(t, cfg)

	for i := range 10 { // alpha alternates: 3 allowed, 7 denied between them
		[]*proc{a, b}[i%2].Check(t, request(t, "/v1/items", "192.0.2.10", "x-api-key: alpha-secret-key"))
	}
	for range 4 { // beta on b only: 3 allowed, 1 denied
		b.Check(t, request(t, "/v1/items", "192.0.2.10", "x-api-key: beta-secret-key"))
	}
	for i := range 5 { // one /64, two addresses: 2 allowed, 3 denied
		[]*proc{a, b}[i%2].Check(t, request(t, "/ip/x", fmt.Sprintf("2001:db8:1:2::%d", i+1)))
	}
	for range 3 { // shadow: 1 allowed, 2 would-be denials, none denied
		if resp := a.Check(t, request(t, "/shadow/x", "198.51.100.7")); !isAllowed(resp) {
			t.Fatal("a shadow policy denied")
		}
	}

	ids := map[string]bool{}
	for _, p := range []*proc{a, b} {
		for id := range deniedIdentities(p, "keys") {
			ids[id] = true
		}
	}
	got := topJSON(t, "--admin", a.Admin+","+b.Admin)
	if len(got.Policies) != 2 || len(got.Policies[0].Top) != 2 {
		t.Fatalf("floodgate top --json: %+v", got)
	}
	alpha, beta := got.Policies[0].Top[0].Caller, got.Policies[0].Top[1].Caller
	if !ids[alpha] || !ids[beta] || alpha == beta || len(alpha) != 22 {
		t.Fatalf("the API keys' callers %q and %q are not the hashed identities the logs gave their denials (%v)", alpha, beta, ids)
	}
	want := topReport{Replicas: []string{a.Admin, b.Admin}, Report: limited.Report{WindowSeconds: 60,
		Policies: []limited.PolicyReport{
			{Name: "keys", Denied: 8, Top: []limited.Caller{
				{Caller: alpha, Key: "header:x-api-key", Denied: 7, Allowed: 3},
				{Caller: beta, Key: "header:x-api-key", Denied: 1, Allowed: 3},
			}},
			{Name: "ips", Denied: 3, Top: []limited.Caller{{Caller: "2001:db8:1:2::/64", Key: "client_ip", Denied: 3, Allowed: 2}}},
		},
		Shadow: []limited.PolicyReport{
			{Name: "trial", Denied: 2, Top: []limited.Caller{{Caller: "198.51.100.7", Key: "client_ip", Denied: 2, Allowed: 1}}},
		},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("floodgate top --once --json:\n got %+v\nwant %+v", got, want)
	}

	// Each replica's own view holds its share, and the two add up to the
	// merged one.
	ra, rb := getLimited(t, a), getLimited(t, b)
	if ra.Policies[0].Denied == 0 || rb.Policies[0].Denied == 0 {
		t.Errorf("one replica saw none of the denials: %+v / %+v", ra, rb)
	}
	ra.Merge(rb)
	if !reflect.DeepEqual(ra, want.Report) {
		t.Errorf("the replicas' views add up to\n%+v\nwant %+v", ra, want.Report)
	}
	for _, raw := range []string{"alpha-secret-key", "beta-secret-key"} {
		if out := topText(t, "--admin", a.Admin+","+b.Admin, "--once"); strings.Contains(out, raw) {
			t.Errorf("the table shows the API key %s in the clear:\n%s", raw, out)
		}
	}

	// The table, as an operator reads it.
	table := topText(t, "--admin", a.Admin+","+b.Admin, "--once")
	wantTable := "floodgate top: the last 60 s, 2 replicas: " + a.Admin + ", " + b.Admin + `

POLICY / CALLER           KEY               DENIED  ALLOWED
keys                                        8
  ` + alpha + `  header:x-api-key  7       3
  ` + beta + `  header:x-api-key  1       3
ips                                         3
  2001:db8:1:2::/64       client_ip         3       2

SHADOW POLICY / CALLER  KEY        WOULD DENY  ALLOWED
trial                              2
  198.51.100.7          client_ip  2           1
`
	if table != wantTable {
		t.Errorf("floodgate top --once printed\n%s\nwant\n%s", table, wantTable)
	}

	// A replica that does not answer is named, and the exit status says
	// the view is partial.
	dead := freeAddr(t)
	cmd := exec.Command(binary, "top", "--admin", a.Admin+","+dead, "--once")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if code := exitCode(err); code != 1 || !strings.Contains(stderr.String(), "floodgate top: "+dead+": ") || !strings.Contains(string(out), "1 replica: "+a.Admin) {
		t.Errorf("with a dead replica: exit %d, stdout\n%s\nstderr %s", code, out, stderr.String())
	}
}

// TestLimitedPageIsHTMLForABrowser: a browser's Accept gets the HTML page,
// with the loopback admin port not flagged; the JSON link and the data are
// there.
func TestLimitedPageIsHTMLForABrowser(t *testing.T) {
	p := startFloodgate(t, "listen: {grpc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\npolicies:\n  - {name: tight, key: [client_ip], capacity: 1, refill_per_second: 1/3600}\n")
	for range 3 {
		p.Check(t, request(t, "/", "192.0.2.44"))
	}
	req, _ := http.NewRequest("GET", "http://"+p.Admin+"/debug/limited", nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	for _, want := range []string{"<code>tight</code>: 2 denied", "<td><code>192.0.2.44</code></td><td><code>client_ip</code></td><td class=\"n\">2</td><td class=\"n\">1</td>", `href="?format=json"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "not loopback-only") || strings.Contains(page, "<script") {
		t.Errorf("a loopback admin port's page warns, or has a script:\n%s", page)
	}
}

// topJSON runs floodgate top --once --json with args and decodes it.
func topJSON(t *testing.T, args ...string) topReport {
	t.Helper()
	out := topText(t, append(args, "--json")...)
	var rep topReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("floodgate top --json: %v\n%s", err, out)
	}
	return rep
}

// topText runs floodgate top with args, requiring success.
func topText(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"top"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("floodgate top %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
}

// TestTopAsksEveryAddressOfAHeadlessService: with --every-address, a name
// (a headless Service's) stands for each address it resolves to; an IP
// address, or a name without the flag, for itself.
func TestTopAsksEveryAddressOfAHeadlessService(t *testing.T) {
	lookup := func(_ context.Context, host string) ([]string, error) {
		if host == "floodgate-admin.floodgate" {
			return []string{"10.0.0.9", "10.0.0.7", "fd00::3"}, nil
		}
		return nil, errors.New("no such host")
	}
	urls, err := adminURLs("floodgate-admin.floodgate:9192, 10.0.0.1:9192,gone.floodgate:9192")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tg := range resolve(context.Background(), urls, true, lookup) {
		if tg.err != nil {
			got = append(got, "error: "+tg.err.Error())
		} else {
			got = append(got, tg.url)
		}
	}
	want := []string{
		"http://10.0.0.7:9192/debug/limited?format=json",
		"http://10.0.0.9:9192/debug/limited?format=json",
		"http://[fd00::3]:9192/debug/limited?format=json",
		"http://10.0.0.1:9192/debug/limited?format=json",
		"error: gone.floodgate resolves to no address: no such host",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if ts := resolve(context.Background(), urls[:1], false, lookup); len(ts) != 1 || ts[0].url != urls[0] {
		t.Errorf("without --every-address: %+v", ts)
	}
}

// TestTopRefusesWhatIsNotAnAdminAddress: a mistyped --admin is an error
// that says what is wanted, before anything is asked.
func TestTopRefusesWhatIsNotAnAdminAddress(t *testing.T) {
	for arg, want := range map[string]string{
		"9192":                 `floodgate top: --admin "9192": want HOST:PORT (the listen.admin address), as in 127.0.0.1:9192`,
		"ftp://host:1":         `floodgate top: --admin "ftp://host:1": want HOST:PORT or an http(s) URL`,
		" , ":                  `floodgate top: --admin needs at least one HOST:PORT`,
		"127.0.0.1:9192,host:": `floodgate top: --admin "host:": want HOST:PORT (the listen.admin address), as in 127.0.0.1:9192`,
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), []string{"top", "--once", "--admin", arg}, io.Discard, &stderr); code != 2 || strings.TrimSpace(stderr.String()) != want {
			t.Errorf("--admin %q: exit %d, %q; want 2, %q", arg, code, stderr.String(), want)
		}
	}
}
