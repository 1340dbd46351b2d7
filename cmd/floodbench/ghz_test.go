package main

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// The protoset handed to ghz must stand alone: every import present, so that
// the Check method and its request type resolve from the set by itself.
func TestProtosetResolvesCheck(t *testing.T) {
	set := protoset(authv3.File_envoy_service_auth_v3_external_auth_proto)
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("protoset does not stand alone: %v", err)
	}
	d, err := files.FindDescriptorByName("envoy.service.auth.v3.Authorization.Check")
	if err != nil {
		t.Fatalf("Check not in the protoset: %v", err)
	}
	m := d.(protoreflect.MethodDescriptor)
	if got := m.Input().FullName(); got != "envoy.service.auth.v3.CheckRequest" {
		t.Fatalf("Check's input is %s", got)
	}
	// Dependencies first: each file's imports appear before it.
	seen := map[string]bool{}
	for _, f := range set.File {
		for _, dep := range f.Dependency {
			if !seen[dep] {
				t.Fatalf("%s comes before its import %s", f.GetName(), dep)
			}
		}
		seen[f.GetName()] = true
	}
}

// ghz reads several binary messages as varint-length-prefixed ones: the file
// must decode back to the same requests, in order.
func TestDelimitedRoundTrip(t *testing.T) {
	w := distinct("/b/", 50)
	r := bufio.NewReader(bytes.NewReader(delimited(w.reqs)))
	for i, want := range w.reqs {
		var got authv3.CheckRequest
		if err := (protodelim.UnmarshalOptions{MaxSize: -1}).UnmarshalFrom(r, &got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		var wantMsg authv3.CheckRequest
		if err := proto.Unmarshal(want, &wantMsg); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, &wantMsg) {
			t.Fatalf("request %d differs after the round trip", i)
		}
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("bytes left after the last request")
	}
}

// A ghz JSON report (its shape as ghz -O json writes it) becomes a result:
// OK calls are decisions with their latencies, anything else an RPC error.
func TestGhzResult(t *testing.T) {
	report := `{"date":"2026-11-29T21:00:00Z","count":4,"total":2000000000,"rps":2,
	"details":[
	 {"timestamp":"2026-11-29T21:00:00Z","latency":3000000,"error":"","status":"OK"},
	 {"timestamp":"2026-11-29T21:00:00Z","latency":1000000,"error":"","status":"OK"},
	 {"timestamp":"2026-11-29T21:00:01Z","latency":2000000,"error":"","status":"OK"},
	 {"timestamp":"2026-11-29T21:00:01Z","latency":9000000,"error":"rpc error: code = Unavailable desc = x","status":"Unavailable"}]}`
	r, err := ghzResult([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	if r.decisions != 3 || r.rpcErrors != 1 || r.window != 2*time.Second {
		t.Fatalf("decisions %d, errors %d, window %v; want 3, 1, 2s", r.decisions, r.rpcErrors, r.window)
	}
	if r.p50 != 2*time.Millisecond || r.p99 != 3*time.Millisecond {
		t.Fatalf("p50 %v p99 %v; want 2ms 3ms (errors carry no latency)", r.p50, r.p99)
	}
	if r.firstErr == nil || !strings.Contains(r.firstErr.Error(), "Unavailable") {
		t.Fatalf("first error %v", r.firstErr)
	}
	if _, err := ghzResult([]byte(`{"count":2,"details":[]}`)); err == nil {
		t.Fatal("a report without its details was accepted")
	}
}

// make bench-ghz installs the ghz release this file names.
func TestMakefilePinsGhz(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if want := "github.com/bojand/ghz/cmd/ghz@" + ghzVersion; !strings.Contains(string(b), want) {
		t.Fatalf("Makefile does not install %s", want)
	}
}
