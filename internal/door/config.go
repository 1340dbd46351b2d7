package door

import (
	"errors"
	"fmt"
	"sort"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/rls"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Config is a configuration with every front end's part compiled: what
// serve, validate, check and replay run with. The settings are the
// embedded *config.Config's.
type Config struct {
	*config.Config
	// Engine is the policies, compiled (Check's, and the HTTP door's): an
	// engine with no policy when the file lists none. It is keyed with the
	// configuration's identity hash secret.
	Engine *extauthz.Engine
	// Limits are the rate limit service's limits, read from rls.config
	// with rls.burst applied; nil until ReadLimits, and empty without
	// rls.config (rls.xds pushes its limits to the door through its feed).
	Limits *rls.Config
}

// Load reads the configuration file at path, resolves the secrets and
// files it names, compiles each front end's part and reads the rate limit
// files: what serve and validate run with.
func Load(path string) (*Config, error) {
	return loadFile(path, loading{resolve: (*config.Config).Resolve, limits: true})
}

// LoadBytes is Load for a configuration that is not a file, named name in
// messages (ratelimit mode: built from envoyproxy/ratelimit's environment).
func LoadBytes(name string, data []byte) (*Config, error) {
	return load(name, data, loading{resolve: (*config.Config).Resolve, limits: true})
}

// LoadUnresolved is Load reading no secret or TLS file (floodgate validate
// --offline, where they do not exist): identities are keyed with no secret.
func LoadUnresolved(path string) (*Config, error) {
	return loadFile(path, loading{limits: true})
}

// LoadOffline is Load for a command that decides requests without serving
// them (floodgate replay): the secret by config.ResolveOffline, and the
// rate limit files not read (Limits stays nil).
func LoadOffline(path string) (*Config, error) {
	return loadFile(path, loading{resolve: func(c *config.Config) error { c.ResolveOffline(); return nil }})
}

// LoadReload loads a changed configuration for a server that started with
// started: its identity secret kept, nothing else read beside the file
// but the rate limit files (config.ResolveReload). parsed, when set, is
// told the configuration once it is valid, before those files are read,
// so that a reload rejected for them still watches the files it names.
// changed and secretErr are ResolveReload's.
func LoadReload(name string, data []byte, started *config.Config, parsed func(*config.Config)) (c *Config, changed []string, secretErr error, err error) {
	c, err = load(name, data, loading{limits: true, parsed: parsed, resolve: func(c *config.Config) error {
		changed, secretErr = c.ResolveReload(started)
		return nil
	}})
	if err != nil {
		return nil, nil, nil, err
	}
	return c, changed, secretErr, nil
}

// Parse validates and compiles a configuration read from file, reading
// nothing else: no secret, no rate limit file (Limits stays nil).
func Parse(file string, data []byte) (*Config, error) {
	return load(file, data, loading{})
}

// loading is what a load reads beside the configuration.
type loading struct {
	// resolve reads what the configuration names outside itself, before
	// the policies are keyed with its secret (nil: nothing).
	resolve func(*config.Config) error
	limits  bool // read the rate limit files
	parsed  func(*config.Config)
}

// loadFile is load of the file at path.
func loadFile(path string, how loading) (*Config, error) {
	data, err := config.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return load(path, data, how)
}

// load is every loader: data, read from file, checked, resolved, compiled once and its rate limit files read. Every
// problem of the file, the settings' and the front ends', is reported at
// once, in line order; what resolve or the rate limit files find only of a
// file that has none.
func load(file string, data []byte, how loading) (*Config, error) {
	c, problems := config.Check(file, data)
	if c == nil {
		return nil, problems
	}
	var resolveErr error
	if len(problems) == 0 && how.resolve != nil {
		resolveErr = how.resolve(c) // reported after the file's own problems
	}
	dc, err := compile(c)
	var more fielderr.List
	if errors.As(err, &more) {
		problems = append(problems, more...)
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
	} else if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, problems
	}
	if resolveErr != nil {
		return nil, resolveErr
	}
	if how.parsed != nil {
		how.parsed(c)
	}
	if how.limits {
		if err := dc.ReadLimits(); err != nil {
			return nil, err
		}
	}
	return dc, nil
}

// compile compiles each front end's part of c, reading no file: the
// policies, keyed with the hash secret c resolved (none before Resolve). It
// refuses a configuration that turns no front end on. Problems are
// reported at their lines of c's file.
func compile(c *config.Config) (*Config, error) {
	var problems fielderr.List
	if len(c.Policies) == 0 && !c.RLS.Limits() {
		problems = append(problems, &fielderr.Error{Path: "policies", Msg: noFrontEnd})
	} else if len(c.Policies) == 0 && c.Listen.HTTP != "" {
		problems = append(problems, &fielderr.Error{Path: "listen.http", Msg: "the HTTP authorization door decides the policies, and none is listed"})
	}
	eng, err := extauthz.Compile(c.Policies, EngineOptions(c))
	var errs fielderr.List
	switch {
	case errors.As(err, &errs):
		problems = append(problems, errs...)
	case err != nil:
		problems = append(problems, &fielderr.Error{Path: "policies", Msg: err.Error()})
	}
	if len(problems) > 0 {
		return nil, c.Problems(problems)
	}
	return &Config{Config: c, Engine: eng}, nil
}

// HTTPEngine is the policies as the HTTP door decides them: Engine, with
// the door's client address rule (http_authz.trusted_hops).
func (c *Config) HTTPEngine() *extauthz.Engine {
	if h := c.HTTPAuthz.TrustedHops; h != nil {
		return c.Engine.WithTrustedHops(*h)
	}
	return c.Engine
}

// noFrontEnd is the problem of a configuration that turns no front end on.
const noFrontEnd = "no front end is configured: list at least one policy (Envoy's ext_authz Check) or set rls.config or rls.xds (Envoy's rate limit service)"

// EngineOptions are the options the policies of c are compiled with, for
// a caller that compiles them again (floodgate replay's --set).
func EngineOptions(c *config.Config) extauthz.Options {
	return extauthz.Options{ClientIP: c.ClientIP, Headers: c.Headers, HashSecret: c.HashSecret()}
}

// HTTPEngineOptions are EngineOptions with the HTTP door's client address
// rule (http_authz.trusted_hops), for a caller that compiles the policies
// as the door decides them (floodgate replay --door http).
func HTTPEngineOptions(c *config.Config) extauthz.Options {
	o := EngineOptions(c)
	if h := c.HTTPAuthz.TrustedHops; h != nil && len(o.ClientIP.TrustedCIDRs) == 0 {
		o.ClientIP.TrustedHops = *h
	}
	return o
}

// ReadLimits reads the limits rls.config names and applies rls.burst to
// them (none without rls.config: limits pushed by rls.xds reach the door
// through its Feed, with rls.burst applied there). Problems in the limits are reported at
// their own files and lines; a burst naming no limit at its line in the
// configuration.
func (c *Config) ReadLimits() error {
	if c.RLS.Config == "" {
		c.Limits = rls.Empty()
		return nil
	}
	rules, err := rls.Load(c.RLS.Config)
	if err != nil {
		le := &LimitsError{At: fmt.Sprintf("%s:%d", c.Source, c.LineOf("rls.config")), Path: c.RLS.Config, Err: err}
		errors.As(err, &le.Problems)
		return le
	}
	if err := rules.SetBursts(c.RLS.Burst); err != nil {
		var bursts rls.BurstErrors
		if !errors.As(err, &bursts) {
			return err
		}
		var problems fielderr.List
		for _, b := range bursts {
			problems = append(problems, &fielderr.Error{Path: "rls.burst." + b.Key, Msg: b.Msg + " (the limits of " + c.RLS.Config + ")"})
		}
		return c.Problems(problems)
	}
	c.Limits = rules
	return nil
}

// LimitsError is ReadLimits' error for a rate limit configuration that
// could not be read (Err) or holds problems (Problems, each at its own file
// and line). Error names the setting at its line in Floodgate's
// configuration (At); a caller whose configuration the user did not write
// (ratelimit mode: envoyproxy/ratelimit's environment) names what the user
// set instead, with Detail.
type LimitsError struct {
	At       string // file:line of rls.config
	Path     string // what rls.config names
	Problems fielderr.List
	Err      error
}

func (e *LimitsError) Error() string { return e.At + ": rls.config: " + e.Detail() }

// Detail is the error without the setting: the problems, or why the files
// could not be read.
func (e *LimitsError) Detail() string {
	if len(e.Problems) > 0 {
		n := len(e.Problems)
		return fmt.Sprintf("%d %s in the rate limit configuration %s:\n%v", n, plural(n, "problem", "problems"), e.Path, e.Err)
	}
	return e.Err.Error()
}

func (e *LimitsError) Unwrap() error { return e.Err }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Default is the embedded default configuration (config.Default),
// compiled: in-memory store, one sample policy, loopback only.
func Default() *Config {
	c, err := compile(config.Default())
	if err != nil {
		panic("the embedded default configuration does not compile: " + err.Error())
	}
	c.Limits = rls.Empty()
	return c
}
