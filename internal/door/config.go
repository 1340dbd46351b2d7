package door

import (
	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
)

// Config is a configuration with every door's part compiled: what serve,
// validate, check and replay run with (internal/doors loads it). The
// settings are the embedded *config.Config's.
type Config struct {
	*config.Config
	// Engine is the policies, compiled (Check's and the HTTP door's, and
	// the identity hash every door keys with): an engine with no policy
	// when the file lists none. It is keyed with the configuration's
	// identity hash secret.
	Engine *extauthz.Engine
	// parts are the doors' own compiled parts, by door name.
	parts map[string]any
}

// NewConfig is c with its policies compiled into e and no door's part yet.
func NewConfig(c *config.Config, e *extauthz.Engine) *Config { return &Config{Config: c, Engine: e} }

// Part is the part the door named name compiled or read into c (nil
// before it did): each door's package reads its own through a typed
// function of its own.
func (c *Config) Part(name string) any { return c.parts[name] }

// SetPart keeps v as the door named name's part of c.
func (c *Config) SetPart(name string, v any) {
	if c.parts == nil {
		c.parts = map[string]any{}
	}
	c.parts[name] = v
}

// EngineOptions are the options the policies of c are compiled with, for
// a caller that compiles them again (floodgate replay's --set).
func EngineOptions(c *config.Config) extauthz.Options {
	return extauthz.Options{ClientIP: c.ClientIP, Headers: c.Headers, HashSecret: c.HashSecret()}
}
