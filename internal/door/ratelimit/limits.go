package ratelimit

import (
	"errors"
	"fmt"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Limits are the limits c's files hold (rls.config with rls.burst
// applied): empty without rls.config, or before they were read
// (doors.ReadFiles). Limits rls.xds pushes reach the door through its
// feed.
func Limits(c *door.Config) *rls.Limits {
	if l, ok := c.Part(Name).(*rls.Limits); ok {
		return l
	}
	return rls.Empty()
}

// readLimits reads the limits rls.config names and applies rls.burst to
// them (none without rls.config: limits pushed by rls.xds reach the door
// through its Feed, with rls.burst applied there). Problems in the limits are reported at
// their own files and lines; a burst naming no limit at its line in the
// configuration.
func readLimits(c *door.Config) error {
	if c.RLS.Config == "" {
		c.SetPart(Name, rls.Empty())
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
	c.SetPart(Name, rules)
	return nil
}

// LimitsError is the door's error for a rate limit configuration that
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
		return fmt.Sprintf("%d %s in the rate limit configuration %s:\n%v", n, fielderr.Plural(n, "problem", "problems"), e.Path, e.Err)
	}
	return e.Err.Error()
}

func (e *LimitsError) Unwrap() error { return e.Err }
