// Package netfault is a TCP proxy that brings the faults of a network between
// a client and its server: latency and jitter, a bandwidth limit, a
// blackhole, a half-open connection, resets (before a request reaches the
// server, or after it has run and before its reply gets back), a byte limit
// and slicing. Tests put it between Floodgate and Redis; the benchmark driver
// puts it there to add a network round trip.
//
//	p, err := netfault.Start("127.0.0.1:6379") // listens on a free 127.0.0.1 port
//	if err != nil { ... }
//	defer p.Close()
//	// point the client at p.Addr()
//	id := p.Add(netfault.Latency{Dir: netfault.Both, Delay: time.Millisecond}) // a 2 ms round trip
//	...
//	p.Remove(id)
//
// A fault added to the Proxy acts on every connection through it, those open
// and those to come; one added to a Conn (from Proxy.Conns) acts on that
// connection alone, as when one of a client's pooled connections goes bad.
// Faults act on bytes as they arrive at the proxy: a chunk read while a
// Latency stands is released late even if the fault is removed meanwhile,
// and bytes dropped by a Blackhole are gone.
//
// It is a small equivalent of Shopify's toxiproxy, written because tests need
// what toxiproxy does not give: a fault on one chosen connection (toxiproxy
// picks connections at random, by "toxicity"), a half-open connection, and a
// reset timed after the server has answered part of a pipeline; and so as not
// to bring toxiproxy's HTTP API and logging dependencies into the module.
package netfault

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Dir is the direction of the bytes a fault acts on.
type Dir uint8

const (
	// Upstream is the client's bytes on their way to the server: requests.
	Upstream Dir = 1 << iota
	// Downstream is the server's bytes on their way to the client: replies.
	Downstream
	// Both is either direction.
	Both = Upstream | Downstream
)

func (d Dir) String() string {
	switch d {
	case Upstream:
		return "upstream"
	case Downstream:
		return "downstream"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Dir(%d)", uint8(d))
}

// Fault is one of the types below.
type Fault interface{ dir() Dir }

// Latency delays every chunk by Delay, plus or minus a uniformly random
// Jitter (never below zero), keeping the bytes in order: a chunk never
// overtakes the one before it, as on a TCP connection. With Dir Both, each
// direction is delayed, so a round trip takes twice Delay. On Linux a delay
// below a millisecond holds too (see sleepUntil).
type Latency struct {
	Dir           Dir
	Delay, Jitter time.Duration
}

// Bandwidth limits the bytes per second. Added to the Proxy it is one link
// shared by every connection (in each direction it names), as a network
// path is; added to a Conn, that connection's own.
type Bandwidth struct {
	Dir            Dir
	BytesPerSecond int
}

// Blackhole accepts bytes and drops them: the sender's writes succeed and
// nothing arrives. A connection's stream is then broken for good (the bytes
// are lost), as it would be on a network that dropped them.
type Blackhole struct{ Dir Dir }

// HalfOpen makes connections half-open: the proxy closes its connection to
// the server (which sees the client leave) while the client's stays open
// with nothing read from it and nothing sent to it, no FIN and no reset, as
// when the peer's host died or a middlebox forgot the connection. The
// client's writes succeed until its socket buffers fill. When the fault is
// removed, the connections it cut are reset, as a peer that comes back
// answers a connection it no longer knows. New connections accepted while
// it stands (on the Proxy) are cut from the start.
type HalfOpen struct{}

// Reset resets a connection (an RST to the client, a close to the server)
// once After more bytes have passed in Dir (0: at the next byte, which is
// dropped). Downstream, that is after the server has run what it answers:
// a pipeline whose replies are cut after After bytes got that far and no
// further. Upstream, the request that would pass the limit never reaches the
// server. Each connection it acts on is reset once; a Proxy's Reset also
// resets every connection opened while it stands, once After bytes have
// passed on it.
type Reset struct {
	Dir   Dir
	After int64
}

// LimitData closes a connection (a FIN both ways) once Bytes more bytes have
// passed in Dir: toxiproxy's limit_data.
type LimitData struct {
	Dir   Dir
	Bytes int64
}

// Slicer writes each chunk in slices of Size bytes, Delay apart, so that the
// reader meets partial messages.
type Slicer struct {
	Dir   Dir
	Size  int
	Delay time.Duration
}

func (f Latency) dir() Dir   { return f.Dir }
func (f Bandwidth) dir() Dir { return f.Dir }
func (f Blackhole) dir() Dir { return f.Dir }
func (HalfOpen) dir() Dir    { return Both }
func (f Reset) dir() Dir     { return f.Dir }
func (f LimitData) dir() Dir { return f.Dir }
func (f Slicer) dir() Dir    { return f.Dir }

// ID names a fault added, for Remove.
type ID uint64

// added is a fault in force: on the whole proxy, or on one connection.
type added struct {
	id   ID
	f    Fault
	pace [2]*pacer // Bandwidth: one per direction it limits (index dirIndex)
}

// Proxy is a TCP proxy from a loopback port to one upstream address. Safe
// for concurrent use.
type Proxy struct {
	ln       net.Listener
	upstream string

	// mu guards the faults (the proxy's and every connection's), the
	// connections and closed.
	mu     sync.Mutex
	faults []*added
	conns  []*Conn
	nextID ID
	closed bool
	wg     sync.WaitGroup

	bytes [2]atomic.Int64 // forwarded by every connection, by direction
}

// DialTimeout bounds the proxy's connection to the upstream server.
const DialTimeout = 2 * time.Second

// Start listens on a free 127.0.0.1 port and proxies every connection to
// upstream (host:port), dialled when the client connects. A client whose
// upstream connection fails is reset at once, as a refused connection would
// be. Close stops it.
func Start(upstream string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("netfault: upstream %q: %w", upstream, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netfault: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address (127.0.0.1:port): where the client connects.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the server's address.
func (p *Proxy) Upstream() string { return p.upstream }

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := append([]*Conn(nil), p.conns...)
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close(false)
	}
	p.wg.Wait()
	return err
}

// Add puts f in force on every connection, open or to come, and returns the
// ID that removes it. A HalfOpen cuts the open connections at once.
func (p *Proxy) Add(f Fault) ID {
	p.mu.Lock()
	a := p.newAdded(f)
	p.faults = append(p.faults, a)
	var cut []*Conn
	if _, ok := f.(HalfOpen); ok {
		cut = p.conns
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.cutOff(a.id)
	}
	return a.id
}

// Remove ends the fault id (on the proxy or on a connection); an unknown or
// removed id is ignored. Removing a HalfOpen resets the connections it cut.
func (p *Proxy) Remove(id ID) {
	p.mu.Lock()
	p.faults = without(p.faults, id)
	var cut []*Conn
	for _, c := range p.conns {
		c.faults = without(c.faults, id)
		if c.cutBy == id {
			cut = append(cut, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.close(true)
	}
}

// Clear removes every fault, the proxy's and the connections'.
func (p *Proxy) Clear() {
	p.mu.Lock()
	ids := make([]ID, 0, len(p.faults))
	for _, a := range p.faults {
		ids = append(ids, a.id)
	}
	for _, c := range p.conns {
		for _, a := range c.faults {
			ids = append(ids, a.id)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.Remove(id)
	}
}

// ResetAll resets every open connection now: toxiproxy's reset_peer.
func (p *Proxy) ResetAll() {
	for _, c := range p.Conns() {
		c.close(true)
	}
}

// Bytes returns the bytes forwarded so far each way, by every connection
// the proxy has carried.
func (p *Proxy) Bytes() (upstream, downstream int64) {
	return p.bytes[0].Load(), p.bytes[1].Load()
}

// Conns returns the open connections, oldest first.
func (p *Proxy) Conns() []*Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Conn(nil), p.conns...)
}

func (p *Proxy) newAdded(f Fault) *added {
	p.nextID++
	a := &added{id: p.nextID, f: f}
	if b, ok := f.(Bandwidth); ok {
		for _, d := range []Dir{Upstream, Downstream} {
			if b.Dir&d != 0 {
				a.pace[dirIndex(d)] = newPacer(b.BytesPerSecond)
			}
		}
	}
	return a
}

func without(fs []*added, id ID) []*added {
	out := fs[:0]
	for _, a := range fs {
		if a.id != id {
			out = append(out, a)
		}
	}
	clear(fs[len(out):])
	return out
}

func dirIndex(d Dir) int {
	if d == Downstream {
		return 1
	}
	return 0
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			return
		}
		c := &Conn{p: p, client: client, done: make(chan struct{})}
		for _, a := range p.faults {
			if _, ok := a.f.(HalfOpen); ok {
				c.cutBy = a.id
			}
		}
		p.conns = append(p.conns, c)
		p.wg.Add(1)
		p.mu.Unlock()
		go c.serve()
	}
}

// Conn is one client connection through the proxy and the proxy's
// connection to the server for it.
type Conn struct {
	p      *Proxy
	client net.Conn
	server net.Conn // nil until dialled, and when cut from the start
	done   chan struct{}
	once   sync.Once

	// Under p.mu.
	faults   []*added
	cutBy    ID              // the HalfOpen that cut it; 0: none
	passed   [2]map[ID]int64 // bytes each counting fault (Reset, LimitData) has seen pass, by direction
	released [2]time.Time    // when the last chunk each way is due out (Latency keeps order)
	fired    map[ID]bool     // the Resets that have acted on it

	bytes   [2]atomic.Int64 // forwarded, by direction
	writers [2]chan chunk   // each direction's queue to its writer
}

// Add puts f in force on this connection alone and returns the ID that
// removes it (Proxy.Remove). A HalfOpen cuts it at once.
func (c *Conn) Add(f Fault) ID {
	c.p.mu.Lock()
	a := c.p.newAdded(f)
	c.faults = append(c.faults, a)
	c.p.mu.Unlock()
	if _, ok := f.(HalfOpen); ok {
		c.cutOff(a.id)
	}
	return a.id
}

// Reset resets the connection now: an RST to the client, a close to the
// server.
func (c *Conn) Reset() { c.close(true) }

// Bytes returns the bytes forwarded so far each way.
func (c *Conn) Bytes() (upstream, downstream int64) {
	return c.bytes[0].Load(), c.bytes[1].Load()
}

// Done is closed when the connection is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// chunk is bytes read one way, due out at release; eof marks the end of the
// stream after the bytes before it.
type chunk struct {
	data    []byte
	release time.Time
	eof     bool
}

func (c *Conn) serve() {
	defer c.p.wg.Done()
	c.p.mu.Lock()
	cut := c.cutBy != 0
	c.p.mu.Unlock()
	if !cut {
		server, err := net.DialTimeout("tcp", c.p.upstream, DialTimeout)
		if err != nil {
			c.close(true)
			return
		}
		c.p.mu.Lock()
		c.server = server
		cut = c.cutBy != 0 // cut while dialling
		c.p.mu.Unlock()
		if cut {
			server.Close()
		}
	}
	if cut {
		<-c.done // held open, nothing read: until reset or the proxy closes
		return
	}
	for i := range c.writers {
		c.writers[i] = make(chan chunk, 1024)
	}
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); c.read(Upstream, c.client) }()
	go func() { defer wg.Done(); c.write(Upstream, c.server) }()
	go func() { defer wg.Done(); c.read(Downstream, c.server) }()
	go func() { defer wg.Done(); c.write(Downstream, c.client) }()
	wg.Wait()
}

// cutOff makes the connection half-open (HalfOpen id): its server side
// closed, its client side held.
func (c *Conn) cutOff(id ID) {
	c.p.mu.Lock()
	if c.cutBy == 0 {
		c.cutBy = id
	}
	server := c.server
	c.p.mu.Unlock()
	if server != nil {
		server.Close()
	}
}

// isCut reports whether the connection is half-open.
func (c *Conn) isCut() bool {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.cutBy != 0
}

// close closes both sides once, the client's with an RST when reset.
func (c *Conn) close(reset bool) {
	c.once.Do(func() {
		if tc, ok := c.client.(*net.TCPConn); ok && reset {
			tc.SetLinger(0) // close sends an RST
		}
		c.client.Close()
		c.p.mu.Lock()
		if c.server != nil {
			c.server.Close()
		}
		for i, o := range c.p.conns {
			if o == c {
				c.p.conns = append(c.p.conns[:i], c.p.conns[i+1:]...)
				break
			}
		}
		c.p.mu.Unlock()
		close(c.done)
	})
}

// verdict is what the faults make of a chunk read.
type verdict struct {
	keep    int  // bytes to forward (the chunk's first keep)
	reset   bool // then reset the connection
	closeIt bool // then close it (FIN)
	delay   time.Duration
}

// judge applies the counting and dropping faults in force on dir to a chunk
// of n bytes, under p.mu.
func (c *Conn) judge(dir Dir, n int) verdict {
	v := verdict{keep: n}
	i := dirIndex(dir)
	apply := func(a *added) {
		if a.f.dir()&dir == 0 {
			return
		}
		switch f := a.f.(type) {
		case Blackhole:
			v.keep = 0
		case Latency:
			d := f.Delay
			if f.Jitter > 0 {
				d += time.Duration(rand.Int64N(int64(2*f.Jitter)+1)) - f.Jitter
			}
			v.delay += max(d, 0)
		case Reset:
			if c.fired[a.id] {
				return
			}
			if left := c.count(i, a.id, f.After, n); left >= 0 {
				v.keep, v.reset = min(v.keep, left), true
				if c.fired == nil {
					c.fired = map[ID]bool{}
				}
				c.fired[a.id] = true
			}
		case LimitData:
			if left := c.count(i, a.id, f.Bytes, n); left >= 0 {
				v.keep, v.closeIt = min(v.keep, left), true
			}
		}
	}
	for _, a := range c.p.faults {
		apply(a)
	}
	for _, a := range c.faults {
		apply(a)
	}
	return v
}

// count adds n bytes to what fault id has seen pass in direction i and
// returns how many of them fit under limit, or -1 when all do and the limit
// is not reached. A limit of 0 is reached at the first byte.
func (c *Conn) count(i int, id ID, limit int64, n int) int {
	if c.passed[i] == nil {
		c.passed[i] = map[ID]int64{}
	}
	seen := c.passed[i][id]
	c.passed[i][id] = seen + int64(n)
	if limit > 0 && seen+int64(n) < limit {
		return -1
	}
	return int(max(0, min(int64(n), limit-seen)))
}

// read pumps one direction's bytes from src to its writer's queue, through
// the faults.
func (c *Conn) read(dir Dir, src net.Conn) {
	q := c.writers[dirIndex(dir)]
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if c.isCut() {
				if dir == Upstream {
					<-c.done // nothing more is read from the client
				}
				return
			}
			c.p.mu.Lock()
			v := c.judge(dir, n)
			now := time.Now()
			i := dirIndex(dir)
			release := now.Add(v.delay)
			if release.Before(c.released[i]) {
				release = c.released[i]
			}
			c.released[i] = release
			c.p.mu.Unlock()
			if v.keep > 0 {
				data := make([]byte, v.keep)
				copy(data, buf[:v.keep])
				if !c.enqueue(q, chunk{data: data, release: release}) {
					return
				}
			}
			if v.reset || v.closeIt {
				// After the bytes let through, in order.
				c.enqueue(q, chunk{eof: true, release: release, data: resetMark(v.reset)})
				return
			}
		}
		if err != nil {
			if c.isCut() {
				if dir == Upstream {
					<-c.done
				}
				return // the server side was closed by the fault, not by the server
			}
			c.enqueue(q, chunk{eof: true, release: time.Now()})
			return
		}
	}
}

// resetMark marks an eof chunk that resets rather than closes.
func resetMark(reset bool) []byte {
	if reset {
		return []byte{1}
	}
	return nil
}

func (c *Conn) enqueue(q chan chunk, ch chunk) bool {
	select {
	case q <- ch:
		return true
	case <-c.done:
		return false
	}
}

// write sends one direction's chunks to dst when they are due, shaped by
// the Bandwidth and Slicer faults in force as they leave.
func (c *Conn) write(dir Dir, dst net.Conn) {
	q := c.writers[dirIndex(dir)]
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// A Go timer, which close interrupts; for a short wait, all but its
	// last kernelSleep, the kernel for that, so that a delay below a
	// millisecond holds (the benchmark's added round trip is one). A long
	// wait is the timer's alone, as it always was: ending 150 ms waits in
	// the kernel made a far-away Redis' reconnection time out in
	// redisstore's TestAStoreFarAwayGetsItsConnectionsBack (why is not
	// pinned down), and a timer's lateness does not matter at that length.
	sleep := func(until time.Time) bool {
		d := time.Until(until)
		if d <= 0 {
			return true
		}
		if d > longWait {
			timer.Reset(d)
			select {
			case <-timer.C:
				return true
			case <-c.done:
				return false
			}
		}
		if d > kernelSleep {
			timer.Reset(d - kernelSleep)
			select {
			case <-timer.C:
			case <-c.done:
				return false
			}
		}
		sleepUntil(until)
		return true
	}
	for {
		var ch chunk
		select {
		case ch = <-q:
		case <-c.done:
			return
		}
		if !sleep(ch.release) {
			return
		}
		if ch.eof {
			c.close(len(ch.data) == 1)
			return
		}
		if c.isCut() {
			continue // half-open: nothing more goes either way
		}
		data := ch.data
		for len(data) > 0 {
			n := len(data)
			pacers, slice := c.shaping(dir)
			if slice.Size > 0 {
				n = min(n, slice.Size)
			}
			for _, pc := range pacers {
				n = min(n, pc.piece())
			}
			for _, pc := range pacers {
				if !sleep(pc.reserve(n)) {
					return
				}
			}
			if _, err := dst.Write(data[:n]); err != nil {
				if !c.isCut() { // a cut server side is the fault's, not an end
					c.close(false)
				}
				return
			}
			c.bytes[dirIndex(dir)].Add(int64(n))
			c.p.bytes[dirIndex(dir)].Add(int64(n))
			data = data[n:]
			if len(data) > 0 && slice.Delay > 0 && !sleep(time.Now().Add(slice.Delay)) {
				return
			}
		}
	}
}

// kernelSleep is the longest a writer sleeps in the kernel, deaf to close:
// more than a Go timer may be late by.
const kernelSleep = 2 * time.Millisecond

// longWait is the longest wait that ends in the kernel: a Go timer is late
// by a millisecond or so, which matters to a round trip of a few
// milliseconds, not to one of tens.
const longWait = 20 * time.Millisecond

// shaping returns the pacers of the Bandwidth faults in force on dir and
// the Slicer (the last added) if any.
func (c *Conn) shaping(dir Dir) ([]*pacer, Slicer) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	var pacers []*pacer
	var slice Slicer
	i := dirIndex(dir)
	for _, fs := range [][]*added{c.p.faults, c.faults} {
		for _, a := range fs {
			if a.f.dir()&dir == 0 {
				continue
			}
			switch f := a.f.(type) {
			case Bandwidth:
				if a.pace[i] != nil {
					pacers = append(pacers, a.pace[i])
				}
			case Slicer:
				slice = f
			}
		}
	}
	return pacers, slice
}

// pacer spaces bytes at a rate: each reservation of n bytes ends n/rate
// after the previous one ended (or now, if that is later).
type pacer struct {
	rate int
	mu   sync.Mutex
	next time.Time
}

func newPacer(rate int) *pacer { return &pacer{rate: max(rate, 1)} }

// piece is the most bytes one write may carry: 10 ms worth, so that
// connections sharing a link interleave.
func (p *pacer) piece() int { return max(1, p.rate/100) }

// reserve books n bytes and returns when they have gone out.
func (p *pacer) reserve(n int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	p.next = p.next.Add(time.Duration(int64(n) * int64(time.Second) / int64(p.rate)))
	return p.next
}
