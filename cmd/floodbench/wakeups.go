package main

import (
	"fmt"
	"io"

	"github.com/floodgate/floodgate/internal/bench"
)

// runWakeups prints what each gRPC call wakes in the trace files named
// (bench.Wakeups).
func runWakeups(files []string, stdout, stderr io.Writer) int {
	if len(files) == 0 {
		fmt.Fprintln(stderr, "floodbench wakeups: name the trace files")
		return 2
	}
	if err := bench.Wakeups(files, stdout); err != nil {
		fmt.Fprintln(stderr, "floodbench wakeups:", err)
		return 1
	}
	return 0
}
