package main

import (
	"os"
	"testing"
)

// logLine returns the first log line of p with this msg, decoded.
func logLine(t *testing.T, p *proc, msg string) map[string]any {
	t.Helper()
	m, ok := p.LogLine(msg)
	if !ok {
		t.Fatalf("no %q log line in:\n%s", msg, p.Output())
	}
	return m
}

// TestTheProtobufDecoderServes: listen.decoder: protobuf takes the hand-written
// decoder out of the path, and the same request is decided the same way:
// allowed until the bucket is empty, then denied.
func TestTheProtobufDecoderServes(t *testing.T) {
	for _, dec := range []string{"protobuf", "fast"} {
		p := startFloodgate(t, `
listen: {grpc: "127.0.0.1:0", admin: "", decoder: `+dec+`}
policies:
  - {name: a, key: [header:x-api-key], capacity: 2, refill_per_second: 1/3600}
`)
		if got := logLine(t, p, "serving")["decoder"]; got != dec {
			t.Errorf("serving line says decoder %v, want %s", got, dec)
		}
		req := request(t, "/x", "203.0.113.1", "x-api-key: k1")
		for i, want := range []bool{true, true, false} {
			if got := isAllowed(p.Check(t, req)); got != want {
				t.Fatalf("decoder %s, request %d: allowed %v, want %v", dec, i+1, got, want)
			}
		}
	}
}

// TestTheStartLogSaysHowTheCollectorRuns: the "garbage collector" line names
// the GOGC in force and where it came from (runtime.gogc unless GOGC is set).
func TestTheStartLogSaysHowTheCollectorRuns(t *testing.T) {
	p := startFloodgate(t, `
listen: {grpc: "127.0.0.1:0", admin: ""}
runtime: {gogc: 250}
policies:
  - {name: a, key: [client_ip], capacity: 1, refill_per_second: 1}
`)
	m := logLine(t, p, "garbage collector")
	wantGOGC, wantFrom := "250", "runtime.gogc"
	if v, ok := os.LookupEnv("GOGC"); ok {
		wantGOGC, wantFrom = v, "GOGC"
	}
	if m["gogc"] != wantGOGC || m["gogc_from"] != wantFrom {
		t.Errorf("gogc %v from %v; want %s from %s", m["gogc"], m["gogc_from"], wantGOGC, wantFrom)
	}
	if _, ok := m["memory_limit_from"].(string); !ok {
		t.Errorf("no memory_limit_from in %v", m)
	}
}
