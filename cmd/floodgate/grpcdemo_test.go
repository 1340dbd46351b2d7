package main

import (
	"strings"
	"testing"
)

// TestTheREADMEGRPCExampleWorksAsWritten runs the README's gRPC example
// (`floodgate check --grpc`) against the embedded default, served on free
// ports, and compares the output line by line. What it prints is what
// Envoy makes of the denial for a gRPC caller (Utility::prepareLocalReply,
// source/common/http/utility.cc): grpc-status 8 as the denied headers give
// it, not the UNAVAILABLE Envoy would map 429 to.
func TestTheREADMEGRPCExampleWorksAsWritten(t *testing.T) {
	lines := readmeBlock(t, "grpc-demo")
	if !strings.Contains(lines[0], "--grpc") {
		t.Fatalf("first line %q is not a floodgate check --grpc command", lines[0])
	}
	runCheckExample(t, lines[0], lines[1:])
}
