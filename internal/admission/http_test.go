package admission

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

const unreadAnswer = "HTTP/1.1 200 OK\r\nX-Ratelimit-Degraded: true\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

// serveGated serves a handler that answers "decided" through an HTTPGate
// on b, on a loopback port, until the test ends.
func serveGated(t *testing.T, b *Budget) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := NewHTTPGate(HTTPOptions{Budget: b, Wait: 20 * time.Millisecond, Unread: func() []byte { return []byte(unreadAnswer) }, MaxConns: 64})
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 1 << 20, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "decided")
	})}
	go g.Serve(srv, l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// request writes a GET with a header of pad bytes to c and reads the answer.
func request(t *testing.T, c net.Conn, pad int) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nX-Pad: "+strings.Repeat("p", pad)+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func body(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}

// waitIdle polls until b holds nothing.
func waitIdle(t *testing.T, b *Budget) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); b.InUse() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the budget still holds %d bytes after every request was answered", b.InUse())
		}
	}
}

// TestHTTPRequestsHoldTheirBytesUntilAnswered: small and large requests
// pass while there is room; each one's bytes are given back once answered,
// and an idle keep-alive connection holds none.
func TestHTTPRequestsHoldTheirBytesUntilAnswered(t *testing.T) {
	b := NewBudget(1 << 20)
	addr := serveGated(t, b)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, pad := range []int{10, 300 << 10, 10} {
		if resp := request(t, c, pad); resp.StatusCode != 200 || body(resp) != "decided" {
			t.Fatalf("a request of %d bytes: %d", pad, resp.StatusCode)
		}
		waitIdle(t, b)
	}
}

// TestAnHTTPRequestWithoutRoomIsAnsweredUnread: while another request
// holds the budget, a large one waits, then gets the failure mode's answer
// in place of being read, and the connection closes; a small one still
// passes; once the holder is gone, the large one fits.
func TestAnHTTPRequestWithoutRoomIsAnsweredUnread(t *testing.T) {
	b := NewBudget(HTTPFree + 16<<10)
	addr := serveGated(t, b)
	// A slow client: the first 60 KiB of its headers, and nothing more.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(slow, "GET / HTTP/1.1\r\nHost: h\r\nX-Pad: "+strings.Repeat("p", 60<<10))
	for deadline := time.Now().Add(5 * time.Second); b.InUse() < 60<<10; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the slow request's bytes were not counted: %d in use", b.InUse())
		}
	}

	big, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	resp := request(t, big, 200<<10)
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Degraded") != "true" || !resp.Close || body(resp) != "" {
		t.Fatalf("a large request without room: %d %v, want the Unread answer", resp.StatusCode, resp.Header)
	}
	big.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := big.Read(make([]byte, 1)); err == nil {
		t.Errorf("the connection stayed open after the Unread answer (read %d bytes)", n)
	}

	small, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if resp := request(t, small, 100); body(resp) != "decided" {
		t.Fatal("a small request while the budget is held was not decided")
	}

	slow.Close()
	waitIdle(t, b)
	again, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if resp := request(t, again, 70<<10); body(resp) != "decided" {
		t.Error("a large request once the budget is free was not decided")
	}
}
