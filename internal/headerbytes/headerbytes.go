// Package headerbytes lets net/http read HTTP/1.1 requests whose header
// values hold bytes it refuses but proxies forward.
//
// nginx and HAProxy accept control bytes (0x01–0x08, 0x0b, 0x0c, 0x0e–0x1f,
// 0x7f) in a header value and pass them on; Go's net/http answers such a
// request 400 before any handler runs (server.go readRequest,
// httpguts.ValidHeaderFieldValue). For an authorizer that 400 is a request
// it never decided, which a proxy may read as "the authorizer is down" and
// let through. Listener's connections escape each such byte in the header
// section of every request before net/http reads it, so the door decides
// the request as sent, byte for byte but for those.
//
// A byte c is written as the two-byte overlong UTF-8 form of c
// (0xC0|c>>6, 0x80|c&0x3F): obs-text, which net/http accepts, and which no
// valid UTF-8 holds, so two values that differ read as two values; a
// client that sends those two raw bytes reads as one that sent c, which
// gives it nothing it could not get by sending c. CR and LF keep their
// meaning (they end lines); NUL is escaped too.
//
// Only the header lines are touched: the request line passes as sent
// (net/http refuses a control byte there, as every proxy does), and so
// does a body of Content-Length bytes. A chunked body, or an HTTP/2
// preface, ends the escaping for the rest of the connection: what follows
// is read as sent.
package headerbytes

import (
	"bytes"
	"net"
	"strconv"
)

// Listener returns l with its connections' request header bytes escaped.
func Listener(l net.Listener) net.Listener { return &listener{Listener: l} }

type listener struct{ net.Listener }

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c}, nil
}

// Conn is a connection whose reads are escaped as the package says.
type Conn struct {
	net.Conn
	s   scanner
	in  []byte // what escape writes into when the bytes grow
	out []byte // escaped, not yet returned
	err error  // the read's error, returned once out is empty
}

// Read returns the connection's bytes, escaped.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.out) > 0 {
		n := copy(p, c.out)
		c.out = c.out[n:]
		if len(c.out) == 0 && c.err != nil {
			err := c.err
			c.err = nil
			return n, err
		}
		return n, nil
	}
	if c.s.state == passthrough {
		return c.Conn.Read(p)
	}
	n, err := c.Conn.Read(p)
	if n == 0 {
		return 0, err
	}
	w := c.s.escape(p[:n], c.spill(p[:n]))
	if w == nil {
		return n, err // nothing to escape: p holds the bytes as read
	}
	m := copy(p, w)
	if m == len(w) {
		return m, err
	}
	c.out = append(c.out[:0], w[m:]...)
	c.err = err
	return m, nil
}

// spill is the buffer escape writes into when it must grow the bytes.
func (c *Conn) spill(b []byte) []byte {
	if cap(c.in) < 2*len(b) {
		c.in = make([]byte, 0, 2*len(b))
	}
	return c.in[:0]
}

// The scanner's states.
const (
	requestLine = iota // the request line, or the blank lines before one
	headerLine         // a header line, or the blank line ending the header section
	body               // left bytes of a Content-Length body
	passthrough        // from here on, the connection's bytes as sent
)

// scanner follows the requests of one connection.
type scanner struct {
	state int
	// lineLen counts the current line's bytes but CR.
	lineLen int
	// name holds the start of the current header line (its name, up to
	// maxName bytes), to recognise Content-Length and Transfer-Encoding.
	name    []byte
	inValue bool
	value   []byte // the value of a Content-Length or Transfer-Encoding line
	keep    bool   // value is being collected
	length  int64  // the current request's Content-Length, -1 for none
	chunked bool
	left    int64  // bytes of the body still to pass
	first   []byte // the request line's start, to recognise h2Preface
	started bool
}

const maxName = 32

// escape scans b. It returns nil when b needs no change, else the escaped
// bytes, built in spill.
func (s *scanner) escape(b, spill []byte) []byte {
	if !s.started {
		s.started, s.length = true, -1
	}
	var out []byte // nil until the first byte that needs escaping
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch s.state {
		case passthrough:
			if out != nil {
				out = append(out, b[i:]...)
			}
			return out
		case body:
			n := int64(len(b) - i)
			if n > s.left {
				n = s.left
			}
			if out != nil {
				out = append(out, b[i:i+int(n)]...)
			}
			s.left -= n
			i += int(n) - 1
			if s.left == 0 {
				s.startRequest()
			}
			continue
		case requestLine:
			if s.lineLen < len(h2Preface) && len(s.first) < len(h2Preface) {
				s.first = append(s.first, c)
				if string(s.first) == h2Preface {
					s.state = passthrough
				}
			}
			if c == '\n' {
				if s.lineLen > 0 {
					s.state = headerLine
				}
				s.lineLen = 0
				s.first = s.first[:0]
			} else if c != '\r' {
				s.lineLen++
			}
		case headerLine:
			if c == '\n' {
				if s.lineLen == 0 {
					s.endHead()
				} else {
					s.endLine()
				}
				s.lineLen = 0
				break
			}
			if c == '\r' {
				break
			}
			if s.inValue && !s.keep {
				// The fast path: a value's bytes up to the line's end.
				j := i
				for j < len(b) && b[j] != '\n' && b[j] != '\r' && !refused(b[j]) {
					j++
				}
				if j > i {
					if out != nil {
						out = append(out, b[i:j]...)
					}
					s.lineLen += j - i
					i = j - 1
					continue
				}
			}
			s.lineLen++
			if !s.inValue {
				if c == ':' {
					s.inValue = true
					s.keep = equalFold(s.name, "content-length") || equalFold(s.name, "transfer-encoding")
				} else if len(s.name) < maxName {
					s.name = append(s.name, c)
				}
			} else if s.keep && len(s.value) < 64 {
				s.value = append(s.value, c)
			}
			if refused(c) {
				if out == nil {
					out = append(spill, b[:i]...)
				}
				out = append(out, 0xC0|c>>6, 0x80|c&0x3F)
				continue
			}
		}
		if out != nil {
			out = append(out, c)
		}
	}
	return out
}

// h2Preface is how an HTTP/2 connection with prior knowledge starts.
const h2Preface = "PRI * HTTP/2.0"

// refused reports whether net/http refuses c in a header value: a control
// byte other than HTAB (CR and LF end lines before this is asked).
func refused(c byte) bool { return c < 0x20 && c != '\t' || c == 0x7f }

// endLine ends a header line: a Content-Length or Transfer-Encoding one is
// remembered for the body that follows the header section.
func (s *scanner) endLine() {
	if s.keep {
		v := string(bytes.TrimSpace(s.value))
		switch {
		case equalFold(s.name, "content-length"):
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				s.length = n
			}
		default:
			s.chunked = true // net/http reads any transfer-encoding as chunked or refuses it
		}
	}
	s.name, s.value, s.inValue, s.keep = s.name[:0], s.value[:0], false, false
}

// endHead ends a request's header section: its body, if any, follows.
func (s *scanner) endHead() {
	s.endLine()
	switch {
	case s.chunked:
		s.state = passthrough
	case s.length > 0:
		s.state, s.left = body, s.length
	default:
		s.startRequest()
	}
}

// startRequest readies the scanner for the next request's line.
func (s *scanner) startRequest() {
	s.state, s.lineLen, s.length, s.chunked = requestLine, 0, -1, false
	s.first = s.first[:0]
}

// equalFold reports whether b is s, ignoring ASCII case.
func equalFold(b []byte, s string) bool {
	return len(b) == len(s) && bytes.EqualFold(b, []byte(s))
}
