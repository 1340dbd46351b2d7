package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/floodgate/floodgate/internal/config"
)

// validate checks a configuration file: exit 0, or 1 with one
// FILE:LINE: message per problem.
func validate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", stderr)
	path := fs.String("config", "", "configuration file to check")
	connect := fs.Bool("connect", false, "also dial the configured store, load the script and run one decision on a scratch key")
	if !parseArgs(fs, args) {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "floodgate validate: --config FILE is required")
		return 2
	}
	c, err := config.Load(*path)
	if err != nil {
		printProblems(stderr, err)
		return 1
	}
	n := len(c.Policies)
	summary := fmt.Sprintf("%d %s, store %s", n, plural(int64(n), "policy", "policies"), c.Store.Backend) // plural: replay.go
	if *connect {
		// The store is part of what is checked: "ok" comes last, and only
		// when it answered.
		if code := connectCheck(c, stdout, stderr); code != 0 { // connect.go
			fmt.Fprintf(stderr, "%s: the file is valid (%s), but the store cannot be used: see above\n", *path, summary)
			return code
		}
	}
	fmt.Fprintf(stdout, "%s: ok (%s)\n", *path, summary)
	return 0
}

// printProblems prints a configuration error: one FILE:LINE: line per
// problem when it is a list of them, else the error itself.
func printProblems(w io.Writer, err error) {
	var ps config.Problems
	if !errors.As(err, &ps) {
		fmt.Fprintln(w, err)
		return
	}
	for _, p := range ps {
		fmt.Fprintln(w, p)
	}
}
