// Package xdsfeed is the rate limit door's feed from an xDS management
// server (rls.xds): an ADS client, state of the world, for
// ratelimit.config.ratelimit.v3.RateLimitConfig resources, the way Envoy
// Gateway configures envoyproxy/ratelimit (CONFIG_TYPE=GRPC_XDS_SOTW,
// src/provider/xds_grpc_sotw_provider.go). Every push is rendered into
// envoyproxy/ratelimit's YAML (Render) and validated by internal/door/ratelimit/rls as a
// file is: a push with a problem is NACKed with the problems, counted,
// logged, and the previous limits keep serving; an accepted one is handed
// to the rate limit door (internal/door, which builds the feed) and then ACKed. A broken stream or a failed
// connection is retried with envoyproxy/ratelimit's backoff.
package xdsfeed

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Feed is one xDS subscription.
type Feed struct {
	x       config.XDS
	log     *zap.Logger
	metrics metrics
	rand    func() float64 // [0, 1), for the jitter

	mu        sync.Mutex
	fns       []func(Pushed)
	latest    *push // the last push accepted
	rejected  *push // the last push rejected, when after latest
	repeats   int   // times the server sent rejected again since
	accepted  int
	refused   int
	connected time.Time // zero while not connected
	lastErr   error     // why the last connection or stream ended
	first     chan struct{}
}

// push is one response of the server, as the feed read it.
type push struct {
	seq      int
	at       time.Time
	version  string
	digest   string // of the files as rendered
	pushed   Pushed
	configs  []*rlsconfv3.RateLimitConfig
	notes    []string
	problems []string
	domains  []string
}

// Pushed is one set of limits a feed accepted: files in envoyproxy/ratelimit's
// format, as rls.Parse reads them (names in order, each with its content).
type Pushed struct {
	Names   []string
	Sources map[string][]byte
	// Version names the push in logs (the feed's own count, or the
	// server's version).
	Version string
}

// New returns a feed for x (validated by internal/config, defaults filled
// in); Run runs it.
func New(x *config.XDS, log *zap.Logger, reg prometheus.Registerer) *Feed {
	return &Feed{x: *x, log: log.Named("xds"), metrics: newMetrics(reg), rand: rand.Float64, first: make(chan struct{})}
}

// Latest returns the limits of the last push accepted; ok is false before
// the first.
func (f *Feed) Latest() (Pushed, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.latest == nil {
		return Pushed{}, false
	}
	return f.latest.pushed, true
}

// OnPush registers fn, called with each push the feed accepts before it
// acknowledges it: when fn returns, the push is applied.
func (f *Feed) OnPush(fn func(Pushed)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fns = append(f.fns, fn)
}

// First is closed when the first push has been accepted.
func (f *Feed) First() <-chan struct{} { return f.first }

// Run connects to the server and applies its pushes until ctx ends,
// connecting again, after a backoff, whenever the stream ends.
func (f *Feed) Run(ctx context.Context) {
	attempt := 0
	for {
		pushed, err := f.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if pushed {
			attempt = 0 // a stream that served pushes starts the backoff again
		}
		wait := Backoff(f.x.Retry, attempt, f.rand)
		attempt++
		f.mu.Lock()
		f.connected, f.lastErr = time.Time{}, err
		f.mu.Unlock()
		f.metrics.connected.Set(0)
		f.metrics.retries.Inc()
		f.log.Warn("xDS stream ended; connecting again", zap.String("server", f.x.Server), zap.Error(err), zap.Duration("in", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Backoff is the wait before connection attempt n+1 after n failed in a
// row: initial × factor^n, bounded to [initial, max], and with jitter a
// uniformly random duration between initial and that, as
// envoyproxy/ratelimit computes it (github.com/jpillora/backoff, which its
// xDS provider uses: a factor below 1 keeps every wait at initial).
// random returns a number in [0, 1).
func Backoff(r config.XDSRetry, n int, random func() float64) time.Duration {
	lo, hi := float64(r.Initial.Duration), float64(r.Max.Duration)
	d := lo * math.Pow(*r.Factor, float64(n))
	if *r.Jitter {
		d = lo + random()*(d-lo)
	}
	return time.Duration(min(max(d, lo), hi))
}

// session is one connection and its stream: it returns why it ended, and
// whether the server pushed anything on it.
func (f *Feed) session(ctx context.Context) (pushed bool, err error) {
	creds := insecure.NewCredentials()
	if f.x.TLS != nil {
		tc, err := tlsConfig(f.x.TLS)
		if err != nil {
			return false, err
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(f.x.Server, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(f.x.MaxMessageBytes)))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(f.x.Headers)))
	defer cancel()
	// A new client for every stream: the server sends its whole state to
	// a stream that names no version, whatever the last one had.
	ads := sotw.NewADSClient(sctx, f.node(), resource.RateLimitConfigType)
	if err := ads.InitConnect(conn); err != nil {
		return false, err
	}
	f.mu.Lock()
	f.connected = time.Now()
	f.mu.Unlock()
	f.metrics.connected.Set(1)
	f.log.Info("xDS stream open", zap.String("server", f.x.Server), zap.String("node", f.x.NodeID))
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return pushed, err
		}
		pushed = true
		if err := f.handle(ctx, ads, resp); err != nil {
			return pushed, err
		}
	}
}

func (f *Feed) node() *corev3.Node {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range f.x.NodeMetadata {
		md.Fields[k] = structpb.NewStringValue(v)
	}
	return &corev3.Node{Id: f.x.NodeID, Metadata: md}
}

// handle validates one push and applies it (ACK) or refuses it (NACK with
// its problems).
//
// A NACK names the version accepted before (as the protocol asks), and
// go-control-plane's snapshot cache answers a request for an older version
// with its current one at once: the refused push comes straight back. The
// same refusal is counted and logged once, and each NACK of it after the
// first waits as a reconnection would (retry), so a bad push costs a
// round trip per backoff, not a loop; a new push the server has meanwhile
// is sent in answer to that NACK.
func (f *Feed) handle(ctx context.Context, ads sotw.ADSClient, resp *sotw.Response) error {
	f.mu.Lock()
	seq := f.accepted + f.refused + 1
	f.mu.Unlock()
	p := read(resp, seq)
	if len(p.problems) > 0 {
		f.mu.Lock()
		again := f.rejected != nil && f.rejected.digest == p.digest
		if again {
			f.repeats++
		} else {
			f.refused++
			f.rejected, f.repeats = p, 0
		}
		repeats := f.repeats
		f.mu.Unlock()
		if again {
			t := time.NewTimer(Backoff(f.x.Retry, repeats-1, f.rand))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			return ads.Nack(nackMessage(p.problems))
		}
		f.metrics.pushes.WithLabelValues("rejected").Inc()
		f.log.Error("xDS push rejected; the previous limits keep serving", zap.String("version", p.version),
			zap.Int("problems", len(p.problems)), zap.Strings("problem", p.problems))
		return ads.Nack(nackMessage(p.problems))
	}
	f.mu.Lock()
	f.accepted++
	f.latest, f.rejected, f.repeats = p, nil, 0
	fns := slices.Clone(f.fns)
	f.mu.Unlock()
	for _, fn := range fns {
		fn(p.pushed)
	}
	f.metrics.pushes.WithLabelValues("accepted").Inc()
	fields := []zap.Field{zap.String("version", p.version), zap.Strings("domains", p.domains)}
	if len(p.notes) > 0 {
		fields = append(fields, zap.Strings("notes", p.notes))
	}
	f.log.Info("xDS push applied", fields...)
	select {
	case <-f.first:
	default:
		close(f.first)
	}
	return ads.Ack()
}

// read turns a response into the files rls reads, and their problems.
func read(resp *sotw.Response, seq int) *push {
	p := &push{seq: seq, at: time.Now(), pushed: Pushed{Sources: map[string][]byte{}}}
	sum := sha256.New()
	for i, a := range resp.Resources {
		c := &rlsconfv3.RateLimitConfig{}
		if a.GetTypeUrl() != resource.RateLimitConfigType {
			p.problems = append(p.problems, fmt.Sprintf("resource %d: type %s, want %s", i, a.GetTypeUrl(), resource.RateLimitConfigType))
			continue
		}
		if err := a.UnmarshalTo(c); err != nil {
			p.problems = append(p.problems, fmt.Sprintf("resource %d: %v", i, err))
			continue
		}
		name := "xds:" + c.GetName()
		if c.GetName() == "" {
			name = fmt.Sprintf("xds:resource[%d]", i)
		}
		if _, dup := p.pushed.Sources[name]; dup {
			name = fmt.Sprintf("%s[%d]", name, i)
		}
		data, notes := Render(c)
		p.pushed.Names = append(p.pushed.Names, name)
		p.pushed.Sources[name] = data
		p.configs = append(p.configs, c)
		p.notes = append(p.notes, notes...)
		sum.Write([]byte(name))
		sum.Write(data)
	}
	p.digest = hex.EncodeToString(sum.Sum(nil))
	p.version = strconv.Itoa(seq) + "-" + p.digest[:12]
	p.pushed.Version = p.version
	if len(p.problems) > 0 {
		return p
	}
	cfg, err := rls.Parse(p.pushed.Names, p.pushed.Sources)
	var list fielderr.List
	switch {
	case errors.As(err, &list):
		for _, e := range list {
			p.problems = append(p.problems, e.Error())
		}
	case err != nil:
		p.problems = append(p.problems, err.Error())
	default:
		p.domains = cfg.Domains()
	}
	return p
}

// maxNack bounds the message of a NACK (the problems, one a line).
const maxNack = 4096

func nackMessage(problems []string) string {
	msg := "floodgate: " + strings.Join(problems, "\n")
	if len(msg) > maxNack {
		msg = msg[:maxNack-3] + "..."
	}
	return msg
}

func tlsConfig(t *config.XDSTLS) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("rls.xds.tls.ca_file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("rls.xds.tls.ca_file: %s holds no PEM certificate", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("rls.xds.tls: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// WriteStatus writes what the feed knows, for the admin port's /debug/xds:
// the server, the stream, the counts, the limits of the last push accepted
// (one line each, named as rls.burst names them) and the problems of the
// last push rejected since, each at its line of the file the push was
// rendered to (printed after it).
func (f *Feed) WriteStatus(out io.Writer) {
	// Rendered under the lock, written after it: a slow reader of the
	// page must not hold back the next push.
	var w bytes.Buffer
	defer func() { out.Write(w.Bytes()) }()
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(&w, "rls.xds %s, node %s: ", f.x.Server, f.x.NodeID)
	switch {
	case !f.connected.IsZero():
		fmt.Fprintf(&w, "connected since %s\n", f.connected.UTC().Format(time.RFC3339))
	case f.lastErr != nil:
		fmt.Fprintf(&w, "not connected: %v\n", f.lastErr)
	default:
		fmt.Fprintln(&w, "connecting")
	}
	fmt.Fprintf(&w, "pushes: %d accepted, %d rejected\n", f.accepted, f.refused)
	if p := f.latest; p != nil {
		fmt.Fprintf(&w, "\npush %s at %s: ok (rate limit %s %s)\n", p.version, p.at.UTC().Format(time.RFC3339), fielderr.Plural(len(p.domains), "domain", "domains"), strings.Join(p.domains, " "))
		for i, c := range p.configs {
			fmt.Fprintf(&w, "%s: domain %s\n", p.pushed.Names[i], c.GetDomain())
			for _, l := range limitLines(c) {
				fmt.Fprintf(&w, "  %s\n", l)
			}
		}
		for _, n := range p.notes {
			fmt.Fprintf(&w, "note: %s\n", n)
		}
	} else {
		fmt.Fprintln(&w, "\nno push accepted yet: the rate limit service answers by rls.on_failure")
	}
	if p := f.rejected; p != nil {
		fmt.Fprintf(&w, "\npush %s at %s rejected (NACK), the limits above keep serving: %d %s\n", p.version, p.at.UTC().Format(time.RFC3339), len(p.problems), fielderr.Plural(len(p.problems), "problem", "problems"))
		for _, pr := range p.problems {
			fmt.Fprintln(&w, pr)
		}
		for _, name := range p.pushed.Names {
			fmt.Fprintf(&w, "\n%s, as rendered:\n", name)
			for i, l := range strings.SplitAfter(string(p.pushed.Sources[name]), "\n") {
				if l != "" {
					fmt.Fprintf(&w, "%4d  %s", i+1, l)
				}
			}
		}
	}
}

type metrics struct {
	pushes    *prometheus.CounterVec
	connected prometheus.Gauge
	retries   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rls_xds_pushes_total", Help: "Pushes of rate limits from the xDS server, by result: accepted (applied, ACKed) or rejected (NACKed; the previous limits kept serving).",
		}, []string{"result"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_rls_xds_connected", Help: "1 while the stream to the xDS server is open.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_rls_xds_reconnects_total", Help: "Times the stream to the xDS server ended or could not be opened, each followed by a backoff and a new connection.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.pushes, m.connected, m.retries)
	}
	m.pushes.WithLabelValues("accepted")
	m.pushes.WithLabelValues("rejected")
	return m
}
