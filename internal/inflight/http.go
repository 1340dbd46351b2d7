package inflight

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"
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
	// be read in time (it closes the connection).
	Unread func() []byte
}

// HTTPGate reads the requests of an HTTP server within a Budget.
type HTTPGate struct{ o HTTPOptions }

// NewHTTPGate returns an HTTPGate.
func NewHTTPGate(o HTTPOptions) *HTTPGate {
	if o.Wait <= 0 || o.Budget == nil || o.Unread == nil {
		panic("inflight: HTTPOptions need a Budget, a positive Wait and an Unread answer")
	}
	return &HTTPGate{o: o}
}

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
	return srv.Serve(&meteredListener{Listener: l, g: g})
}

type meteredListener struct {
	net.Listener
	g *HTTPGate
}

func (l *meteredListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &meteredConn{Conn: c, g: l.g}, nil
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

// refuse writes the door's answer and closes the writing side, then reads
// what the client still sends for a moment (discarding it), so that the
// close that follows does not reset the connection under an answer the
// client has not read yet (net/http's closeWriteAndWait does the same for
// its 431).
func (c *meteredConn) refuse() {
	c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	c.Conn.Write(c.g.o.Unread())
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.Conn.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
	var scratch [4096]byte
	for {
		if _, err := c.Conn.Read(scratch[:]); err != nil {
			return
		}
	}
}

// state follows the connection through net/http's states.
func (c *meteredConn) state(st http.ConnState) {
	switch st {
	case http.StateActive:
		c.answering.Store(true)
	case http.StateIdle:
		c.release()
		c.answering.Store(false)
	case http.StateClosed, http.StateHijacked:
		c.release()
	}
}

func (c *meteredConn) release() {
	c.g.o.Budget.Give(c.held.Swap(0))
	c.read.Store(0)
}
