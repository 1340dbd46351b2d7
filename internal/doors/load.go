package doors

import (
	"errors"
	"slices"
	"sort"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Load reads the configuration file at path, resolves the secrets and
// files it names, compiles each front end's part and reads the rate limit
// files: what serve and validate run with.
func Load(path string) (*door.Config, error) {
	return loadFile(path, loading{resolve: (*config.Config).Resolve, files: true})
}

// LoadBytes is Load for a configuration that is not a file, named name in
// messages (ratelimit mode: built from envoyproxy/ratelimit's environment).
func LoadBytes(name string, data []byte) (*door.Config, error) {
	return load(name, data, loading{resolve: (*config.Config).Resolve, files: true})
}

// LoadUnresolved is Load reading no secret or TLS file (floodgate validate
// --offline, where they do not exist): identities are keyed with no secret.
func LoadUnresolved(path string) (*door.Config, error) {
	return loadFile(path, loading{files: true})
}

// LoadOffline is Load for a command that decides requests without serving
// them (floodgate replay): the secret by config.ResolveOffline, and the
// rate limit files not read (Limits stays nil).
func LoadOffline(path string) (*door.Config, error) {
	return loadFile(path, loading{resolve: func(c *config.Config) error { c.ResolveOffline(); return nil }})
}

// LoadReload loads a changed configuration for a server that started with
// started: its identity secret kept, nothing else read beside the file
// but the rate limit files (config.ResolveReload). parsed, when set, is
// told the configuration once it is valid, before those files are read,
// so that a reload rejected for them still watches the files it names.
// changed and secretErr are ResolveReload's.
func LoadReload(name string, data []byte, started *config.Config, parsed func(*config.Config)) (c *door.Config, changed []string, secretErr error, err error) {
	c, err = load(name, data, loading{files: true, parsed: parsed, resolve: func(c *config.Config) error {
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
func Parse(file string, data []byte) (*door.Config, error) {
	return load(file, data, loading{})
}

// loading is what a load reads beside the configuration.
type loading struct {
	// resolve reads what the configuration names outside itself, before
	// the policies are keyed with its secret (nil: nothing).
	resolve func(*config.Config) error
	files   bool // read the files the doors' parts name
	parsed  func(*config.Config)
}

// loadFile is load of the file at path.
func loadFile(path string, how loading) (*door.Config, error) {
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
func load(file string, data []byte, how loading) (*door.Config, error) {
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
	if how.files {
		if err := ReadFiles(dc); err != nil {
			return nil, err
		}
	}
	return dc, nil
}

// compile compiles c's policies and each door's part, reading no file:
// the policies keyed with the hash secret c resolved (none before
// Resolve). It refuses a configuration that turns no door on. Problems
// are reported at their lines of c's file.
func compile(c *config.Config) (*door.Config, error) {
	dc := door.NewConfig(c, nil)
	var problems fielderr.List
	if !slices.ContainsFunc(specs, func(k door.Spec) bool { return k.On(dc) }) {
		problems = append(problems, &fielderr.Error{Path: "policies", Msg: noFrontEnd})
	}
	for _, k := range specs {
		if k.Compile != nil {
			problems = append(problems, k.Compile(dc)...)
		}
	}
	eng, err := extauthz.Compile(c.Policies, door.EngineOptions(c))
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
	dc.Engine = eng
	return dc, nil
}

// ReadFiles reads the files each door's part of c names (the rate limit
// files): what Parse leaves unread.
func ReadFiles(c *door.Config) error {
	for _, k := range specs {
		if k.Read != nil {
			if err := k.Read(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// Default is the embedded default configuration (config.Default),
// compiled: in-memory store, one sample policy, loopback only.
func Default() *door.Config {
	c, err := compile(config.Default())
	if err != nil {
		panic("the embedded default configuration does not compile: " + err.Error())
	}
	if err := ReadFiles(c); err != nil {
		panic("the embedded default configuration's files do not read: " + err.Error())
	}
	return c
}
