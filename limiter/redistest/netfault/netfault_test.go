package netfault

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run the proxy in front of a TCP echo server of their own: what
// is tested is the proxy's handling of bytes, which needs no particular
// protocol. Times are only ever bounded from below (a delay is at least what
// the fault says), never from above: that would be a speed assertion.

// echo is an upstream server that writes back what it reads, and records
// what it read and whether its client went away.
type echo struct {
	ln   net.Listener
	mu   sync.Mutex
	got  []byte
	gone chan struct{} // closed when a connection reads EOF or an error
	once sync.Once
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln, gone: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.mu.Lock()
						e.got = append(e.got, buf[:n]...)
						e.mu.Unlock()
						c.Write(buf[:n])
					}
					if err != nil {
						e.once.Do(func() { close(e.gone) })
						return
					}
				}
			}()
		}
	}()
	return e
}

func (e *echo) received() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]byte(nil), e.got...)
}

func startProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := Start(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads len(msg) bytes back within 5s.
func roundTrip(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading back %q: %v", msg, err)
	}
	return string(buf)
}

// silent requires that nothing arrives on c for a while: how long is
// a choice of the test, not a property of the proxy (a blackhole never
// answers, however long one waits).
func silent(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s: read %q, %v; want nothing (a read timeout)", what, buf[:n], err)
	}
}

// waitConns waits until the proxy holds n open connections.
func waitConns(t *testing.T, p *Proxy, n int) []*Conn {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cs := p.Conns()
		if len(cs) == n {
			return cs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections through the proxy, want %d", len(cs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestProxyForwardsBothWays(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	if got := roundTrip(t, c, "hello"); got != "hello" {
		t.Fatalf("echo through the proxy: %q", got)
	}
	// A pump counts its bytes once written, which may be after the echo
	// is back.
	counts := func(what string, bytes func() (int64, int64), want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			up, down := bytes()
			if up == want && down == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s forwarded %d up, %d down; want %d and %d", what, up, down, want, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	counts("the connection", waitConns(t, p, 1)[0].Bytes, 5)
	c.Close()
	roundTrip(t, dial(t, p), "again")
	counts("the proxy, over two connections,", p.Bytes, 10)
	if p.Upstream() != e.ln.Addr().String() {
		t.Fatalf("Upstream %q", p.Upstream())
	}
}

func TestLatencyDelaysEachWayAndKeepsOrder(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")
	const delay, jitter = 30 * time.Millisecond, 20 * time.Millisecond
	id := p.Add(Latency{Dir: Both, Delay: delay, Jitter: jitter})
	start := time.Now()
	var want bytes.Buffer
	for i := 0; i < 20; i++ { // separate writes: separate chunks, each with its own jitter
		msg := []byte{byte('a' + i)}
		want.Write(msg)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // spreads the writes into chunks; not synchronisation
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("with jitter the bytes came back as %q, want %q: order lost", got, want.Bytes())
	}
	if floor := 2 * (delay - jitter); took < floor {
		t.Fatalf("a round trip took %v, below the %v two delays less their jitter allow", took, floor)
	}
	p.Remove(id)
	if got := roundTrip(t, c, "after"); got != "after" {
		t.Fatalf("after removing the latency: %q", got)
	}
}

// Round trips through a Latency of half a round trip each way, measured
// against the same echo server reached directly (the two taking turns, so
// the machine's load falls on both alike), each take at least the round
// trip added, and their median is longer than the direct one's by at least
// as much, below a millisecond too. Only a lower bound: how much longer the
// machine makes it is not the proxy's to promise.
func TestLatencyAddsItsRoundTripBelowAMillisecond(t *testing.T) {
	e := startEcho(t)
	for _, rtt := range []time.Duration{500 * time.Microsecond, time.Millisecond} {
		p := startProxy(t, e.ln.Addr().String())
		p.Add(Latency{Dir: Both, Delay: rtt / 2})
		direct, err := net.Dial("tcp", e.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		proxied := dial(t, p)
		const n = 60
		var ds, ps []time.Duration
		timed := func(c net.Conn) time.Duration {
			t0 := time.Now()
			roundTrip(t, c, "ping\n")
			return time.Since(t0)
		}
		for i := 0; i < n; i++ {
			ds = append(ds, timed(direct))
			ps = append(ps, timed(proxied))
		}
		slices.Sort(ds)
		slices.Sort(ps)
		if ps[0] < rtt {
			t.Errorf("rtt %v: the fastest round trip through the proxy took %v", rtt, ps[0])
		}
		if added := ps[n/2] - ds[n/2]; added < rtt {
			t.Errorf("rtt %v: median through the proxy %v, direct %v: %v added, want at least %v", rtt, ps[n/2], ds[n/2], added, rtt)
		}
		t.Logf("rtt %v: median direct %v, through the proxy %v", rtt, ds[n/2], ps[n/2])
		direct.Close()
		proxied.Close()
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Under a Latency, pipelined writes come out whole and in order (a Redis
// pipeline must), and closing the proxy ends the connections it forwards.
func TestLatencyKeepsAPipelineInOrderAndCloseEndsIt(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	p.Add(Latency{Dir: Both, Delay: time.Millisecond})
	c := dial(t, p)
	var want strings.Builder
	for i := 0; i < 200; i++ {
		want.WriteString(strings.Repeat(string(rune('a'+i%26)), 1+i*37%500) + "\n")
	}
	go io.WriteString(c, want.String())
	c.SetDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want.String() {
		t.Fatalf("read back %d bytes (%v), not the %d written in order", len(got), err, want.Len())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a forwarded connection still open after close")
	}
}

func TestBandwidthPacesALinkSharedByConnections(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	const rate = 20_000 // bytes a second
	p.Add(Bandwidth{Dir: Upstream, BytesPerSecond: rate})
	a, b := dial(t, p), dial(t, p)
	msg := bytes.Repeat([]byte("x"), 2_000)
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range []net.Conn{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Write(msg)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.ReadFull(c, make([]byte, len(msg)))
		}()
	}
	wg.Wait()
	// 4,000 bytes on one 20,000 B/s link: 200 ms at least (the first 10 ms
	// piece leaves at once).
	if took, floor := time.Since(start), 190*time.Millisecond; took < floor {
		t.Fatalf("4,000 bytes over a shared 20,000 B/s link took %v, under %v: the connections do not share the link", took, floor)
	}
	if got := len(e.received()); got != 2*len(msg) {
		t.Fatalf("the server got %d bytes, want %d", got, 2*len(msg))
	}
}

func TestBlackholeAcceptsAndDropsBytes(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "ping")
	id := p.Add(Blackhole{Dir: Upstream})
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatalf("a write into a blackhole failed: %v", err)
	}
	silent(t, c, "a request into a blackhole")
	if got := string(e.received()); got != "ping" {
		t.Fatalf("the server got %q, want only the ping before the blackhole", got)
	}
	p.Remove(id)
	if got := roundTrip(t, c, "back"); got != "back" {
		t.Fatalf("after the blackhole: %q", got)
	}
}

func TestAFaultOnOneConnectionSparesTheOthers(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	a := dial(t, p)
	roundTrip(t, a, "a")
	b := dial(t, p)
	roundTrip(t, b, "b")
	conns := waitConns(t, p, 2)
	conns[0].Add(Blackhole{Dir: Downstream})
	a.Write([]byte("a2"))
	silent(t, a, "the faulty connection")
	if got := roundTrip(t, b, "b2"); got != "b2" {
		t.Fatalf("the other connection: %q", got)
	}
}

func TestHalfOpenClosesTheServerSideAndHoldsTheClient(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "ping")
	id := p.Add(HalfOpen{})
	select {
	case <-e.gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw its client leave")
	}
	if _, err := c.Write([]byte("into the void")); err != nil {
		t.Fatalf("a write on a half-open connection failed at once: %v", err)
	}
	silent(t, c, "a half-open connection")
	// A connection made while it stands is cut from the start.
	d := dial(t, p)
	d.Write([]byte("new"))
	silent(t, d, "a connection opened while half-open stands")
	p.Remove(id)
	for _, conn := range []net.Conn{c, d} {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := conn.Read(make([]byte, 16))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("after the half-open ended: %v, want a reset", err)
		}
	}
	if got := roundTrip(t, dial(t, p), "fresh"); got != "fresh" {
		t.Fatalf("a new connection after: %q", got)
	}
}

func TestResetAfterTheServerAnsweredPartOfAPipeline(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")
	p.Add(Reset{Dir: Downstream, After: 5})
	if _, err := c.Write([]byte("one;two;three;")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if string(got) != "one;t" || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %q, %v; want the first 5 bytes of the answer, then a reset", got, err)
	}
	// The server ran the whole pipeline: only its answer was cut.
	deadline := time.Now().Add(5 * time.Second)
	for string(e.received()) != "warmone;two;three;" {
		if time.Now().After(deadline) {
			t.Fatalf("the server got %q", e.received())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestResetBeforeARequestReachesTheServer(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")
	p.Add(Reset{Dir: Upstream})
	c.Write([]byte("never"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%v, want a reset", err)
	}
	if got := string(e.received()); got != "warm" {
		t.Fatalf("the server got %q, want only what came before the reset", got)
	}
}

func TestLimitDataClosesAfterTheBytes(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	p.Add(LimitData{Dir: Downstream, Bytes: 4})
	c.Write([]byte("abcdefgh"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if string(got) != "abcd" || err != nil {
		t.Fatalf("read %q, %v; want 4 bytes, then the end of the stream", got, err)
	}
}

func TestSlicerSplitsChunks(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	const delay = 5 * time.Millisecond
	p.Add(Slicer{Dir: Downstream, Size: 2, Delay: delay})
	start := time.Now()
	if got := roundTrip(t, c, "abcdefgh"); got != "abcdefgh" {
		t.Fatalf("sliced: %q", got)
	}
	if took, floor := time.Since(start), 3*delay; took < floor {
		t.Fatalf("8 bytes in slices of 2, %v apart, took %v", delay, took)
	}
}

func TestResetAllAndARefusedUpstream(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")
	p.ResetAll()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 4)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after ResetAll: %v, want a reset", err)
	}
	e.ln.Close() // nothing listens upstream any more
	// The reset may come before the client's connect returns, or after.
	d, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
	if err == nil {
		defer d.Close()
		d.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = d.Read(make([]byte, 4))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("with the upstream refusing: %v, want a reset", err)
	}
}

func TestCloseEndsEveryGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	e := startEcho(t)
	p, err := Start(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	roundTrip(t, c, "x")
	p.Add(Latency{Dir: Both, Delay: time.Hour}) // a chunk waiting an hour must not hold Close
	c.Write([]byte("y"))
	if err := p.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
	c.Close()
	e.ln.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+1 { // the echo's connection goroutine may linger a moment
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartRefusesABadUpstream(t *testing.T) {
	if _, err := Start("no-port"); err == nil {
		t.Fatal("Start accepted an upstream without a port")
	}
}
