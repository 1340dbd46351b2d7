package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/admission"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/headerbytes"
)

// The HTTP server of a door with a listener of its own (door.Listener: the
// HTTP authorization door). Its requests are headers only, read whole by
// net/http before the door decides, within these bounds:
const (
	// httpReadHeaderTimeout bounds how long a request's headers may take
	// to arrive: a proxy sends them at once, a client that trickles them
	// holds its connection and its bytes no longer than this.
	httpReadHeaderTimeout = 5 * time.Second
	// httpReadTimeout bounds a whole request, body included (the door
	// reads none; net/http discards what a proxy sends after answering).
	httpReadTimeout = 10 * time.Second
	// httpWriteTimeout bounds writing an answer to a client that does not
	// read it.
	httpWriteTimeout = 10 * time.Second
	// httpIdleTimeout is longer than Envoy's default idle timeout of an
	// upstream connection (1 h, common_http_protocol_options.idle_timeout)
	// and nginx's keepalive_timeout (60 s): the proxy, not Floodgate,
	// closes an idle connection, so no request is sent on a connection
	// Floodgate is closing. What bounds the idle connections' memory is
	// listen.max_http_connections: at it the longest idle is closed for a
	// new one (admission.HTTPGate).
	httpIdleTimeout = time.Hour + time.Minute
)

// httpListener is one door's listener and the HTTP server on it.
type httpListener struct {
	door door.Listener
	lis  net.Listener
	srv  *http.Server
	gate *admission.HTTPGate
}

// newHTTPServer is the HTTP server of a door's listener: h behind the
// limits above and listen.max_header_bytes (a larger request is answered
// 431 by net/http itself).
func newHTTPServer(cfg *config.Config, h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    cfg.Listen.MaxHeaderBytes,
		// OPTIONS * is a request like any other for the door to decide,
		// not one for net/http to answer.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     zap.NewStdLog(log.Named("http")),
	}
}

// listenHTTP opens the listener of every door that has one, its request
// bytes in budget. On an error the listeners opened are closed.
func (s *server) listenHTTP(budget *admission.Budget) error {
	maxConns := 0
	var reg prometheus.Registerer
	if s.reg != nil { // a typed nil is not "no registry"
		reg = s.reg
	}
	for _, d := range s.doors {
		ld, ok := d.(door.Listener)
		if !ok || ld.Listen() == "" {
			continue
		}
		lis, err := net.Listen("tcp", ld.Listen())
		if err != nil {
			s.closeHTTP()
			return fmt.Errorf("listen.http %s: %w", ld.Listen(), err)
		}
		if maxConns == 0 {
			var from string
			maxConns, from = httpConnections(s.cfg.Listen.MaxHTTPConnections, debug.SetMemoryLimit(-1), openFilesLimit())
			s.log.Info("http connections", zap.Int("limit", maxConns), zap.String("limit_from", from))
		}
		// Header bytes net/http refuses but proxies forward are escaped,
		// so that the door decides every request a proxy sends it.
		s.https = append(s.https, &httpListener{door: ld, lis: headerbytes.Listener(lis),
			srv: newHTTPServer(s.cfg.Config, ld.Handler(), s.log.Named(ld.Name())),
			gate: admission.NewHTTPGate(admission.HTTPOptions{Budget: budget, Wait: admission.DefaultWait, Unread: ld.AnswerUnreadHTTP,
				MaxConns: maxConns, Registerer: reg}),
		})
	}
	return nil
}

// httpAddr is the address the first door's listener listens on ("" for
// none), for the "serving" line.
func (s *server) httpAddr() string {
	if len(s.https) == 0 {
		return ""
	}
	return s.https[0].lis.Addr().String()
}

// startHTTP serves every door's listener; a server that stops on its own
// ends serve, as the gRPC server does.
func (s *server) startHTTP() {
	for _, h := range s.https {
		go func() {
			if err := h.gate.Serve(h.srv, h.lis); !errors.Is(err, http.ErrServerClosed) {
				s.errc <- fmt.Errorf("%s: %w", h.door.Name(), err)
			}
		}()
	}
}

// drainHTTP finishes the requests in flight on every door's listener
// before ctx ends, then closes what is left.
func (s *server) drainHTTP(ctx context.Context) {
	for _, h := range s.https {
		if err := h.srv.Shutdown(ctx); err != nil {
			s.log.Warn("drain timed out; closing remaining HTTP connections", zap.String("door", h.door.Name()))
			h.srv.Close()
		}
	}
}

// closeHTTP closes the listeners of a server that did not start.
func (s *server) closeHTTP() {
	for _, h := range s.https {
		h.lis.Close()
	}
	s.https = nil
}

// Sizing listen.max_http_connections when the file leaves it 0: the
// fewest of these.
const (
	// httpConnsDefault: with memory and descriptors to spare, far more
	// than the proxies in front of one door hold (nginx: keepalive per
	// worker; Envoy: one per request in flight per worker).
	httpConnsDefault = 4096
	// httpConnBytes is what an idle connection costs the process, measured
	// (TestAnIdleHTTPConnectionsMemory: about 20 KiB), with room for
	// a busy one's garbage.
	httpConnBytes = 32 << 10
	// httpConnsShare: the connections get this share of the memory limit.
	httpConnsShare = 4
	// httpConnsFiles is the file descriptors left to the rest of the
	// process (gRPC clients, Redis, the admin port, files), or half the
	// limit when that is less.
	httpConnsFiles = 1024
)

// httpConnections is the bound on the door's connections and where it
// comes from: the file's, or sized from memLimit (the Go memory limit in
// force, math.MaxInt64 for none) and nofile (the process's limit of open
// files, 0 unknown).
func httpConnections(set int, memLimit int64, nofile uint64) (int, string) {
	if set > 0 {
		return set, "listen.max_http_connections"
	}
	n, from := httpConnsDefault, fmt.Sprintf("%d, the most without listen.max_http_connections", httpConnsDefault)
	if memLimit > 0 && memLimit < unlimited {
		if m := memLimit / httpConnsShare / httpConnBytes; m < int64(n) {
			n, from = int(m), fmt.Sprintf("1/%d of the memory limit (%d bytes) at %d KiB a connection", httpConnsShare, memLimit, httpConnBytes>>10)
		}
	}
	if nofile > 0 {
		if f := nofile - min(nofile/2, httpConnsFiles); f < uint64(n) {
			n, from = int(f), fmt.Sprintf("the open files limit (%d) less %d for the rest of the process", nofile, nofile-f)
		}
	}
	if n < config.MinHTTPConnections {
		n, from = config.MinHTTPConnections, from+fmt.Sprintf(", raised to the least, %d", config.MinHTTPConnections)
	}
	return n, from
}

// openFilesLimit is the process's soft limit of open files (which Go's
// runtime raises to the hard limit at start), 0 when unknown.
func openFilesLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil || l.Cur >= unlimited {
		return 0
	}
	return l.Cur
}
