package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/redistest/netfault"
)

// validateConnect runs `floodgate validate --config F --connect` on cfg and
// returns its exit code and output.
func validateConnect(t *testing.T, cfg string) (int, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "validate", "--config", path, "--connect").CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatal(err)
	return 0, ""
}

func redisConfig(addresses, extra string) string {
	return fmt.Sprintf(`store:
  backend: redis
  redis: {addresses: [%s]%s}
policies:
  - name: api
    key: [client_ip]
    capacity: 10
    refill_per_second: 1
`, addresses, extra)
}

// TestValidateConnect: --connect dials the configured store, runs the
// script once, and says what is wrong with a store that cannot serve
// floodgate — each case against a real redis-server.
func TestValidateConnect(t *testing.T) {
	good := redistest.Start(t)
	other := redistest.Start(t)
	auth := redistest.StartWith(t, redistest.Config{Password: "s3cret"})
	dead := redistest.RefusedAddr(t)
	lru := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	ttl := redistest.Start(t, "--maxmemory-policy", "volatile-ttl")
	// A server whose answers take longer than the store timeout (50 ms):
	// what a loaded machine does to one now and then.
	slow, err := netfault.Start(good.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slow.Add(netfault.Latency{Dir: netfault.Downstream, Delay: 100 * time.Millisecond})
	pwFile := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pwFile, []byte("wrong\n"), 0o600)
	for _, tc := range []struct {
		name, cfg string
		code      int
		want      []string
	}{
		{"a working server", redisConfig(`"`+good.Addr+`"`, ""), 0,
			[]string{"answers, Redis >= 7.0", "the token-bucket script ran", "fg:_validate:{connect}", ": ok (1 policy, store redis)"}},
		{"a server slower to answer than the store timeout", redisConfig(`"`+slow.Addr()+`"`, ""), 0,
			[]string{"answers, Redis >= 7.0", "the token-bucket script ran", ": ok (1 policy, store redis)"}},
		{"a server that evicts any key when full", redisConfig(`"`+lru.Addr+`"`, ""), 0,
			[]string{"warning: redis " + lru.Addr + " has maxmemory-policy allkeys-lru (maxmemory is 67108864 bytes)", "set maxmemory-policy noeviction", ": ok (1 policy, store redis)"}},
		{"a server that evicts keys with an expiry, as every bucket has", redisConfig(`"`+ttl.Addr+`"`, ""), 0,
			[]string{"warning: redis " + ttl.Addr + " has maxmemory-policy volatile-ttl (no maxmemory is set yet", "set maxmemory-policy noeviction"}},
		{"a server that needs a password", redisConfig(`"`+auth.Addr+`"`, ""), 1,
			[]string{"NOAUTH", "fix: the Redis server requires a password: set store.redis.password_file or password_env"}},
		{"a wrong password", redisConfig(`"`+auth.Addr+`"`, ", password_file: "+pwFile), 1,
			[]string{"WRONGPASS", "fix: Redis refused the username or password"}},
		{"two standalone servers taken as a Cluster", redisConfig(`"`+good.Addr+`", "`+other.Addr+`"`, ""), 1,
			[]string{"cluster support disabled", "fix: several store.redis.addresses"}},
		{"nothing listening", redisConfig(`"`+dead+`"`, ""), 1,
			[]string{"cannot use the server", "is the server running", ": the file is valid (1 policy, store redis), but the store cannot be used"}},
		{"the memory store", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1\n", 0,
			[]string{"store: memory: nothing to connect to"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := validateConnect(t, tc.cfg)
			t.Logf("exit %d:\n%s", code, out)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			if evicts := strings.Contains(tc.name, "evicts"); evicts != strings.Contains(out, "maxmemory-policy") {
				t.Errorf("a warning about maxmemory-policy: %v, want %v", !evicts, evicts)
			}
			// "ok" is the verdict on the file and the store together: the
			// last line when both are usable, absent otherwise.
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if last := lines[len(lines)-1]; (tc.code == 0) != strings.Contains(last, ": ok (") || strings.Contains(strings.Join(lines[:len(lines)-1], "\n"), ": ok (") {
				t.Errorf("exit %d with %q as the last line: \"ok\" must be printed last, and only on success", code, last)
			}
		})
	}
}
