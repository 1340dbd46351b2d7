package main

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Redis a network hop away. On loopback a Redis round trip is tens of
// microseconds, as short as the thread wake-ups around it; a Redis on
// another host of the same zone answers in 0.5–1 ms. run --redis-rtt puts
// a delayProxy of floodbench's own between Redis and everything that talks
// to it as a client would (floodgate, envoyproxy/ratelimit, the (rt) and
// (naive) rows), so each round trip takes the hop's time more, and the
// latency table sets what a decision adds against (rt) measured through the
// same proxy. Redis' counters are read around it, directly.
//
// Floodbench's own rather than toxiproxy's in-process proxy: no module the
// benchmark would then depend on, and a delay that holds below a
// millisecond. Go's timers sleep in the network poller, which waits in
// whole milliseconds when nothing else is due, so a timer of 250 µs in an
// otherwise idle process fires after a millisecond; the proxy sleeps in the
// kernel instead (nanosleep on the goroutine's own thread, which the runtime
// replaces while it sleeps), whose timers keep the tens of microseconds.

// delayProxy forwards TCP connections from a loopback listener to target,
// holding every byte for half the round trip it adds in each direction.
// Bytes keep their order and nothing limits the rate: each chunk read
// leaves oneWay after it arrived, or at once when the chunk before it left
// later than that.
type delayProxy struct {
	ln     net.Listener
	target string
	oneWay time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// newDelayProxy listens on a free 127.0.0.1 port and forwards to target, a
// loopback address, adding rtt to every round trip.
func newDelayProxy(target string, rtt time.Duration) (*delayProxy, error) {
	if err := checkLoopback(target); err != nil {
		return nil, err
	}
	if rtt <= 0 {
		return nil, errors.New("the delaying proxy needs a round trip above 0")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, oneWay: rtt / 2, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the address clients dial instead of target.
func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// track records c and up so that close can end them; false once closed.
func (p *delayProxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		up.Close()
		return false
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	return true
}

// chunk is bytes read from one side and when they arrived.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies from src to dst, each chunk held until oneWay after it was
// read. Reading goes on while earlier chunks wait, so a pipeline of
// requests keeps its shape. When either side ends, both connections close.
func (p *delayProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			sleepUntil(c.at.Add(p.oneWay))
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
		for range q { // let the reader finish
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{b: buf[:n], at: time.Now()}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
}

// close stops listening, ends every forwarded connection and waits for
// their goroutines.
func (p *delayProxy) close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
