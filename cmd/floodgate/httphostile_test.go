package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/admission"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
)

// hostileDoor serves the HTTP door as serve does (listenHTTP, startHTTP:
// the same server, limits and budget gate) in this process, on the memory
// store, with 16 KiB of headers at most and the original URI read from
// X-Original-URI when a request has one, until the test ends.
func hostileDoor(t *testing.T) string {
	t.Helper()
	cfg, st, reg := storeFrom(t, "hostile.yaml", `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "", max_header_bytes: 16384}
http_authz: {original_uri_header: X-Original-URI}
policies:
  - {name: per-key, key: ["header:x-api-key", client_ip], capacity: 1, refill_per_second: 1/60}
`)
	s := &server{cfg: cfg, log: zap.NewNop(), errc: make(chan error, 1)}
	s.doors = doors.Build(cfg, door.Env{Store: st, Log: s.log, Registerer: reg})
	if err := s.listenHTTP(admission.NewBudget(8 << 20)); err != nil {
		t.Fatal(err)
	}
	s.startHTTP()
	t.Cleanup(func() {
		s.drainHTTP(t.Context())
		select {
		case err := <-s.errc:
			t.Errorf("the door's server stopped on its own: %v", err)
		default:
		}
	})
	return s.httpAddr()
}

// raw writes req on a new connection and reads one answer.
func raw(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(c, req) // the server may answer before it has read everything
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to %.80q...: %v", req, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func get(headers ...string) string {
	return "GET /x HTTP/1.1\r\nHost: api.example.com\r\n" + strings.Join(headers, "") + "\r\n"
}

// TestHostileHTTPRequestsAreBoundedAndAnswered: whatever a client of the
// door sends, it gets an answer (a decision, or net/http's 400 or 431 for
// what is not HTTP or too large), the door keeps deciding, and nothing
// crashes: huge headers, many headers, bytes that are not UTF-8, bytes
// that are not allowed in a header, garbage, a request line without end.
func TestHostileHTTPRequestsAreBoundedAndAnswered(t *testing.T) {
	addr := hostileDoor(t)
	decided := func(what string, resp *http.Response, body string) {
		t.Helper()
		if resp.StatusCode != 200 && resp.StatusCode != 429 {
			t.Errorf("%s: %d %q, want a decision", what, resp.StatusCode, body)
		}
	}
	for _, tc := range []struct {
		name   string
		req    string
		status int // 0: a decision
	}{
		{"headers under max_header_bytes", get("X-Api-Key: a\r\n", "X-Pad: "+strings.Repeat("p", 12<<10)+"\r\n"), 0},
		{"headers over max_header_bytes", get("X-Api-Key: b\r\n", "X-Pad: "+strings.Repeat("p", 64<<10)+"\r\n"), 431},
		{"a megabyte of headers", get(strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 1024)), 431},
		{"two thousand small headers", get(strings.Repeat("X-N: 1\r\n", 2000), "X-Api-Key: c\r\n"), 0},
		{"a key that is not UTF-8", get("X-Api-Key: \xff\xfe\xc3\x28\r\n"), 0},
		{"a NUL in a header value (escaped, then decided: internal/headerbytes)", get("X-Api-Key: a\x00b\r\n"), 0},
		{"a header name with a space", get("X Api Key: a\r\n"), 400},
		{"a path with bytes Envoy would refuse", "GET /x/\xff%2e%2E/../..;a=b HTTP/1.1\r\nHost: h\r\nX-Api-Key: d\r\n\r\n", 0},
		{"a path with a broken escape (net/http's URL parser refuses it)", "GET /x/%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400},
		{"the same in nginx's original URI header", get("X-Original-URI: /x/%zz\xff\r\n", "X-Api-Key: e\r\n"), 0},
		{"garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400},
		{"a request line of a megabyte", "GET /" + strings.Repeat("a", 1<<20) + " HTTP/1.1\r\nHost: h\r\n\r\n", 431},
	} {
		resp, body := raw(t, addr, tc.req)
		if tc.status == 0 {
			decided(tc.name, resp, body)
		} else if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %q, want %d", tc.name, resp.StatusCode, body, tc.status)
		}
	}
	// A key that is not UTF-8 is a bucket of its own, as any other value.
	if resp, _ := raw(t, addr, get("X-Api-Key: \xff\xfe\xc3\x28\r\n")); resp.StatusCode != 429 {
		t.Errorf("the same non-UTF-8 key again: %d, want 429 (its bucket is spent)", resp.StatusCode)
	}
	// Still deciding after all that.
	resp, _ := raw(t, addr, get("X-Api-Key: fresh\r\n"))
	if resp.StatusCode != 200 || resp.Header.Get("Ratelimit-Limit") != "1" {
		t.Errorf("a plain request afterwards: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestASlowHTTPClientIsCutOff: a client that sends part of its headers and
// then nothing is disconnected once httpReadHeaderTimeout has passed, and
// the door answers others meanwhile.
func TestASlowHTTPClientIsCutOff(t *testing.T) {
	t.Parallel()
	addr := hostileDoor(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: h\r\nX-Api-Key: sl")
	start := time.Now()
	if resp, _ := raw(t, addr, get("X-Api-Key: other\r\n")); resp.StatusCode != 200 {
		t.Errorf("another client while one is slow: %d", resp.StatusCode)
	}
	c.SetReadDeadline(time.Now().Add(httpReadHeaderTimeout + 10*time.Second))
	n, err := c.Read(make([]byte, 1024))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the slow client was still connected %v later", time.Since(start))
	}
	if waited := time.Since(start); waited < httpReadHeaderTimeout-time.Second {
		t.Errorf("the slow client was cut off after %v, before its %v", waited, httpReadHeaderTimeout)
	}
	_ = n // whatever net/http wrote before closing (nothing, or a 408)
}

// TestManyHTTPConnectionsAtOnce: a hundred connections each asking at once
// all get decisions (bounded in count and time).
func TestManyHTTPConnectionsAtOnce(t *testing.T) {
	addr := hostileDoor(t)
	const n = 100
	errs := make(chan error, n)
	for i := range n {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: h\r\nX-Api-Key: k%d\r\n\r\n", i)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
