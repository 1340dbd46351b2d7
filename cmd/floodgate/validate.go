package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// validate checks a configuration file: exit 0, or 1 with one
// FILE:LINE: message per problem. By default it also reads what serve
// would read beside the file (the identity hash secret, the Redis
// passwords, the TLS files); --offline checks the file alone, for CI,
// where those do not exist.
func validate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", stderr)
	path := fs.String("config", "", "configuration file to check")
	connect := fs.Bool("connect", false, "also dial the configured store, load the script and run one decision on a scratch key")
	offline := fs.Bool("offline", false, "check the file alone: read no secret (identity.hash_secret_*, store.redis.*password_*) and no TLS file, as in CI, where they do not exist")
	if !parseArgs(fs, args) {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "floodgate validate: --config FILE is required")
		return 2
	}
	if *offline && *connect {
		fmt.Fprintln(stderr, "floodgate validate: --connect reads the Redis secrets and dials; --offline reads nothing beside the file: give one")
		return 2
	}
	load, note := doors.Load, ""
	if *offline {
		load, note = doors.LoadUnresolved, "; --offline: no secret or TLS file read"
	}
	c, err := load(*path)
	if err != nil {
		printProblems(stderr, err)
		return 1
	}
	summary := validateSummary(c) + note
	if *connect {
		// The store is part of what is checked: "ok" comes last, and only
		// when it answered.
		if code := connectCheck(c.Config, stdout, stderr); code != 0 {
			fmt.Fprintf(stderr, "%s: the file is valid (%s), but the store cannot be used: see above\n", *path, summary)
			return code
		}
	}
	fmt.Fprintf(stdout, "%s: ok (%s)\n", *path, summary)
	return 0
}

// validateSummary says which front ends c turns on, by what each serves,
// and the store: "3 policies, rate limit domains edge internal, store
// redis".
func validateSummary(c *door.Config) string {
	return strings.Join(append(doors.Describe(c), "store "+c.Store.Backend), ", ")
}

// printProblems prints a configuration error: one FILE:LINE: line per
// problem when it is a list of them, else the error itself.
func printProblems(w io.Writer, err error) {
	var ps fielderr.List
	if !errors.As(err, &ps) {
		fmt.Fprintln(w, err)
		return
	}
	for _, p := range ps {
		fmt.Fprintln(w, p)
	}
}
