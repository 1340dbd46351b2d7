package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate/floodgate/internal/config"
)

// The HTTP authorization door's rows: (a-http), a no-op HTTP server with
// the door's server settings, the ceiling of the protocol; (b-http),
// floodgate's HTTP door on Redis, the callers of (b) as Envoy's
// http_service sends them. The load generator speaks HTTP/1.1 itself over
// one keep-alive connection per request in flight, as Envoy's connection
// pool to an HTTP/1.1 cluster does, with requests written once.

// httpPathPrefix is the http_service path_prefix of (b-http)'s requests,
// which its floodgate instance strips (http_authz.path_prefix).
const httpPathPrefix = "/authz"

// httpRequest is caller i's authorization request as Envoy's http_service
// sends it for a GET of path: path_prefix + path, Host, the headers
// allowed_headers lists (x-api-key, and x-forwarded-for with Envoy's own
// address appended by its HTTP client), Content-Length: 0.
func httpRequest(path, apiKey string, i int) []byte {
	ip := "198.18." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	if i >= 1<<16 {
		ip = "198.19." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "GET %s%s HTTP/1.1\r\nhost: api.example.com\r\ncontent-length: 0\r\n", httpPathPrefix, path)
	fmt.Fprintf(&b, "x-api-key: %s\r\nx-forwarded-for: %s,127.0.0.1\r\nx-envoy-internal: true\r\n", apiKey, ip)
	fmt.Fprintf(&b, "x-request-id: 5f0e1b7c-8a43-4a59-9d2e-%012d\r\n\r\n", i)
	return b.Bytes()
}

// distinctHTTP is (b)'s callers as HTTP authorization requests.
func distinctHTTP(n int) workload {
	reqs := make([][]byte, n)
	for i := range reqs {
		reqs[i] = httpRequest("/b/items/"+strconv.Itoa(i%1000), "k_live_"+strconv.Itoa(10_000_000+i), i)
	}
	return workload{reqs: reqs, allow: true, method: httpMethod}
}

// httpMethod marks a workload of raw HTTP/1.1 requests.
const httpMethod = "HTTP/1.1"

func httpCache(k int) string { return fmt.Sprintf("http:%d", k) }

// isHTTP reports whether sc's requests go to an HTTP server.
func (sc scenario) isHTTP() bool { return sc.server == "noop-http" || sc.server == "redis-http" }

// The no-op HTTP server's settings: those of floodgate's door
// (cmd/floodgate/httpdoor.go), so the two differ only in what a request
// does.
const (
	noopHTTPReadHeaderTimeout = 5 * time.Second
	noopHTTPReadTimeout       = 10 * time.Second
	noopHTTPWriteTimeout      = 10 * time.Second
	noopHTTPIdleTimeout       = time.Hour + time.Minute
)

// httpClient drives an HTTP authorization server: each worker its own
// keep-alive connection, reopened when the server closes it.
type httpClient struct {
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func dialHTTP(target string) (*httpClient, error) {
	if err := CheckLoopback(target); err != nil {
		return nil, err
	}
	return &httpClient{target: target}, nil
}

func (c *httpClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// httpConn is one worker's connection.
type httpConn struct {
	c    *httpClient
	conn net.Conn
	r    *bufio.Reader
}

func (hc *httpConn) open() error {
	conn, err := net.DialTimeout("tcp", hc.c.target, 5*time.Second)
	if err != nil {
		return err
	}
	hc.c.mu.Lock()
	hc.c.conns = append(hc.c.conns, conn)
	hc.c.mu.Unlock()
	hc.conn = conn
	if hc.r == nil {
		hc.r = bufio.NewReaderSize(conn, 4096)
	} else {
		hc.r.Reset(conn)
	}
	return nil
}

// do sends req and reads the answer's status, discarding its body; the
// connection is dropped on an error, or when the answer closes it.
func (hc *httpConn) do(ctx context.Context, req []byte) (int, error) {
	if hc.conn == nil {
		if err := hc.open(); err != nil {
			return 0, err
		}
	}
	deadline, _ := ctx.Deadline()
	hc.conn.SetDeadline(deadline)
	status, keep, err := hc.roundTrip(req)
	if err != nil || !keep {
		hc.conn.Close()
		hc.conn = nil
	}
	return status, err
}

func (hc *httpConn) roundTrip(req []byte) (status int, keep bool, err error) {
	if _, err := hc.conn.Write(req); err != nil {
		return 0, false, err
	}
	line, err := hc.r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, false, fmt.Errorf("not an HTTP/1.1 status line: %q", line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, err
	}
	length, keep := 0, true
	for {
		h, err := hc.r.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, _ := bytes.Cut(h, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 || length > 1<<20 {
				return 0, false, fmt.Errorf("content-length %q", value)
			}
		case bytes.EqualFold(name, []byte("connection")) && bytes.EqualFold(value, []byte("close")):
			keep = false
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			return 0, false, errors.New("a chunked answer: the door's have a length")
		}
	}
	if _, err := hc.r.Discard(length); err != nil {
		return 0, false, err
	}
	return status, keep, nil
}

// drive runs one cell of w against the server, as client.drive does over
// gRPC: a 2xx is an allow.
func (c *httpClient) drive(ctx context.Context, w workload, cl cell) result {
	return driveCalls(ctx, cl, func(i int) callFunc {
		hc := &httpConn{c: c}
		next := i * 7919
		return func(ctx context.Context) (bool, error) {
			req := w.reqs[next%len(w.reqs)]
			next++
			status, err := hc.do(ctx, req)
			if err != nil {
				return true, err
			}
			if status >= 500 {
				return true, fmt.Errorf("status %d", status)
			}
			return (status/100 == 2) != w.allow, nil
		}
	})
}

// httpRows sets floodgate's HTTP door (b-http) against its own no-op HTTP
// server (a-http), by the server's CPU alone as the main table's ratios
// are, and against Check's (b), by server+Redis CPU: the same callers on
// the same redis-server. Nil when (b-http) did not run.
func httpRows(rows []row) [][]string {
	byID := byCell(rows)
	cells := [][]string{{"conc", "server+Redis µs/dec (b-http)", "server µs/req (a-http)", "(b-http) ÷ (a-http)", "server+Redis µs/dec (b)", "(b-http) ÷ (b)"}}
	for _, h := range rows {
		if h.sc.id != "b-http" {
			continue
		}
		ch := h.costs()
		if ch.n == 0 || !ch.redisOK {
			cells = append(cells, []string{strconv.Itoa(h.conc), "?", "?", "?", "?", "?"})
			continue
		}
		line := []string{strconv.Itoa(h.conc), fmt.Sprintf("%.1f", ch.total())}
		if a, ok := byID[cellID{"a-http", h.conc}]; !ok {
			line = append(line, "-", "-")
		} else if ca := a.costs(); ca.n == 0 || ca.server <= 0 {
			line = append(line, "?", "?")
		} else {
			line = append(line, fmt.Sprintf("%.1f", ca.server), fmt.Sprintf("%.2f", ch.total()/ca.server))
		}
		if b, ok := byID[cellID{"b", h.conc}]; !ok {
			line = append(line, "-", "-")
		} else if cb := b.costs(); cb.n == 0 || !cb.redisOK || cb.total() <= 0 {
			line = append(line, "?", "?")
		} else {
			line = append(line, fmt.Sprintf("%.1f", cb.total()), fmt.Sprintf("%.2f", ch.total()/cb.total()))
		}
		cells = append(cells, line)
	}
	if len(cells) == 1 {
		return nil
	}
	return cells
}

// httpNote says what the HTTP rows are, under the table.
var httpNote = strings.Join([]string{
	"floodgate's HTTP authorization door (b-http) against the no-op HTTP server (a-http) and against Check (b), the same callers on the same redis-server:",
	"server+Redis CPU per decision; (a-http) answers 200 to everything with the door's server settings; the load generator speaks HTTP/1.1, one keep-alive connection per request in flight",
}, "\n")

// ServeNoopHTTP serves an HTTP server that answers 200 to every request and
// looks at nothing, on listen (loopback: CheckLoopback) until ctx ends; it
// logs {"msg":"serving","http":ADDR} to stdout.
func ServeNoopHTTP(ctx context.Context, listen string, gogc int, stdout io.Writer) error {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(gogc)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }),
		ReadHeaderTimeout: noopHTTPReadHeaderTimeout, ReadTimeout: noopHTTPReadTimeout, WriteTimeout: noopHTTPWriteTimeout,
		IdleTimeout: noopHTTPIdleTimeout, MaxHeaderBytes: config.DefaultMaxHeaderBytes, DisableGeneralOptionsHandler: true,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	line, _ := json.Marshal(map[string]string{"msg": "serving", "http": lis.Addr().String()})
	fmt.Fprintf(stdout, "%s\n", line)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	srv.Close()
	return nil
}
