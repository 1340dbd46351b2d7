package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestPprofServesOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.168.1.1:0", ":0", "example.com:0"} {
		if stop, err := servePprof(addr, zap.NewNop()); err == nil {
			stop()
			t.Errorf("--pprof %s was accepted; want loopback only", addr)
		}
	}
	core, logs := observer.New(zap.InfoLevel)
	stop, err := servePprof("127.0.0.1:0", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	entries := logs.FilterMessage("pprof").All()
	if len(entries) != 1 {
		t.Fatalf("logged %d pprof lines, want 1", len(entries))
	}
	addr, _ := entries[0].ContextMap()["addr"].(string)
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("GET /debug/pprof/: %s\n%.200s", resp.Status, body)
	}
}
