// Package config loads and validates Floodgate's YAML configuration. Every
// problem is reported as FILE:LINE: what is wrong, all of them at once, so
// `floodgate validate` fixes a file in one pass.
package config

import (
	_ "embed"
	"fmt"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/extauthz"
)

// Config is the whole configuration file. The key names are fixed by the
// product design; the schema may grow around them.
type Config struct {
	Listen   Listen                `yaml:"listen"`
	Store    Store                 `yaml:"store"`
	ClientIP extauthz.ClientIPSpec `yaml:"client_ip"`
	// Headers lists the RateLimit header families: legacy, structured.
	Headers  []string              `yaml:"headers"`
	Identity Identity              `yaml:"identity"`
	Log      Log                   `yaml:"log"`
	Policies []extauthz.PolicySpec `yaml:"policies"`

	// Engine is the compiled policies, set by Load.
	Engine *extauthz.Engine `yaml:"-"`
	// Source names where the configuration came from (a path, or "embedded default").
	Source string `yaml:"-"`
}

// Listen is where the servers listen.
type Listen struct {
	GRPC  string `yaml:"grpc"`  // ext_authz Check and grpc.health.v1
	Admin string `yaml:"admin"` // HTTP /metrics, /healthz, /readyz; "" disables
}

// Store chooses and tunes the bucket store.
type Store struct {
	Backend   string `yaml:"backend"` // redis | memory
	Redis     Redis  `yaml:"redis"`
	Memory    Memory `yaml:"memory"`
	OnFailure string `yaml:"on_failure"` // allow | deny | local
}

// Redis is the Redis connection.
type Redis struct {
	Addresses []string `yaml:"addresses"` // one: standalone; several: Redis Cluster
	Timeout   Duration `yaml:"timeout"`   // per decision (default 50ms)
	Prefix    string   `yaml:"prefix"`    // key prefix (default fg:)
}

// Memory tunes the in-memory store.
type Memory struct {
	MaxBuckets int `yaml:"max_buckets"` // default 1048576
}

// Identity keys the hash that turns identities (API keys, IPs) into bucket
// keys. Give every replica the same secret.
type Identity struct {
	HashSecretFile string `yaml:"hash_secret_file"`
	HashSecretEnv  string `yaml:"hash_secret_env"`
}

// Log chooses the log output.
type Log struct {
	Format string `yaml:"format"` // json (default) | console
	Level  string `yaml:"level"`  // debug | info (default) | warn | error
}

// Duration is a YAML duration such as 50ms or 1.5s.
type Duration struct {
	time.Duration
	set bool
}

// UnmarshalYAML reads a Go duration string. An invalid one is left unset;
// the validator reports it with its path.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if v, err := time.ParseDuration(strings.TrimSpace(n.Value)); err == nil && n.Kind == yaml.ScalarNode {
		d.Duration, d.set = v, true
	}
	return nil
}

// IsSet reports whether the file gave a value.
func (d Duration) IsSet() bool { return d.set }

// Defaults.
const (
	DefaultGRPC         = "127.0.0.1:9191"
	DefaultAdmin        = "127.0.0.1:9192"
	DefaultRedisTimeout = 50 * time.Millisecond
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML is the embedded default configuration: in-memory store, one
// sample policy, loopback only.
func DefaultYAML() []byte { return append([]byte(nil), defaultYAML...) }

// Default returns the embedded default configuration, loaded.
func Default() *Config {
	c, err := Parse("embedded default", defaultYAML)
	if err != nil {
		panic("the embedded default configuration is invalid: " + err.Error())
	}
	return c
}

// Load reads, validates and compiles the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(path, data)
}

// Problem is one thing wrong with a configuration.
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
	}
	return p.File + ": " + p.Msg
}

// Problems is every problem found, in file order. It is the error Parse and
// Load return for an invalid file.
type Problems []Problem

func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "\n")
}

// Parse validates and compiles a configuration read from file (the name is
// used in messages only).
func Parse(file string, data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Problems{yamlProblem(file, err.Error())}
	}
	c := &Config{Source: file}
	v := &validator{file: file, lines: map[string]int{}}
	if len(doc.Content) == 0 {
		v.problem(0, "is empty: a configuration needs at least policies")
		return nil, v.problems
	}
	root := doc.Content[0]
	v.walk(root, reflect.TypeOf(c), "")
	if err := root.Decode(c); err != nil {
		if te, ok := err.(*yaml.TypeError); ok {
			for _, e := range te.Errors {
				v.problems = append(v.problems, yamlProblem(file, e))
			}
		} else {
			v.problems = append(v.problems, yamlProblem(file, err.Error()))
		}
	}
	v.check(c)
	if len(v.problems) > 0 {
		sort.SliceStable(v.problems, func(i, j int) bool { return v.problems[i].Line < v.problems[j].Line })
		return nil, v.problems
	}
	return c, nil
}

// yamlProblem turns yaml.v3's "line N: msg" (or "yaml: line N: msg") into a Problem.
func yamlProblem(file, msg string) Problem {
	msg = strings.TrimPrefix(msg, "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				return Problem{File: file, Line: n, Msg: text}
			}
		}
	}
	return Problem{File: file, Msg: msg}
}

// check validates what the YAML types cannot, and compiles the policies.
func (v *validator) check(c *Config) {
	if c.Listen.GRPC == "" {
		c.Listen.GRPC = DefaultGRPC
	} else if err := checkHostPort(c.Listen.GRPC); err != nil {
		v.at("listen.grpc", "%v", err)
	}
	if c.Listen.Admin != "" {
		if err := checkHostPort(c.Listen.Admin); err != nil {
			v.at("listen.admin", "%v", err)
		}
	}
	switch c.Store.Backend {
	case "":
		c.Store.Backend = "memory"
	case "memory":
	case "redis":
		if len(c.Store.Redis.Addresses) == 0 {
			v.at("store.redis.addresses", "must list at least one host:port when store.backend is redis")
		}
		for i, a := range c.Store.Redis.Addresses {
			if err := checkHostPort(a); err != nil {
				v.at(fmt.Sprintf("store.redis.addresses[%d]", i), "%v", err)
			}
		}
	default:
		v.at("store.backend", "must be redis or memory (got %q)", c.Store.Backend)
	}
	if !c.Store.Redis.Timeout.IsSet() {
		c.Store.Redis.Timeout.Duration = DefaultRedisTimeout
	} else if t := c.Store.Redis.Timeout.Duration; t <= 0 || t > 10*time.Second {
		v.at("store.redis.timeout", "must be between 1ms and 10s, and well under Envoy's ext_authz timeout (got %v)", t)
	}
	switch c.Store.OnFailure {
	case "":
		c.Store.OnFailure = "allow"
	case "allow", "deny", "local":
	default:
		v.at("store.on_failure", "must be allow, deny or local (got %q)", c.Store.OnFailure)
	}
	if c.Store.Memory.MaxBuckets < 0 {
		v.at("store.memory.max_buckets", "must be > 0 (got %d)", c.Store.Memory.MaxBuckets)
	}
	switch c.Log.Format {
	case "", "json", "console":
	default:
		v.at("log.format", "must be json or console (got %q)", c.Log.Format)
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		v.at("log.level", "must be debug, info, warn or error (got %q)", c.Log.Level)
	}
	secret, err := c.Identity.secret()
	if err != nil {
		v.at("identity", "%v", err)
	}
	if len(c.Policies) == 0 {
		v.at("policies", "must list at least one policy")
	}
	eng, err := extauthz.Compile(c.Policies, extauthz.Options{ClientIP: c.ClientIP, Headers: c.Headers, HashSecret: secret})
	if errs, ok := err.(extauthz.Errors); ok {
		for _, e := range errs {
			v.at(e.Path, "%s", e.Msg)
		}
	} else if err != nil {
		v.at("policies", "%v", err)
	}
	c.Engine = eng
}

// secret reads the identity hash secret from its file or environment variable.
func (id Identity) secret() ([]byte, error) {
	switch {
	case id.HashSecretFile != "" && id.HashSecretEnv != "":
		return nil, fmt.Errorf("set hash_secret_file or hash_secret_env, not both")
	case id.HashSecretFile != "":
		b, err := os.ReadFile(id.HashSecretFile)
		if err != nil {
			return nil, fmt.Errorf("hash_secret_file: %v", err)
		}
		if s := strings.TrimSpace(string(b)); len(s) < 16 {
			return nil, fmt.Errorf("hash_secret_file %s holds %d characters; use at least 16", id.HashSecretFile, len(s))
		}
		return []byte(strings.TrimSpace(string(b))), nil
	case id.HashSecretEnv != "":
		s, ok := os.LookupEnv(id.HashSecretEnv)
		if !ok {
			return nil, fmt.Errorf("hash_secret_env: environment variable %s is not set", id.HashSecretEnv)
		}
		if len(strings.TrimSpace(s)) < 16 {
			return nil, fmt.Errorf("hash_secret_env: %s holds %d characters; use at least 16", id.HashSecretEnv, len(strings.TrimSpace(s)))
		}
		return []byte(strings.TrimSpace(s)), nil
	}
	return nil, nil
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port (got %q)", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("has an invalid port in %q", s)
	}
	if host == "" {
		return fmt.Errorf("must name a host or address, as in 127.0.0.1:9191 (got %q)", s)
	}
	return nil
}
