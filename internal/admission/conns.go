package admission

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The connections of an HTTP server are bounded too (HTTPOptions.MaxConns):
// each open connection holds a goroutine, its buffers and a file
// descriptor whether or not it ever sends a request, and a keep-alive
// connection may stay idle for the server's IdleTimeout. Without a bound, a
// client holding thousands of idle connections grows the process past its
// memory limit and takes the descriptors the proxies' own connections need.
//
// At the bound, a new connection is still accepted and served: room is made
// for it by closing (evicting) another, in this order:
//
//  1. the connection whose request has been arriving the longest, if that
//     is more than SlowRequest (a proxy writes a request at once; a client
//     trickling its headers holds its connection up to the server's
//     ReadHeaderTimeout);
//  2. else the connection idle the longest: one waiting for its next
//     request, or for its first since it was accepted. A proxy's pooled
//     connections are used over and over, so the longest idle is seldom
//     one of them, and an idle one its proxy reconnects for;
//  3. else, every connection being busy with a request, the new connection
//     is refused: it gets the door's failure-mode answer (HTTPOptions.Unread,
//     as a request that found no room in the budget) and is closed.
//
// A connection is counted from its accept until net/http reports it closed
// (or, evicted, until it is closed).

// SlowRequest is how long a request may take to arrive (from its first byte
// to the end of its headers) before its connection is the first to be
// evicted for a new one.
const SlowRequest = time.Second

// maxRefusing bounds the refusals being written at once: beyond it a
// connection to refuse is closed without an answer.
const maxRefusing = 64

// connMetrics count what the bound did.
type connMetrics struct {
	refused, evicted prometheus.Counter
}

func newConnMetrics(reg prometheus.Registerer, t *connTable) connMetrics {
	m := connMetrics{
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_http_authz_connections_refused_total",
			Help: "Connections to the HTTP authorization door refused at listen.max_http_connections, every open one busy with a request: answered by the failure mode and closed.",
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_http_authz_connections_evicted_total",
			Help: "Connections to the HTTP authorization door closed at listen.max_http_connections to make room for a new one: the longest idle, or one whose request was arriving for more than a second.",
		}),
	}
	if reg == nil {
		return m
	}
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "floodgate_http_authz_connections",
		Help: "Connections open to the HTTP authorization door (at most listen.max_http_connections).",
	}, func() float64 { return float64(t.count()) })
	for _, c := range []prometheus.Collector{m.refused, m.evicted, open} {
		if err := reg.Register(c); err != nil {
			// A second listener of the same registry: count in the first's.
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err)
			}
			if ec, ok := are.ExistingCollector.(prometheus.Counter); ok {
				switch c {
				case m.refused:
					m.refused = ec
				case m.evicted:
					m.evicted = ec
				}
			}
		}
	}
	return m
}

// Where a connection is in its table.
const (
	phaseIdle      = iota // waiting for a request (the idle list)
	phaseReading          // reading a request's headers (the reading list)
	phaseAnswering        // its request read, being answered (no list)
	phaseGone             // closed or evicted: no longer counted
)

// connTable is the open connections of one listener, in two lists oldest
// first: the idle ones by when they went idle, the ones reading a request
// by when its first byte came.
type connTable struct {
	max int
	now func() time.Time

	mu            sync.Mutex
	open          int
	idle, reading connList
}

// connList is a doubly linked list of connections through their prev and
// next, oldest at head.
type connList struct{ head, tail *meteredConn }

func (l *connList) push(c *meteredConn) {
	c.prev, c.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *connList) remove(c *meteredConn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
}

func (t *connTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

// list is where a connection in phase p is kept (nil: none).
func (t *connTable) list(p int) *connList {
	switch p {
	case phaseIdle:
		return &t.idle
	case phaseReading:
		return &t.reading
	}
	return nil
}

// move puts c in phase p, at the tail of its list, since now. Under mu.
func (t *connTable) move(c *meteredConn, p int) {
	if l := t.list(c.phase); l != nil {
		l.remove(c)
	}
	c.phase, c.since = p, t.now()
	if l := t.list(p); l != nil {
		l.push(c)
	}
}

// admit counts c, accepted, as idle. At the bound it evicts another
// connection, returned for the caller to close, or, none being evictable,
// refuses c (ok false).
func (t *connTable) admit(c *meteredConn) (evict *meteredConn, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open >= t.max {
		now := t.now()
		switch r := t.reading.head; {
		case r != nil && now.Sub(r.since) >= SlowRequest:
			evict = r
		default:
			evict = t.idle.head
		}
		if evict == nil {
			return nil, false
		}
		t.move(evict, phaseGone)
		t.open--
	}
	t.open++
	c.phase = phaseGone // in no list yet
	t.move(c, phaseIdle)
	return evict, true
}

// to moves c to phase p, unless it is gone; reading only from idle.
func (t *connTable) to(c *meteredConn, p int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case c.phase == phaseGone, p == phaseReading && c.phase != phaseIdle:
		return
	case p == phaseGone:
		t.open--
	}
	t.move(c, p)
}

// refuse answers a connection refused at the bound and closes it, in the
// background; beyond maxRefusing at once it closes it without an answer.
func (l *meteredListener) refuse(c net.Conn) {
	l.g.metrics.refused.Inc()
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		writeAndDrain(c, l.g.o.Unread())
		c.Close()
	}()
}

// writeAndDrain writes answer on c and closes the writing side, then reads
// what the client still sends for a moment (discarding it), so that the
// close that follows does not reset the connection under an answer the
// client has not read yet (net/http's closeWriteAndWait does the same for
// its 431).
func writeAndDrain(c net.Conn, answer []byte) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(answer)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
	var scratch [4096]byte
	for {
		if _, err := c.Read(scratch[:]); err != nil {
			return
		}
	}
}
