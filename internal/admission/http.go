package admission

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTP requests draw on the Budget too (the HTTP authorization door, whose
// requests are headers: the body is not read). net/http reads a request's
// headers whole before any handler runs, so the bytes are counted where
// they are read: on the connection. The HTTP server must be built with the
// gate's Listener and ConnState (HTTPGate.Serve does both).
//
// The first HTTPFree bytes of each request are read as they come and
// counted (an ordinary request is never held up by large ones, and an idle
// keep-alive connection holds nothing); beyond them, each read first takes
// its bytes from the budget, waiting up to Wait. A request whose bytes find
// no room in time is answered without being read further: the door's
// failure-mode answer (HTTPOptions.Unread) is written on the connection,
// which is then closed, as the gRPC gate answers a Check it could not read.
// A request's bytes are given back once it has been answered (the
// connection goes idle) or the connection closes.

// HTTPFree is how many bytes of one HTTP request are read without waiting
// for the budget: the size of a stream's window (StreamWindow), as for
// gRPC, and more than any proxy's ordinary authorization request.
const HTTPFree = StreamWindow

// HTTPOptions configure an HTTPGate.
type HTTPOptions struct {
	// Budget is the server's, shared with the gRPC gate.
	Budget *Budget
	// Wait is the longest a read waits for its bytes, positive.
	Wait time.Duration
	// Unread is the whole HTTP/1.1 response to a request that could not
	// be read in time (it closes the connection), and to a connection
	// refused at MaxConns.
	Unread func() []byte
	// MaxConns bounds the connections open at once, positive (conns.go:
	// at the bound the longest idle is closed for a new one).
	MaxConns int
	// Registerer, if set, gets the connections' metrics.
	Registerer prometheus.Registerer
}

// HTTPGate reads the requests of an HTTP server within a Budget, on at
// most MaxConns connections.
type HTTPGate struct {
	o       HTTPOptions
	conns   *connTable
	metrics connMetrics
}

// NewHTTPGate returns an HTTPGate.
func NewHTTPGate(o HTTPOptions) *HTTPGate {
	if o.Wait <= 0 || o.Budget == nil || o.Unread == nil || o.MaxConns <= 0 {
		panic("inflight: HTTPOptions need a Budget, a positive Wait, an Unread answer and a positive MaxConns")
	}
	g := &HTTPGate{o: o, conns: &connTable{max: o.MaxConns, now: time.Now}}
	g.metrics = newConnMetrics(o.Registerer, g.conns)
	return g
}

// Conns is how many connections are open.
func (g *HTTPGate) Conns() int { return g.conns.count() }

// Serve serves srv on l, its connections' reads counted in the budget;
// srv's ConnState, if any, still runs. It returns srv.Serve's error.
func (g *HTTPGate) Serve(srv *http.Server, l net.Listener) error {
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if mc, ok := c.(*meteredConn); ok {
			mc.state(st)
		}
		if next != nil {
			next(c, st)
		}
	}
	return srv.Serve(&meteredListener{Listener: l, g: g, refusing: make(chan struct{}, maxRefusing)})
}

type meteredListener struct {
	net.Listener
	g        *HTTPGate
	refusing chan struct{} // a token for each refusal being written
}

// Accept returns the next connection the table admits, having closed the
// one evicted for it; a connection refused is answered in the background
// and the next one accepted.
func (l *meteredListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		mc := &meteredConn{Conn: c, g: l.g}
		evict, ok := l.g.conns.admit(mc)
		if !ok {
			l.refuse(c)
			continue
		}
		if evict != nil {
			l.g.metrics.evicted.Inc()
			evict.Conn.Close()
		}
		return mc, nil
	}
}

// meteredConn counts the bytes read for the request being read. Its reads
// come from the connection's serving goroutine, and while a request is
// handled from net/http's background read too, which is not counted; its
// states come from the serving goroutine, and from the server's Shutdown
// for an idle connection.
type meteredConn struct {
	net.Conn
	g *HTTPGate
	// answering is set from the moment a request has been read
	// (StateActive) until the connection waits for the next (StateIdle):
	// reads then are the background read or the discarding of a body, not
	// a request's headers.
	answering atomic.Bool
	held      atomic.Int64 // bytes of the budget this request holds
	read      atomic.Int64 // bytes read for this request
	// reading is set from a request's first byte until the connection is
	// idle again, so that only that first read goes to the table.
	reading atomic.Bool

	// Under the table's mu: where the connection is, since when, and its
	// neighbours in the phase's list.
	phase      int
	since      time.Time
	prev, next *meteredConn
}

// errUnread ends the reading of a request that found no room in time. It
// is a read *net.OpError, which net/http closes the connection on without
// writing an answer of its own (isCommonNetReadError).
var errUnread = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("inflight: no room for the request's bytes in time")}

func (c *meteredConn) Read(p []byte) (int, error) {
	if c.answering.Load() || len(p) == 0 {
		return c.Conn.Read(p)
	}
	b := c.g.o.Budget
	if c.read.Load() < HTTPFree {
		n, err := c.Conn.Read(p)
		if n > 0 && !c.reading.Swap(true) {
			c.g.conns.to(c, phaseReading)
		}
		c.read.Add(int64(n))
		c.held.Add(b.TakeNow(int64(n)))
		return n, err
	}
	took, ok := b.Take(context.Background(), int64(len(p)), c.g.o.Wait)
	if !ok {
		c.refuse()
		return 0, errUnread
	}
	n, err := c.Conn.Read(p)
	b.Give(took - int64(n))
	c.read.Add(int64(n))
	c.held.Add(int64(n))
	return n, err
}

// refuse writes the door's answer (writeAndDrain); net/http closes the
// connection on errUnread.
func (c *meteredConn) refuse() { writeAndDrain(c.Conn, c.g.o.Unread()) }

// state follows the connection through net/http's states.
func (c *meteredConn) state(st http.ConnState) {
	switch st {
	case http.StateActive:
		c.answering.Store(true)
		c.g.conns.to(c, phaseAnswering)
	case http.StateIdle:
		c.release()
		c.g.conns.to(c, phaseIdle)
		c.reading.Store(false)
		c.answering.Store(false)
	case http.StateClosed, http.StateHijacked:
		c.release()
		c.g.conns.to(c, phaseGone)
	}
}

func (c *meteredConn) release() {
	c.g.o.Budget.Give(c.held.Swap(0))
	c.read.Store(0)
}
