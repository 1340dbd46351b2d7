package replay

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/proxytest"
)

const httpDoorConfig = `store: {backend: memory}
listen: {http: "127.0.0.1:9193"}
client_ip: {trusted_hops: 0}
http_authz: {original_uri_header: X-Original-URI, original_method_header: X-Original-Method, trusted_hops: 1}
policies:
  - name: per-ip
    match: {path_prefix: /api/}
    key: [client_ip]
    capacity: 1
    refill_per_second: 1/3600
`

// nginxLines are what the printed log_format writes for four requests
// behind one trusted proxy, as nginx's escape=json writes them: two
// clients (198.51.100.1 twice, .2 twice), each list ending with the proxy
// nginx saw ($proxy_add_x_forwarded_for).
const nginxLines = `{"start_time":"2026-12-01T10:00:00+00:00","method":"GET","path":"/api/a?x=1","authority":"shop.example","downstream_remote_address":"10.0.0.9:40000","request_headers":{"x-forwarded-for":"198.51.100.1, 10.0.0.9"}}
{"start_time":"2026-12-01T10:00:01+00:00","method":"GET","path":"/api/a","authority":"shop.example","downstream_remote_address":"10.0.0.9:40001","request_headers":{"x-forwarded-for":"198.51.100.2, 10.0.0.9"}}
{"start_time":"2026-12-01T10:00:02+00:00","method":"GET","path":"/api/b","authority":"shop.example","downstream_remote_address":"10.0.0.9:40002","request_headers":{"x-forwarded-for":"198.51.100.1, 10.0.0.9"}}
{"start_time":"2026-12-01T10:00:03+00:00","method":"GET","path":"/api/b","authority":"shop.example","downstream_remote_address":"10.0.0.9:40003","request_headers":{"x-forwarded-for":"198.51.100.2, 10.0.0.9"}}
`

func replayDoor(t *testing.T, doorName string) *Result {
	t.Helper()
	dir := t.TempDir()
	cfgPath, logPath := filepath.Join(dir, "floodgate.yaml"), filepath.Join(dir, "nginx.log")
	os.WriteFile(cfgPath, []byte(httpDoorConfig), 0o600)
	os.WriteFile(logPath, []byte(nginxLines), 0o600)
	j := Job{ConfigPath: cfgPath, LogPath: logPath, Door: doorName, Top: 10}
	if err := j.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := doors.LoadOffline(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := j.Replay(context.Background(), cfg, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return runs[0].Result
}

// TestReplayDecidesAsTheHTTPDoor: with --door http a log of what nginx
// sends the door is read with the door's client address rule
// (http_authz.trusted_hops 1: each client its own bucket); read as Check
// reads it (client_ip.trusted_hops 0) every client would be the proxy.
func TestReplayDecidesAsTheHTTPDoor(t *testing.T) {
	r := replayDoor(t, "http")
	p := r.Policies[0]
	if r.Decided != 4 || p.Allowed != 2 || p.Denied != 2 || p.Callers != 2 {
		t.Errorf("--door http: %d decided, %d allowed, %d denied, %d callers; want 4, 2, 2 and 2 (one bucket per client)", r.Decided, p.Allowed, p.Denied, p.Callers)
	}
	if len(p.TopDenied) != 2 || !strings.HasPrefix(p.TopDenied[0].Caller, "client_ip 198.51.100.") {
		t.Errorf("top denied %+v, want the two clients", p.TopDenied)
	}
	r = replayDoor(t, "check")
	if p := r.Policies[0]; p.Allowed != 1 || p.Denied != 3 || p.Callers != 1 {
		t.Errorf("--door check: %d allowed, %d denied, %d callers; want everything from the proxy's one bucket", p.Allowed, p.Denied, p.Callers)
	}
	if err := (&Job{ConfigPath: "c", LogPath: "l", Door: "grpc"}).Validate(); err == nil || !strings.Contains(err.Error(), "--door") {
		t.Errorf("--door grpc: %v", err)
	}
}

// TestThePrintedNginxLogFormatIsOneNginxAccepts: the block, in an http
// block with the access_log in a server, passes `nginx -t`, and names the
// headers the policies read.
func TestThePrintedNginxLogFormatIsOneNginxAccepts(t *testing.T) {
	cfg, err := doors.Parse("door.yaml", []byte(httpDoorConfig+`  - name: per-key
    match: {path_prefix: /v1/}
    key: [header:x-api-key]
    capacity: 5
    refill_per_second: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := NginxLogFormat(cfg.Engine, "door.yaml", filepath.Join(dir, "replay.log"))
	for _, want := range []string{`"x-api-key":"$http_x_api_key"`, `"x-forwarded-for":"$proxy_add_x_forwarded_for"`, "credentials", "log_format floodgate_replay escape=json"} {
		if !strings.Contains(out, want) {
			t.Errorf("the block lacks %s:\n%s", want, out)
		}
	}
	format, access, _ := strings.Cut(out, "\naccess_log ")
	conf := "pid nginx.pid;\nerror_log error.log;\nevents {}\nhttp {\n" + format + "\n" +
		"  server {\n    listen 127.0.0.1:1;\n    access_log " + access + "  }\n}\n"
	path := filepath.Join(dir, "nginx.conf")
	os.WriteFile(path, []byte(conf), 0o600)
	bin := proxytest.Binary(t, "nginx", "nginx")
	if b, err := exec.Command(bin, "-t", "-p", dir+"/", "-c", path, "-e", filepath.Join(dir, "startup.log")).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t refuses the printed block: %v\n%s\n%s", err, b, conf)
	}
}
