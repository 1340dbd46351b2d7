package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/headerbytes"
	"github.com/floodgate/floodgate/internal/inflight"
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
	// Floodgate is closing.
	httpIdleTimeout = time.Hour + time.Minute
)

// httpListener is one door's listener and the HTTP server on it.
type httpListener struct {
	door door.Listener
	lis  net.Listener
	srv  *http.Server
	gate *inflight.HTTPGate
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
func (s *server) listenHTTP(budget *inflight.Budget) error {
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
		// Header bytes net/http refuses but proxies forward are escaped,
		// so that the door decides every request a proxy sends it.
		s.https = append(s.https, &httpListener{door: ld, lis: headerbytes.Listener(lis),
			srv:  newHTTPServer(s.cfg.Config, ld.Handler(), s.log.Named(ld.Name())),
			gate: inflight.NewHTTPGate(inflight.HTTPOptions{Budget: budget, Wait: inflight.DefaultWait, Unread: ld.UnreadHTTP}),
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
