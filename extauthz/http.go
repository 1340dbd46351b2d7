package extauthz

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/pipeline"
)

// The HTTP authorization door: the other half of Envoy's ext_authz API,
// the protocol of its http_service (source/extensions/filters/common/
// ext_authz/ext_authz_http_impl.cc), which Istio's envoyExtAuthzHttp,
// nginx's auth_request, Traefik's ForwardAuth, Caddy's forward_auth and
// HAProxy (through a Lua action) speak too. A proxy sends the door a
// request describing its client's; a 2xx lets the client's request
// through, any other status below 500 is the answer the client gets, a 5xx
// is the proxy's own failure.
//
// The door decides the Server's policies through the Server's decide step,
// with the Server's store, metrics and report of who is limited: allow is
// 200 with the RateLimit fields as response headers, deny 429 with them,
// Retry-After and the JSON body, a store failure the failure mode's answer
// (never a 5xx unless the operator asked for one, HTTPOptions.OnFailure).

// HTTPOptions configure an HTTPServer.
type HTTPOptions struct {
	// Request says how an authorization request is read.
	Request HTTPRequestOptions
	// OnFailure is what the door answers when the store cannot decide:
	// decide.Allow (200 marked x-ratelimit-degraded), decide.Deny (429 with
	// the Server's FailureRetryAfter) or decide.Error (503, which every
	// proxy takes for "no answer", so that its own failure mode decides).
	OnFailure decide.OnFailure
	// Registerer, if set, gets the door's own metrics (its outcomes and
	// latency; the policies' decisions are counted with Check's).
	Registerer prometheus.Registerer
}

// HTTPServer is the HTTP authorization door, an http.Handler. It shares its
// Server's store, metrics and recorder and keeps an engine of its own (the
// same policies, with the door's client address rule: Engine.WithTrustedHops),
// swapped on reload like the Server's.
type HTTPServer struct {
	s       *Server
	state   atomic.Pointer[httpState]
	metrics *HTTPMetrics
}

// httpState is what a reload swaps: the engine with its counters and
// tallies, how requests are read and the failure mode.
type httpState struct {
	*serverState
	read HTTPRequestOptions // header names canonical
	pipe *pipeline.Pipeline // the Server's, with the door's failure mode
}

// HTTPMetrics are the door's own collectors.
type HTTPMetrics struct {
	// Requests counts authorization requests by outcome: allowed, denied,
	// unmatched, degraded_allowed, degraded_denied, error (the store could
	// not decide and on_failure says error: 503), unread (answered by the
	// failure mode before it was read: see HTTPServer.Unread).
	Requests *prometheus.CounterVec
	// Latency is the time to answer a request once read.
	Latency prometheus.Histogram

	outcomes *pipeline.Outcomes
	unread   prometheus.Counter
}

func newHTTPMetrics(reg prometheus.Registerer) *HTTPMetrics {
	m := &HTTPMetrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_http_authz_requests_total",
			Help: "HTTP authorization door requests (listen.http) by outcome: allowed, denied, unmatched, degraded_allowed, degraded_denied, error (503 by http_authz.on_failure: error), unread.",
		}, []string{"outcome"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floodgate_http_authz_duration_seconds",
			Help:    "Time to answer an HTTP authorization request once its headers are read.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Latency)
	}
	m.outcomes = pipeline.NewOutcomes(m.Requests, pipeline.OutcomeAllowed, pipeline.OutcomeDenied, pipeline.OutcomeUnmatched,
		pipeline.OutcomeDegradedAllowed, pipeline.OutcomeDegradedDenied, pipeline.OutcomeError)
	m.unread = m.Requests.WithLabelValues("unread")
	return m
}

// NewHTTPServer returns the HTTP door deciding e's policies (e is s's
// engine, or one WithTrustedHops made from it) through s.
func NewHTTPServer(s *Server, e *Engine, o HTTPOptions) *HTTPServer {
	h := &HTTPServer{s: s, metrics: newHTTPMetrics(o.Registerer)}
	h.SetEngine(e, o)
	return h
}

// SetEngine switches to a new engine, way of reading requests and failure
// mode (o's Registerer is not read) atomically: requests in flight finish
// on the old ones.
func (h *HTTPServer) SetEngine(e *Engine, o HTTPOptions) {
	h.state.Store(&httpState{serverState: h.s.newState(e), read: o.Request.canonical(), pipe: h.s.pipeline(o.OnFailure)})
}

// Engine returns the engine in use.
func (h *HTTPServer) Engine() *Engine { return h.state.Load().engine }

// Metrics returns the door's own collectors.
func (h *HTTPServer) Metrics() *HTTPMetrics { return h.metrics }

// ServeHTTP decides one authorization request. Whatever the request's
// method and path, it is a question about the original request (only the
// proxy's headers carry anything else); the body, if any, is not read.
func (h *HTTPServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	st := h.state.Load()
	sc := scratchPool.Get().(*scratch)
	defer func() {
		if p := recover(); p != nil {
			// A bug must not become an outage (or, with fail-open, a bypass).
			h.s.log.Error("HTTP authorization request panicked", zap.Any("panic", p), zap.Stack("stack"))
			h.failed(w, st, false)
		}
		sc.reset()
		scratchPool.Put(sc)
		h.metrics.Latency.Observe(time.Since(start).Seconds())
	}()
	v := &sc.view
	v.resetHTTP(r, &st.read)
	out, o := h.s.decide(r.Context(), st.serverState, st.pipe, sc, start)
	h.metrics.outcomes.Count(out)
	h.write(w, st, out, &o)
}

// failed answers, and counts, the failure mode's outcome.
func (h *HTTPServer) failed(w http.ResponseWriter, st *httpState, grpc bool) {
	out := st.pipe.Failure()
	h.metrics.outcomes.Count(out)
	h.write(w, st, out, &outcome{grpc: grpc})
}

// write renders out: a pass untouched is 200 with nothing; an allow 200
// with the RateLimit fields; a deny 429 with them, Retry-After and the
// JSON body; the failure mode's error 503.
func (h *HTTPServer) write(w http.ResponseWriter, st *httpState, out pipeline.Outcome, o *outcome) {
	switch {
	case out.Answer == pipeline.Unmatched || out.Answer == pipeline.ShadowOnly:
		w.WriteHeader(http.StatusOK)
	case out.Answer == pipeline.Error:
		w.Header()["Content-Type"] = []string{"text/plain; charset=utf-8"}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, storeFailedBody)
	case out.Failed:
		f := &outcome{degraded: true, grpc: o.grpc}
		if out.Answer == pipeline.Deny {
			st.engine.writeDeny(w, f, out.RetryAfter)
		} else {
			st.engine.writeOK(w, f)
		}
	case out.Answer == pipeline.Allow:
		st.engine.writeOK(w, o)
	default:
		st.engine.writeDeny(w, o, limiter.RetryAfter(o.results))
	}
}

// storeFailedBody is the 503's, for whoever reads a proxy's log of it.
const storeFailedBody = "floodgate: the store cannot decide (http_authz.on_failure: error)\n"

// Unread is the door's answer, by the failure mode, to a request the
// server could not read within its budget of request bytes in flight, as
// Check's Unread: a whole HTTP/1.1 response that closes the connection,
// for the server to write in place of reading the rest of the request.
func (h *HTTPServer) Unread() []byte {
	h.metrics.unread.Inc()
	var rw rawResponse
	st := h.state.Load()
	h.write(&rw, st, st.pipe.Failure(), &outcome{})
	return rw.bytes()
}

// writeOK writes an allow: 200 with the RateLimit fields.
func (e *Engine) writeOK(w http.ResponseWriter, o *outcome) {
	r := getRenderer()
	defer r.release()
	e.renderOK(o, r)
	writeRendered(w, http.StatusOK, r, -1)
}

// writeDeny writes a deny: 429 with the RateLimit fields, Retry-After and
// the JSON body (and for a gRPC caller grpc-status, as denyResponse says).
func (e *Engine) writeDeny(w http.ResponseWriter, o *outcome, retryAfter time.Duration) {
	r := getRenderer()
	defer r.release()
	bodyStart := e.renderDeny(o, retryAfter, r)
	writeRendered(w, http.StatusTooManyRequests, r, bodyStart)
}

// writeRendered writes r's headers and, from bodyStart (< 0: none), its
// body, in two allocations: the buffer's string and the headers' values.
// Each header replaces any value w holds (there is none: the door sets
// every header it sends).
func writeRendered(w http.ResponseWriter, status int, r *renderer, bodyStart int) {
	text := string(r.buf)
	vals := make([]string, len(r.hdrs))
	h := w.Header()
	for i := range r.hdrs {
		rh := &r.hdrs[i]
		if rh.inBuf {
			vals[i] = text[rh.start:rh.end]
		} else {
			vals[i] = rh.fixed
		}
		h[httpKey(rh.key)] = vals[i : i+1 : i+1]
	}
	w.WriteHeader(status)
	if bodyStart >= 0 {
		io.WriteString(w, text[bodyStart:])
	}
}

// httpKey is a rendered header's name in net/http's canonical form, which
// net/http's own handling of the response (its Content-Type sniffing among
// others) looks names up by.
func httpKey(k string) string {
	switch k {
	case HeaderLimit:
		return "Ratelimit-Limit"
	case HeaderRemaining:
		return "Ratelimit-Remaining"
	case HeaderReset:
		return "Ratelimit-Reset"
	case HeaderPolicy:
		return "Ratelimit-Policy"
	case HeaderRateLimit:
		return "Ratelimit"
	case HeaderRetryAfter:
		return "Retry-After"
	case HeaderDegraded:
		return "X-Ratelimit-Degraded"
	case HeaderContentType:
		return "Content-Type"
	case HeaderGRPCStatus:
		return "Grpc-Status"
	case HeaderGRPCPushback:
		return "Grpc-Retry-Pushback-Ms"
	}
	return textproto.CanonicalMIMEHeaderKey(k)
}

// rawResponse collects a response to write as bytes (Unread).
type rawResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *rawResponse) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}
func (w *rawResponse) WriteHeader(status int)      { w.status = status }
func (w *rawResponse) Write(b []byte) (int, error) { return w.body.Write(b) }

// bytes renders the response as HTTP/1.1, closing the connection.
func (w *rawResponse) bytes() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", w.status, http.StatusText(w.status))
	w.Header().Set("Content-Length", strconv.Itoa(w.body.Len()))
	w.Header().Set("Connection", "close")
	w.Header().Write(&b)
	b.WriteString("\r\n")
	b.Write(w.body.Bytes())
	return b.Bytes()
}
