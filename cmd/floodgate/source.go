package main

import "github.com/floodgate/floodgate/internal/config"

// source is where a configuration is read from, and read again by a
// reload: a file, or (ratelimit mode) the configuration built from
// envoyproxy/ratelimit's environment, which does not change while the
// process runs (the rate limit files it names do). name is "" for the
// embedded default, which is never reloaded.
type source struct {
	name string
	read func() ([]byte, error)
	// explain, when set, rewrites a reload's error in the terms the user
	// configured (ratelimit mode: the environment's variables).
	explain func(error) error
}

// fileSource is the configuration file at path ("" for the embedded
// default).
func fileSource(path string) source {
	if path == "" {
		return source{}
	}
	return source{name: path, read: func() ([]byte, error) { return config.ReadFile(path) }}
}
