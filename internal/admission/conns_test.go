package admission

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock is a table's clock that moves only when told.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// serveBounded serves, through an HTTPGate of at most max connections
// (metrics in reg) on a clock the test moves, a handler that answers
// "decided", at once or, for /block, once release is closed.
func serveBounded(t *testing.T, max int, reg prometheus.Registerer) (g *HTTPGate, addr string, clock *fakeClock, release func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g = NewHTTPGate(HTTPOptions{Budget: NewBudget(1 << 20), Wait: 20 * time.Millisecond, Unread: func() []byte { return []byte(unreadAnswer) },
		MaxConns: max, Registerer: reg})
	clock = &fakeClock{}
	g.conns.now = clock.now
	blocked := make(chan struct{})
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			select {
			case <-blocked:
			case <-time.After(10 * time.Second):
			}
		}
		io.WriteString(w, "decided")
	})}
	go g.Serve(srv, l)
	var once sync.Once
	release = func() { once.Do(func() { close(blocked) }) }
	t.Cleanup(func() { release(); srv.Close() })
	return g, l.Addr().String(), clock, release
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closed requires that the server closed c.
func closed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("%s is still open (read %d bytes)", what, n)
	}
}

// waitConns polls until g counts n connections.
func waitConns(t *testing.T, g *HTTPGate, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); g.Conns() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted, want %d", g.Conns(), n)
		}
	}
}

// TestAtTheBoundTheLongestIdleConnectionMakesRoom: at MaxConns a new
// connection is served, and the one idle the longest is closed for it, a
// silent one (no request since its accept) as much as a keep-alive one.
func TestAtTheBoundTheLongestIdleConnectionMakesRoom(t *testing.T) {
	g, addr, clock, _ := serveBounded(t, 3, nil)
	a, b, c := dial(t, addr), dial(t, addr), dial(t, addr)
	for _, conn := range []net.Conn{a, b, c} {
		clock.advance(time.Second)
		if body(request(t, conn, 10)) != "decided" {
			t.Fatal("not decided")
		}
		allIdle(t, g)
	}
	clock.advance(time.Second)
	request(t, b, 10).Body.Close() // idle the longest: a, then c, then b
	allIdle(t, g)

	clock.advance(time.Second)
	d := dial(t, addr)
	if body(request(t, d, 10)) != "decided" {
		t.Fatal("the connection past the bound was not served")
	}
	allIdle(t, g)
	closed(t, a, "the connection idle the longest")
	silent := dial(t, addr) // evicts c
	closed(t, c, "the next idle the longest")
	clock.advance(time.Second)
	for _, conn := range []net.Conn{b, d} {
		request(t, conn, 10).Body.Close()
	}
	allIdle(t, g)
	e := dial(t, addr) // evicts the silent one, idle since its accept, before b and d
	closed(t, silent, "a connection silent since its accept")
	for _, conn := range []net.Conn{b, d, e} {
		if body(request(t, conn, 10)) != "decided" {
			t.Fatal("a connection used since was not kept")
		}
	}
	if n := testutil.ToFloat64(g.metrics.evicted); n != 3 {
		t.Errorf("%v evicted, want 3", n)
	}
	if n := testutil.ToFloat64(g.metrics.refused); n != 0 {
		t.Errorf("%v refused, want none", n)
	}
}

// TestWhileEveryConnectionIsBusyANewOneIsRefused: with every connection
// answering a request, a new one gets the Unread answer and is closed;
// once they are idle again, a new one is served.
func TestWhileEveryConnectionIsBusyANewOneIsRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	g, addr, _, release := serveBounded(t, 2, reg)
	busy := []net.Conn{dial(t, addr), dial(t, addr)}
	for _, c := range busy {
		io.WriteString(c, "GET /block HTTP/1.1\r\nHost: h\r\n\r\n")
	}
	waitConns(t, g, 2)
	waitPhase(t, g, func(tb *connTable) bool { return tb.idle.head == nil && tb.reading.head == nil })

	refused := dial(t, addr)
	io.WriteString(refused, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	refused.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(refused), nil)
	if err != nil {
		t.Fatalf("no answer to a connection past the bound: %v", err)
	}
	if resp.Header.Get("X-Ratelimit-Degraded") != "true" || !resp.Close {
		t.Errorf("refused with %d %v, want the Unread answer", resp.StatusCode, resp.Header)
	}
	closed(t, refused, "a refused connection")
	if n := testutil.ToFloat64(g.metrics.refused); n != 1 {
		t.Errorf("%v refused, want 1", n)
	}

	release()
	for _, c := range busy {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || body(resp) != "decided" {
			t.Fatalf("a busy connection's request: %v", err)
		}
	}
	allIdle(t, g)
	if body(request(t, dial(t, addr), 10)) != "decided" {
		t.Error("a new connection once the others are idle was not served")
	}
	if n := testutil.ToFloat64(g.metrics.evicted); n != 1 {
		t.Errorf("%v evicted, want 1", n)
	}
	want := map[string]float64{"floodgate_http_authz_connections": 2, "floodgate_http_authz_connections_refused_total": 1, "floodgate_http_authz_connections_evicted_total": 1}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
		if w, ok := want[mf.GetName()]; !ok || v != w {
			t.Errorf("%s %v, want %v", mf.GetName(), v, w)
		}
		delete(want, mf.GetName())
	}
	if len(want) > 0 {
		t.Errorf("not registered: %v", want)
	}
}

// allIdle waits until every connection g counts is idle: net/http reports
// a connection idle after its client may have read the answer.
func allIdle(t *testing.T, g *HTTPGate) {
	t.Helper()
	waitPhase(t, g, func(tb *connTable) bool {
		n := 0
		for c := tb.idle.head; c != nil; c = c.next {
			n++
		}
		return n == tb.open
	})
}

// waitPhase polls until ok holds of g's table.
func waitPhase(t *testing.T, g *HTTPGate, ok func(*connTable) bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		g.conns.mu.Lock()
		done := ok(g.conns)
		g.conns.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the connections did not reach the phase awaited")
		}
	}
}

// TestASlowRequestMakesRoomBeforeAnIdleConnection: a request arriving for
// more than SlowRequest is evicted before any idle connection; one that
// has just begun is not.
func TestASlowRequestMakesRoomBeforeAnIdleConnection(t *testing.T) {
	g, addr, clock, _ := serveBounded(t, 3, nil)
	idle := dial(t, addr)
	request(t, idle, 10).Body.Close()
	allIdle(t, g)
	clock.advance(time.Minute)
	slow := dial(t, addr)
	io.WriteString(slow, "GET / HTTP/1.1\r\nHost: h\r\nX-Pad: ")
	waitPhase(t, g, func(tb *connTable) bool { return tb.reading.head != nil })

	fresh := dial(t, addr) // fills the bound
	waitConns(t, g, 3)
	clock.advance(SlowRequest / 2)
	next := dial(t, addr) // the slow request is young yet: the longest idle goes
	closed(t, idle, "the idle connection, the slow request being younger than SlowRequest")
	clock.advance(SlowRequest)
	last := dial(t, addr)
	closed(t, slow, "the slow request")
	for _, c := range []net.Conn{fresh, next, last} {
		if body(request(t, c, 10)) != "decided" {
			t.Fatal("not decided")
		}
	}
}
