package main

import (
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/peertest"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// composeService is the ratelimit service of one of envoyproxy/ratelimit's
// docker-compose files.
type composeService struct {
	Environment []string `yaml:"environment"`
	Volumes     []string `yaml:"volumes"`
	Command     string   `yaml:"command"`
}

// composeEnv reads the ratelimit service of a compose file in
// envoyproxy/ratelimit's module and returns its environment and its
// volumes' host → container paths, the host paths in the module.
func composeEnv(t *testing.T, mod, file string) (env map[string]string, volumes map[string]string) {
	t.Helper()
	var c struct {
		Services map[string]yaml.Node `yaml:"services"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(mod, file)), &c); err != nil {
		t.Fatal(err)
	}
	n, ok := c.Services["ratelimit"]
	var svc composeService
	if ok {
		if err := n.Decode(&svc); err != nil {
			t.Fatalf("%s: service ratelimit: %v", file, err)
		}
	}
	if !ok || svc.Command != "/bin/ratelimit" {
		t.Fatalf("%s: service ratelimit %+v, want one running /bin/ratelimit", file, svc)
	}
	// Compose's interpolation, with none of the variables set: ${X:-d} is d.
	interp := regexp.MustCompile(`\$\{[A-Z_]+:-([^}]*)\}`)
	env = map[string]string{}
	for _, kv := range svc.Environment {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = interp.ReplaceAllString(v, "$1")
	}
	volumes = map[string]string{}
	for _, v := range svc.Volumes {
		host, container, _ := strings.Cut(v, ":")
		volumes[filepath.Join(mod, host)] = container
	}
	return env, volumes
}

// bindMount lays host's tree out under root+container as a bind mount
// shows it: directories made, each file a link to the module's.
func bindMount(t *testing.T, root, host, container string) {
	t.Helper()
	err := filepath.WalkDir(host, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(host, p)
		at := filepath.Join(root, container, rel)
		if d.IsDir() {
			return os.MkdirAll(at, 0o755)
		}
		return os.Symlink(p, at)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// closedAddr is a loopback address nothing listens on: where the compose
// network's other services (statsd, memcached, the xDS server) are, for
// the variables that name them.
func closedAddr(t *testing.T) string { return peertest.FreeAddr(t) }

// TestThePeersDockerComposeRunsWithOnlyTheImageChanged runs the ratelimit
// service of envoyproxy/ratelimit's own docker-compose.yml and
// docker-compose-example.yml (read from its module at test time: their
// environment, and their volumes laid out as bind mounts of the module's
// examples directory) twice: as envoyproxy/ratelimit (built from the
// module) and as Floodgate's image would run it, /bin/ratelimit with the
// same environment. Only the addresses differ: the compose network's
// hosts are loopback addresses (redis the test's redis-server), and each
// listens on ports of its own. Both answer the same sequences of requests
// on the example's limits (examples/ratelimit/config) with the same codes
// and limit_remaining within one minute: the differential test's method
// (internal/door/ratelimit/rls), on the configuration users start from.
func TestThePeersDockerComposeRunsWithOnlyTheImageChanged(t *testing.T) {
	mod := peertest.Module(t, peertest.Ratelimit)
	peerBin := peertest.RatelimitBinary(t)
	for _, file := range []string{"docker-compose.yml", "docker-compose-example.yml"} {
		t.Run(file, func(t *testing.T) {
			redis := redistest.Start(t) // each file's own: the limits' keys are the same
			env, volumes := composeEnv(t, mod, file)
			root := t.TempDir()
			for host, container := range volumes {
				bindMount(t, root, host, container)
			}
			type server struct {
				name      string
				grpc, web string
				p         *peertest.Process
				c         rlsv3.RateLimitServiceClient
			}
			var servers []*server
			for _, s := range []struct{ name, bin string }{{"envoyproxy/ratelimit", peerBin}, {"floodgate", peertest.AsRatelimit(t, binary)}} {
				sv := &server{name: s.name, grpc: peertest.FreeAddr(t), web: peertest.FreeAddr(t)}
				var list []string
				for k, v := range env {
					switch k {
					case "REDIS_URL":
						v = redis.Addr
					case "RUNTIME_ROOT":
						v = filepath.Join(root, v)
					case "STATSD_HOST":
						v = "127.0.0.1"
					case "STATSD_PORT":
						_, v, _ = net.SplitHostPort(closedAddr(t))
					case "MEMCACHE_HOST_PORT", "CONFIG_GRPC_XDS_SERVER_URL":
						v = closedAddr(t)
					}
					list = append(list, k+"="+v)
				}
				list = append(list, "GRPC_HOST=127.0.0.1", "GRPC_PORT="+port(sv.grpc), "HOST=127.0.0.1", "PORT="+port(sv.web),
					"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port(peertest.FreeAddr(t)))
				sv.p = peertest.Start(t, s.bin, list)
				servers = append(servers, sv)
			}
			for _, sv := range servers {
				sv.p.WaitListening(t, sv.grpc, 30*time.Second)
				sv.p.WaitListening(t, sv.web, 30*time.Second)
				sv.c = rlClient(t, sv.grpc)
				if code, body := peertest.WaitHealthy(sv.web, 10*time.Second); code != 200 || body != "OK" {
					t.Errorf("%s: /healthcheck %d %q", sv.name, code, body)
				}
			}
			// The example's limits are per minute: keep the sequences within
			// one of the peer's fixed windows.
			if s := time.Now().Second(); s > 40 {
				time.Sleep(time.Duration(61-s) * time.Second)
			}
			d := func(pairs ...string) *rlcommon.RateLimitDescriptor {
				x := &rlcommon.RateLimitDescriptor{}
				for i := 0; i+1 < len(pairs); i += 2 {
					x.Entries = append(x.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: pairs[i], Value: pairs[i+1]})
				}
				return x
			}
			tag := strings.TrimSuffix(file, ".yml")
			sequences := []struct {
				name  string
				n     int
				descs []*rlcommon.RateLimitDescriptor
			}{
				{"4 a minute, replacing two names", 5, []*rlcommon.RateLimitDescriptor{d("category", "account")}},
				{"nested, 1 a minute", 2, []*rlcommon.RateLimitDescriptor{d("source_cluster", "proxy", "destination_cluster", "mock")}},
				{"key only", 3, []*rlcommon.RateLimitDescriptor{d("foo", tag+"1")}},
				{"nested key only", 4, []*rlcommon.RateLimitDescriptor{d("foo", tag+"2", "bar", "b")}},
				{"named", 2, []*rlcommon.RateLimitDescriptor{d("foo", tag+"3", "bar", "bkthomps")}},
				{"a named limit replaced", 3, []*rlcommon.RateLimitDescriptor{d("source_cluster", "proxy", "destination_cluster", "bkthomps"), d("foo", tag+"4", "bar", "bkthomps")}},
				{"0 a minute", 1, []*rlcommon.RateLimitDescriptor{d("foo", tag+"5", "bar", "banned")}},
				{"0 a minute, replaced", 3, []*rlcommon.RateLimitDescriptor{d("source_cluster", "proxy", "destination_cluster", "override"), d("foo", tag+"6", "bar", "banned")}},
				{"shadow mode", 4, []*rlcommon.RateLimitDescriptor{d("foo", tag+"7", "baz", "shady")}},
				{"exact value beside a shadow one", 4, []*rlcommon.RateLimitDescriptor{d("foo", tag+"8", "baz", "not-so-shady")}},
				{"unlimited", 2, []*rlcommon.RateLimitDescriptor{d("foo", tag+"9", "bay", "z"), d("qux", "q")}},
				{"detailed metric", 3, []*rlcommon.RateLimitDescriptor{d("unspec", tag)}},
				{"replaced by a limit of another descriptor", 3, []*rlcommon.RateLimitDescriptor{d("category", "account"), d("source_cluster", "proxy", "destination_cluster", "fake")}},
				{"no limit", 1, []*rlcommon.RateLimitDescriptor{d("nothing", "x"), d("foo", tag+"10", "bar", "b", "extra", "e")}},
			}
			compared, over := 0, 0
			var first []string
			for _, seq := range sequences {
				for i := 1; i <= seq.n; i++ {
					var got []string
					for _, sv := range servers {
						ctx, cancel := contextWithTimeout()
						r, err := sv.c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: seq.descs})
						cancel()
						got = append(got, rlAnswer(r, err))
					}
					if got[0] != got[1] {
						t.Errorf("%s, request %d: envoyproxy/ratelimit %s, Floodgate %s", seq.name, i, got[0], got[1])
					}
					if got[1] == "error" {
						t.Errorf("%s, request %d: an RPC error", seq.name, i)
					}
					if strings.HasPrefix(got[1], "OVER_LIMIT") {
						over++
					}
					if seq.name == sequences[0].name {
						first = append(first, got[1])
					}
					compared++
				}
			}
			// The first sequence, as the example's limit says: 4 a minute.
			if want := "OK [OK 4/MINUTE left 3] | OK [OK 4/MINUTE left 2] | OK [OK 4/MINUTE left 1] | OK [OK 4/MINUTE left 0] | OVER_LIMIT [OVER_LIMIT 4/MINUTE left 0]"; strings.Join(first, " | ") != want {
				t.Errorf("4 a minute: %s\nwant        %s", strings.Join(first, " | "), want)
			}
			if compared < 40 || over < 8 {
				t.Errorf("%d requests compared, %d over the limit: the sequences test too little", compared, over)
			}
			if t.Failed() {
				for _, sv := range servers {
					t.Logf("%s:\n%s", sv.name, sv.p.Output())
				}
			}
		})
	}
}

func contextWithTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}
