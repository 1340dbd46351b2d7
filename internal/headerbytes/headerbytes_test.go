package headerbytes

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// pipeConn is a net.Conn whose reads come from r, at most chunk bytes at a
// time (0: as much as asked).
type pipeConn struct {
	net.Conn
	r     io.Reader
	chunk int
}

func (c *pipeConn) Read(p []byte) (int, error) {
	if c.chunk > 0 && len(p) > c.chunk {
		p = p[:c.chunk]
	}
	return c.r.Read(p)
}

// escaped reads in through a Conn, chunk bytes a read, reading into p of
// size bufSize each time.
func escaped(t *testing.T, in string, chunk, bufSize int) string {
	t.Helper()
	c := &Conn{Conn: nil}
	c.Conn = &pipeConn{r: strings.NewReader(in), chunk: chunk}
	var out bytes.Buffer
	p := make([]byte, bufSize)
	for {
		n, err := c.Read(p)
		out.Write(p[:n])
		if err == io.EOF {
			return out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestEscapesOnlyTheHeaderLinesOfEachRequest(t *testing.T) {
	in := "GET /a\x01b HTTP/1.1\r\n" + // the request line passes as sent
		"Host: x\r\n" +
		"User-Agent: a\x01b\x0bc\x1bd\x7fe\x00f\tg\xffh\r\n" +
		"Content-Length: 6\r\n" +
		"\r\n" +
		"\x01\x02\r\n\x03\x04" + // the body, as sent
		"\r\n" + // a blank line before the next request
		"GET /next HTTP/1.1\n" +
		"Cookie: k=\x01\n" +
		"\n"
	want := "GET /a\x01b HTTP/1.1\r\n" +
		"Host: x\r\n" +
		"User-Agent: a\xc0\x81b\xc0\x8bc\xc0\x9bd\xc1\xbfe\xc0\x80f\tg\xffh\r\n" +
		"Content-Length: 6\r\n" +
		"\r\n" +
		"\x01\x02\r\n\x03\x04" +
		"\r\n" +
		"GET /next HTTP/1.1\n" +
		"Cookie: k=\xc0\x81\n" +
		"\n"
	// Every way the bytes can arrive and be asked for gives the same.
	for _, chunk := range []int{0, 1, 2, 3, 7} {
		for _, size := range []int{1, 2, 5, 4096} {
			if got := escaped(t, in, chunk, size); got != want {
				t.Fatalf("chunks of %d, reads of %d:\n got %q\nwant %q", chunk, size, got, want)
			}
		}
	}
}

func TestAChunkedBodyOrHTTP2EndsTheEscaping(t *testing.T) {
	chunked := "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\na\x01b\r\n0\r\n\r\nGET / HTTP/1.1\r\nX: \x01\r\n\r\n"
	if got := escaped(t, chunked, 0, 4096); got != chunked {
		t.Errorf("after a chunked body: %q, want it as sent", got)
	}
	h2 := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x01\x04"
	if got := escaped(t, h2, 1, 1); got != h2 {
		t.Errorf("HTTP/2 with prior knowledge: %q, want it as sent", got)
	}
}

// TestNetHTTPDecidesWhatItRefusedBefore: through the Listener, net/http
// hands the handler a request it answered 400 without.
func TestNetHTTPDecidesWhatItRefusedBefore(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan string, 4)
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Get("X-Api-Key") + "|" + r.Header.Get("User-Agent")
			w.WriteHeader(http.StatusTeapot)
		})}
		sl := l
		if wrap {
			sl = Listener(l)
		}
		go srv.Serve(sl)
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET /_floodgate HTTP/1.1\r\nHost: door\r\nX-Api-Key: k\x01\r\nUser-Agent: \x7f\r\n\r\n"+
			"GET /_floodgate HTTP/1.1\r\nHost: door\r\nX-Api-Key: k2\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if !wrap {
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("net/http alone answered %d: the premise (a 400 for a control byte) no longer holds", resp.StatusCode)
			}
		} else {
			if resp.StatusCode != http.StatusTeapot {
				t.Fatalf("through the Listener: %d, want the handler's answer", resp.StatusCode)
			}
			if got := <-seen; got != "k\xc0\x81|\xc1\xbf" {
				t.Errorf("the handler saw %q", got)
			}
			// The connection goes on: the next request is read as sent.
			resp, err = http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusTeapot {
				t.Fatalf("the second request: %v %v", resp, err)
			}
			if got := <-seen; got != "k2|" {
				t.Errorf("the second request: the handler saw %q", got)
			}
		}
		c.Close()
		srv.Close()
	}
}

// BenchmarkRead is the cost of reading an ordinary authorization request
// (nginx's, about 400 bytes, nothing to escape) through a Conn.
func BenchmarkRead(b *testing.B) {
	req := "GET /_floodgate HTTP/1.1\r\nHost: shop.example\r\nX-Original-URI: /api/items?page=1\r\nX-Original-Method: GET\r\n" +
		"X-Forwarded-For: 198.51.100.1, 127.0.0.1\r\nX-Api-Key: key-1\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0\r\n" +
		"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.5\r\nCookie: session=0123456789abcdef\r\n\r\n"
	r := strings.NewReader(req)
	c := &Conn{Conn: &pipeConn{r: r}}
	p := make([]byte, 4096)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(req)
		for {
			if _, err := c.Read(p); err != nil {
				break
			}
		}
	}
}
