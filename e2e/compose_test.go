package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/limiter"
)

// The container run: e2e/docker-compose.yaml, e2e/run.sh and cmd/floodgate/Dockerfile. No
// container engine here, so these tests hold the files to what they mount, publish and expect.

const (
	composePath    = "docker-compose.yaml"
	runScript      = "run.sh"
	dockerfilePath = "../cmd/floodgate/Dockerfile"
	configInImage  = "/etc/floodgate/floodgate.yaml"
	envoyConfigIn  = "/etc/envoy/envoy.yaml"
	redisPort      = "6379"
)

// compose is the subset of the Compose specification this file uses; decoding is strict, so a
// key outside it (a typo, or a feature the checks below do not cover) fails the test.
type compose struct {
	Name     string                     `json:"name"`
	Services map[string]*composeService `json:"services"`
}

type composeService struct {
	Image       string                      `json:"image"`
	Build       *composeBuild               `json:"build"`
	Command     []string                    `json:"command"`
	Volumes     []string                    `json:"volumes"`
	Environment map[string]string           `json:"environment"`
	WorkingDir  string                      `json:"working_dir"`
	Ports       []string                    `json:"ports"`
	DependsOn   map[string]composeDependsOn `json:"depends_on"`
	Healthcheck *composeHealthcheck         `json:"healthcheck"`
	ReadOnly    bool                        `json:"read_only"`
	Profiles    []string                    `json:"profiles"`
	Deploy      *struct {
		Replicas int `json:"replicas"`
	} `json:"deploy"`
}

type composeBuild struct {
	Context    string `json:"context"`
	Dockerfile string `json:"dockerfile"`
}

type composeDependsOn struct {
	Condition string `json:"condition"`
}

type composeHealthcheck struct {
	Test     []string `json:"test"`
	Interval string   `json:"interval"`
	Timeout  string   `json:"timeout"`
	Retries  int      `json:"retries"`
}

func loadCompose(t *testing.T, data []byte) *compose {
	t.Helper()
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		t.Fatalf("%s: %v", composePath, err)
	}
	c := &compose{}
	if err := floodgatetest.StrictJSON(js, c); err != nil {
		t.Fatalf("%s: %v", composePath, err)
	}
	return c
}

// mount returns the host path (relative to e2e/) mounted at target, or "".
func (s *composeService) mount(target string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0]
		}
	}
	return ""
}

// published maps container port → host binding ("127.0.0.1:10000") of a service.
func (s *composeService) published(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		if len(parts) != 3 {
			t.Fatalf("port %q: want HOST_IP:HOST_PORT:CONTAINER_PORT (publish on loopback only)", p)
		}
		out[parts[2]] = parts[0] + ":" + parts[1]
	}
	return out
}

// pinned reports whether image names an exact release: a tag of dotted numbers (optionally v and
// a -variant), never latest or a moving major/minor tag.
var pinnedTag = regexp.MustCompile(`^[a-z0-9][a-z0-9./-]*:v?\d+\.\d+\.\d+(-[a-z0-9]+)?$`)

func loadEnvoy(t *testing.T, path string) *bootstrapv3.Bootstrap {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, bs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return bs
}

// composeProblems lists what is wrong with a compose file; the test runs it on the shipped file
// (want none) and on broken copies (want the break reported).
func composeProblems(t *testing.T, c *compose) []string {
	t.Helper()
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	want := []string{"echo", "envoy", "envoy-jwt", "envoy-rls", "floodgate", "floodgate-jwt", "floodgate-rls", "redis"}
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		bad("services %v, want %v", names, want)
	}

	for name, s := range c.Services {
		// Each image is either built here or pinned to an exact release.
		switch {
		case s.Build != nil && s.Image != "":
			bad("%s: both build and image", name)
		case s.Build != nil:
			ctx := filepath.Join(".", s.Build.Context)
			if st, err := os.Stat(ctx); err != nil || !st.IsDir() {
				bad("%s: build context %s is not a directory", name, s.Build.Context)
			}
			if _, err := os.Stat(filepath.Join(ctx, s.Build.Dockerfile)); err != nil {
				bad("%s: dockerfile %s not found in context %s", name, s.Build.Dockerfile, s.Build.Context)
			}
			if filepath.Clean(filepath.Join(ctx, s.Build.Dockerfile)) != filepath.Clean(dockerfilePath) {
				bad("%s: builds %s, want %s", name, s.Build.Dockerfile, dockerfilePath)
			}
		case !pinnedTag.MatchString(s.Image) || strings.Contains(s.Image, "latest"):
			bad("%s: image %q is not pinned to an exact release tag", name, s.Image)
		}
		// Every mounted host file exists.
		for _, v := range s.Volumes {
			src := strings.Split(v, ":")[0]
			if _, err := os.Stat(src); err != nil {
				bad("%s: mounts %s, which does not exist", name, src)
			}
			if !strings.HasSuffix(v, ":ro") {
				bad("%s: mount %s should be read-only (:ro)", name, v)
			}
		}
		// Published ports stay on the loopback interface.
		for _, port := range s.Ports {
			if !strings.HasPrefix(port, "127.0.0.1:") {
				bad("%s: publishes %s beyond loopback", name, port)
			}
		}
		for dep := range s.DependsOn {
			if c.Services[dep] == nil {
				bad("%s depends on unknown service %s", name, dep)
			}
		}
	}
	if p != nil {
		return p
	}

	// Redis: version 7 (Floodgate needs >= 7.0), healthy before Floodgate starts.
	redis := c.Services["redis"]
	if !strings.HasPrefix(redis.Image, "redis:7.") {
		bad("redis image %s: Floodgate needs Redis 7", redis.Image)
	}
	if redis.Healthcheck == nil || !slices.Contains(redis.Healthcheck.Test, "ping") {
		bad("redis needs a healthcheck (redis-cli ping) for depends_on: service_healthy")
	}
	if slices.Contains(redis.Command, "--port") {
		bad("redis must listen on its default port %s", redisPort)
	}

	// Floodgate services: the image's config path is mounted, Redis is the compose service.
	floodgateConfigs := map[string]*door.Config{}
	for _, name := range []string{"floodgate", "floodgate-jwt", "floodgate-rls"} {
		s := c.Services[name]
		if s.Build == nil {
			bad("%s must be built from the Dockerfile", name)
		}
		src := s.mount(configInImage)
		if src == "" {
			bad("%s does not mount a configuration at %s (the image's --config)", name, configInImage)
			continue
		}
		cfg, err := loadInContainer(s, src)
		if err != nil {
			bad("%s: %s: %v", name, src, err)
			continue
		}
		floodgateConfigs[name] = cfg
		// The hash secret: required by compose (${VAR:?...}), so every replica gets the one run.sh made.
		if env := cfg.Identity.HashSecretEnv; env == "" {
			bad("%s: %s sets no identity.hash_secret_env: identities would be hashed with the public default", name, src)
		} else if !strings.HasPrefix(s.Environment[env], "${"+env+":?") {
			bad("%s: environment %s must be ${%s:?...} (required, from run.sh), got %q", name, env, env, s.Environment[env])
		}
		if dep, ok := s.DependsOn["redis"]; !ok || dep.Condition != "service_healthy" {
			bad("%s must depend on redis being service_healthy", name)
		}
		if cfg.Store.Backend != "redis" || len(cfg.Store.Redis.Addresses) != 1 || cfg.Store.Redis.Addresses[0] != "redis:"+redisPort {
			bad("%s: %s: store must be redis at redis:%s (the compose service), got %s %v", name, src, redisPort, cfg.Store.Backend, cfg.Store.Redis.Addresses)
		}
		if host, _, _ := net.SplitHostPort(cfg.Listen.GRPC); host != "0.0.0.0" && host != "::" && host != "" {
			bad("%s: listen.grpc %s must listen on all interfaces inside the container", name, cfg.Listen.GRPC)
		}
		if !s.ReadOnly {
			bad("%s: run with a read-only root filesystem (read_only: true)", name)
		}
	}

	// Echo: the port its -listen flag names.
	echoPort := ""
	for _, a := range c.Services["echo"].Command {
		if v, ok := strings.CutPrefix(a, "-listen=:"); ok {
			echoPort = v
		}
	}
	if echoPort == "" {
		bad("echo: no -listen=:PORT argument")
	}

	// The rate limit service's Floodgate serves it: rls.config names limits it finds in the container.
	if cfg := floodgateConfigs["floodgate-rls"]; cfg != nil && cfg.Part(ratelimit.Name) == nil { // rls.config unset: no limits read
		bad("floodgate-rls: %s sets no rls.config: Envoy's rate limit filter would find no rate limit service", c.Services["floodgate-rls"].mount(configInImage))
	}

	// Envoy services: the bootstrap is mounted where the command reads it; its listener and admin
	// are published; every cluster points at a compose service on the port that service serves.
	for _, name := range []string{"envoy", "envoy-jwt", "envoy-rls"} {
		s := c.Services[name]
		if !strings.Contains(strings.Join(s.Command, " "), "-c "+envoyConfigIn) {
			bad("%s: command %v does not load %s", name, s.Command, envoyConfigIn)
		}
		if tag := s.Image[strings.LastIndex(s.Image, ":")+1:]; !strings.HasPrefix(s.Image, "envoyproxy/envoy:v") || !envoyAtLeast(tag, 1, 30) {
			bad("%s: image %s: encode_raw_headers needs Envoy >= 1.30", name, s.Image)
		}
		src := s.mount(envoyConfigIn)
		if src == "" {
			bad("%s does not mount %s", name, envoyConfigIn)
			continue
		}
		bs := loadEnvoy(t, src)
		pub := s.published(t)
		for _, l := range bs.GetStaticResources().GetListeners() {
			port := strconv.Itoa(int(l.GetAddress().GetSocketAddress().GetPortValue()))
			if _, ok := pub[port]; !ok {
				bad("%s: listener port %s is not published (ports %v)", name, port, s.Ports)
			}
		}
		if port := strconv.Itoa(int(bs.GetAdmin().GetAddress().GetSocketAddress().GetPortValue())); pub[port] != "127.0.0.1:"+port {
			bad("%s: admin port %s must be published on 127.0.0.1 only", name, port)
		}
		for _, cl := range bs.GetStaticResources().GetClusters() {
			for _, lle := range cl.GetLoadAssignment().GetEndpoints() {
				for _, e := range lle.GetLbEndpoints() {
					sa := e.GetEndpoint().GetAddress().GetSocketAddress()
					host, port := sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))
					if _, ok := c.Services[host]; !ok {
						bad("%s: cluster %s points at %s, which is no compose service", name, cl.GetName(), host)
						continue
					}
					if _, ok := s.DependsOn[host]; !ok {
						bad("%s: cluster %s needs service %s: add it to depends_on", name, cl.GetName(), host)
					}
					wantPort := ""
					if cfg, ok := floodgateConfigs[host]; ok {
						_, wantPort, _ = net.SplitHostPort(cfg.Listen.GRPC)
					} else if host == "echo" {
						wantPort = echoPort
					}
					if port != wantPort {
						bad("%s: cluster %s points at %s:%s, but %s serves on port %q", name, cl.GetName(), host, port, host, wantPort)
					}
				}
			}
		}
	}
	return p
}

// loadInContainer loads the Floodgate configuration src (a host path) as the service s reads it in
// its container: rls.config, relative to the container's working directory (compose working_dir,
// else the image's: /) or absolute, must lie in a directory or file s mounts, and the limits are
// read from that mount's host side.
func loadInContainer(s *composeService, src string) (*door.Config, error) {
	data, err := config.ReadFile(src)
	if err != nil {
		return nil, err
	}
	cfg, err := doors.Parse(src, data)
	if err != nil {
		return nil, err
	}
	if err := cfg.Resolve(); err != nil {
		return nil, err
	}
	if cfg.RLS.Config == "" {
		return cfg, nil
	}
	wd := s.WorkingDir
	if wd == "" {
		wd = "/" // the image's working directory (the final stage of cmd/floodgate/Dockerfile sets none)
	}
	inContainer := cfg.RLS.Config
	if !path.IsAbs(inContainer) {
		inContainer = path.Join(wd, inContainer)
	}
	host := s.hostPath(inContainer)
	if host == "" {
		return nil, fmt.Errorf("rls.config %s is %s in the container, which no volume mounts (volumes %v)", cfg.RLS.Config, inContainer, s.Volumes)
	}
	cfg.RLS.Config = host
	if err := doors.ReadFiles(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// hostPath returns the host path (relative to e2e/) that the container path p reads: a mount at p,
// or inside a mounted directory; "" when no volume covers p.
func (s *composeService) hostPath(p string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			continue
		}
		if parts[1] == p {
			return parts[0]
		}
		if rest, ok := strings.CutPrefix(p, strings.TrimSuffix(parts[1], "/")+"/"); ok {
			return filepath.Join(parts[0], filepath.FromSlash(rest))
		}
	}
	return ""
}

// envoyAtLeast reports whether a tag "vX.Y.Z" is at least major.minor.
func envoyAtLeast(tag string, major, minor int) bool {
	parts := strings.Split(strings.TrimPrefix(tag, "v"), ".")
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && (ma > major || (ma == major && mi >= minor))
}

func TestComposeFile(t *testing.T) {
	data, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range composeProblems(t, loadCompose(t, data)) {
		t.Error(problem)
	}

	t.Run("broken copies are rejected", func(t *testing.T) {
		cases := []struct{ name, old, new, want string }{
			{"moving tag", "envoyproxy/envoy:v1.37.1", "envoyproxy/envoy:v1.37-latest", "not pinned"},
			{"latest", "hashicorp/http-echo:1.0.0", "hashicorp/http-echo:latest", "not pinned"},
			{"missing config", "../envoy/floodgate.yaml:", "../envoy/floodgat.yaml:", "does not exist"},
			{"wrong dockerfile", "dockerfile: cmd/floodgate/Dockerfile\n    volumes:\n      - ../envoy/floodgate.yaml", "dockerfile: Dockerfile\n    volumes:\n      - ../envoy/floodgate.yaml", "not found"},
			{"echo port", "-listen=:5678", "-listen=:5679", "echo serves on port"},
			{"unpublished listener", `"127.0.0.1:10000:10000"`, `"127.0.0.1:10000:10080"`, "listener port 10000"},
			{"admin on all interfaces", `"127.0.0.1:9901:9901"`, `"9901:9901"`, "beyond loopback"},
			{"admin published elsewhere", `"127.0.0.1:9901:9901"`, `"127.0.0.1:9911:9911"`, "admin port 9901"},
			{"hash secret optional", "FLOODGATE_HASH_SECRET: ${FLOODGATE_HASH_SECRET:?", "FLOODGATE_HASH_SECRET: ${FLOODGATE_HASH_SECRET:-", "must be ${FLOODGATE_HASH_SECRET:?"},
			// The rate limit route: its limits mounted where rls.config finds them, its Envoy
			// pointed at its Floodgate, its admin on loopback.
			{"rls limits unmounted", "../envoy/ratelimit/config:/envoy/ratelimit/config:ro", "../envoy/ratelimit/config:/etc/floodgate/ratelimit:ro", "which no volume mounts"},
			{"rls working directory", "working_dir: /\n", "working_dir: /srv\n", "/srv/envoy/ratelimit/config in the container"},
			{"rls limits missing", "../envoy/ratelimit/config:/envoy", "../envoy/ratelimit/conf:/envoy", "does not exist"},
			{"rls envoy without its floodgate", "      floodgate-rls:\n        condition: service_started", "      floodgate:\n        condition: service_started", "needs service floodgate-rls"},
			{"rls admin published elsewhere", `"127.0.0.1:9903:9903"`, `"127.0.0.1:9904:9903"`, "admin port 9903"},
			{"rls bootstrap", "../envoy/ratelimit/envoy.yaml:", "../envoy/jwt/envoy.yaml:", "floodgate-jwt"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if !strings.Contains(string(data), tc.old) {
					t.Fatalf("%s no longer contains %q: update this test", composePath, tc.old)
				}
				broken := strings.Replace(string(data), tc.old, tc.new, 1)
				p := composeProblems(t, loadCompose(t, []byte(broken)))
				if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, tc.want) }) {
					t.Fatalf("not reported: %v (want %q)", p, tc.want)
				}
			})
		}
		// An unknown key is a decoding error.
		js, err := yaml.YAMLToJSONStrict([]byte(strings.Replace(string(data), "read_only: true", "readonly: true", 1)))
		if err != nil {
			t.Fatal(err)
		}
		if err := floodgatetest.StrictJSON(js, &compose{}); err == nil || !strings.Contains(err.Error(), "readonly") {
			t.Fatalf("unknown key accepted: %v", err)
		}
	})
}

// TestRunScript: run.sh parses (bash -n), and the names and numbers it asserts are those of the
// shipped configuration and compose file.
func TestRunScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed to check run.sh")
	}
	if out, err := exec.Command(bash, "-n", runScript).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", runScript, err, out)
	}
	script, err := os.ReadFile(runScript)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(runScript); st.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable", runScript)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+)=(\S+)`).FindAllStringSubmatch(string(script), -1) {
		vars[m[1]] = m[2]
	}
	for _, want := range []string{"docker compose -f docker-compose.yaml", "up -d --build", "down", "retry-after", "ratelimit-limit", "x-ratelimit-degraded",
		"FLOODGATE_HASH_SECRET=${FLOODGATE_HASH_SECRET:-$(head -c 32 /dev/urandom | base64)}", "export FLOODGATE_HASH_SECRET"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("%s does not contain %q", runScript, want)
		}
	}
	for _, tok := range regexp.MustCompile(`\.\./envoy/[A-Za-z0-9_./-]+`).FindAllString(string(script), -1) {
		if _, err := os.Stat(tok); err != nil {
			t.Errorf("%s reads %s, which does not exist", runScript, tok)
		}
	}

	data, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	c := loadCompose(t, data)
	// URLs: the host side of what compose publishes for the matching container port.
	for v, svc := range map[string]string{"ENVOY": "envoy", "ENVOY_ADMIN": "envoy", "ENVOY_JWT": "envoy-jwt", "ENVOY_JWT_ADMIN": "envoy-jwt", "ENVOY_RLS": "envoy-rls", "ENVOY_RLS_ADMIN": "envoy-rls"} {
		hostPort := strings.TrimPrefix(vars[v], "http://")
		found := false
		for _, hp := range c.Services[svc].published(t) {
			found = found || hp == hostPort
		}
		if !found {
			t.Errorf("%s=%s is not a port compose publishes for %s", v, vars[v], svc)
		}
	}
	for v, svc := range map[string]string{"FLOODGATE_REPLICAS": "floodgate", "RLS_REPLICAS": "floodgate-rls"} {
		d := c.Services[svc].Deploy
		if d == nil || vars[v] != strconv.Itoa(d.Replicas) || d.Replicas < 2 {
			t.Errorf("%s=%s but compose runs %+v %s replicas (want several)", v, vars[v], d, svc)
		}
	}
	if !strings.Contains(string(script), "--profile rls") || !strings.Contains(string(script), "x-envoy-ratelimited") {
		t.Errorf("%s does not start the rls profile or check Envoy's rate limit filter's 429", runScript)
	}
	// The rate limit service's limit the script spends: a burst of RLS_BURST on RLS_LIMIT, the
	// limit /v1/ requests with an API key select, refilling far slower than a burst of curls.
	rcfg, err := loadInContainer(c.Services["floodgate-rls"], c.Services["floodgate-rls"].mount(configInImage))
	if err != nil {
		t.Fatal(err)
	}
	lim := ratelimit.Limits(rcfg).Select("edge", []rls.Entry{{Key: "generic_key", Value: "api"}, {Key: "api_key", Value: "rls-key"}})
	if lim == nil || lim.Name != vars["RLS_LIMIT"] || strconv.FormatInt(lim.Burst, 10) != vars["RLS_BURST"] {
		t.Errorf("RLS_LIMIT=%s RLS_BURST=%s, but an API key on /v1/ selects %+v", vars["RLS_LIMIT"], vars["RLS_BURST"], lim)
	} else if lim.Unit.Seconds < 60 {
		t.Errorf("limit %s refills every %ds: too fast for run.sh's burst to reach 429 reliably", lim.Name, lim.Unit.Seconds)
	}
	// The policies the script drives to 429: they exist, with that capacity, and refill slowly
	// enough (at most one token every 2s) that a burst of curls cannot be topped up mid-way.
	for _, tc := range []struct{ policyVar, capVar, cfg string }{
		{"SEARCH_POLICY", "SEARCH_CAPACITY", "../envoy/floodgate.yaml"},
		{"JWT_POLICY", "JWT_CAPACITY", "../envoy/jwt/floodgate.yaml"},
	} {
		cfg, err := doors.Load(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(cfg.Policies, func(p extauthz.PolicySpec) bool { return p.Name == vars[tc.policyVar] })
		if i < 0 {
			t.Errorf("%s=%s: no such policy in %s", tc.policyVar, vars[tc.policyVar], tc.cfg)
			continue
		}
		pol := cfg.Policies[i]
		if strconv.FormatInt(pol.Capacity, 10) != vars[tc.capVar] {
			t.Errorf("%s=%s but policy %s has capacity %d", tc.capVar, vars[tc.capVar], pol.Name, pol.Capacity)
		}
		rate, err := limiter.ParseRate(pol.RefillPerSecond)
		if err != nil {
			t.Fatal(err)
		}
		if num, den := rate.Fraction(); 2*num > den {
			t.Errorf("policy %s refills %s tokens a second: too fast for run.sh's burst to reach 429 reliably", pol.Name, pol.RefillPerSecond)
		}
	}
}

// TestDockerfile: a static CGO-free binary built with -trimpath on golang:1.26, at /floodgate on
// an empty base (as make image builds it, cmd/floodgate-image), as a non-root user, starting
// `floodgate serve` on the path compose and Kubernetes mount; and it copies every package the
// binary is built from.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	var froms, copies []string
	var user, entrypoint, cmd, run string
	for _, line := range strings.Split(strings.ReplaceAll(string(data), "\\\n", " "), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms = append(froms, strings.Join(f[1:], " "))
		case "COPY":
			if !strings.HasPrefix(f[1], "--from=") {
				copies = append(copies, f[1:len(f)-1]...)
			}
		case "USER":
			user = f[1]
		case "ENTRYPOINT":
			entrypoint = strings.TrimSpace(strings.TrimPrefix(line, f[0]))
		case "CMD":
			cmd = strings.TrimSpace(strings.TrimPrefix(line, f[0]))
		case "RUN":
			run += line + "\n"
		}
	}
	if len(froms) != 2 || !strings.Contains(froms[0], "golang:1.26") || !strings.HasSuffix(froms[0], "AS build") {
		t.Errorf("FROM %v: want a golang:1.26 build stage and a final stage", froms)
	}
	if len(froms) > 0 && froms[len(froms)-1] != "scratch" {
		t.Errorf("final stage %q, want scratch (the empty base of make image)", froms[len(froms)-1])
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "go build", "./cmd/floodgate"} {
		if !strings.Contains(run, want) {
			t.Errorf("the build does not use %s", want)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric non-root user (Kubernetes runAsNonRoot checks it)", user)
	}
	var ep, args []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil {
		t.Fatalf("ENTRYPOINT %s: want exec form: %v", entrypoint, err)
	}
	if err := json.Unmarshal([]byte(cmd), &args); err != nil {
		t.Fatalf("CMD %s: want exec form: %v", cmd, err)
	}
	if want := []string{"/floodgate", "serve", "--config", configInImage}; !slices.Equal(append(ep, args...), want) {
		t.Errorf("ENTRYPOINT %v CMD %v, want %v", ep, args, want)
	}

	// Every package of this module that the binary is built from must be inside a COPY source.
	out, err := exec.Command(floodgatetest.Go(), "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", floodgatetest.Package).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range copies {
		if _, err := os.Stat(filepath.Join(root, src)); err != nil {
			t.Errorf("COPY %s: not in the repository", src)
		}
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(copies, func(c string) bool {
			c = strings.TrimSuffix(c, "/")
			return rel == c || strings.HasPrefix(rel, c+"/")
		}) {
			t.Errorf("package dir %s is not copied into the build stage (COPY %v)", rel, copies)
		}
	}
}
