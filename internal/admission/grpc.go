package admission

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// StreamWindow is the HTTP/2 flow-control window of each stream: what a
// stream's sender may send before its handler asks for the message, so the
// most a stream waiting for the budget holds. grpc-go's minimum; without a
// fixed window grpc-go's bandwidth estimate can grow it to 16 MiB a stream.
const StreamWindow = 64 << 10

// connWindow is each connection's window. grpc-go grants it again as frames
// arrive, whether or not a handler has read them (http2Server.handleData),
// so it bounds no memory; it only must not throttle many streams at once.
const connWindow = 1 << 20

// DefaultWait is the longest a request waits for its bytes in serve.
const DefaultWait = 100 * time.Millisecond

// Options configure a Gate.
type Options struct {
	// Budget is shared by every RPC of the server.
	Budget *Budget
	// MaxMessage is the server's grpc.MaxRecvMsgSize: a longer message is
	// refused as gRPC refuses it, before it is read.
	MaxMessage int
	// Codec decodes the messages (the server's codec).
	Codec encoding.CodecV2
	// Wait is the longest a request waits for its bytes, positive (serve
	// uses DefaultWait), and never more than half the time its RPC has
	// left.
	Wait time.Duration
	// Unread answers, by full method name ("/package.Service/Method"), a
	// unary RPC whose request did not fit in the budget in time, without
	// reading it: each front end by its own failure mode. Other methods
	// answer RESOURCE_EXHAUSTED.
	Unread map[string]func(ctx context.Context) (any, error)
	// Registerer, if set, gets the budget's metrics.
	Registerer prometheus.Registerer
}

// Gate reads the requests of the services registered through its
// Registrar, and of every streaming RPC (ServerOptions), within a Budget.
type Gate struct {
	o      Options
	unread *prometheus.CounterVec
	// coarse counts the messages read the way gRPC reads them, holding
	// MaxMessage of the budget each, because the RPC's transport stream
	// offered no way to read the length first (a grpc-go that changed).
	coarse prometheus.Counter
}

// New returns a Gate.
func New(o Options) *Gate {
	if o.Wait <= 0 {
		panic(fmt.Sprintf("inflight: Options.Wait must be positive (got %v)", o.Wait))
	}
	g := &Gate{
		o: o,
		unread: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_requests_unread_total",
			Help: "RPCs answered without reading their request, because the request bytes in flight were at listen.max_request_bytes_in_flight for longer than the wait; a Check is answered by store.on_failure.",
		}, []string{"method"}),
		coarse: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_requests_read_coarsely_total",
			Help: "Requests read without their length known in advance, each holding listen.max_request_bytes of the budget; nonzero means the gRPC library changed how it hands streams to handlers.",
		}),
	}
	if r := o.Registerer; r != nil {
		b := o.Budget
		r.MustRegister(g.unread, g.coarse,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "floodgate_request_bytes_in_flight",
				Help: "Bytes of the gRPC requests being read and decided now.",
			}, func() float64 { return float64(b.InUse()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "floodgate_request_bytes_in_flight_limit",
				Help: "listen.max_request_bytes_in_flight as in force: the most floodgate_request_bytes_in_flight may reach.",
			}, func() float64 { return float64(b.Limit()) }))
	}
	return g
}

// ServerOptions fix the streams' windows (StreamWindow) and read every
// streaming RPC's messages within the budget. A server using the Gate must
// be built with them.
func (g *Gate) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.StaticStreamWindowSize(StreamWindow),
		grpc.StaticConnWindowSize(connWindow),
		grpc.ChainStreamInterceptor(g.streamInterceptor),
	}
}

// Registrar registers services on s whose unary methods read their
// requests within the budget. It serves as s does for reflection.Register.
func (g *Gate) Registrar(s *grpc.Server) *Registrar { return &Registrar{g: g, s: s} }

// Registrar is a grpc.ServiceRegistrar wrapping each unary method.
type Registrar struct {
	g *Gate
	s *grpc.Server
}

// RegisterService registers a copy of sd whose unary handlers read their
// requests within the budget.
func (r *Registrar) RegisterService(sd *grpc.ServiceDesc, impl any) {
	wrapped := *sd
	wrapped.Methods = make([]grpc.MethodDesc, len(sd.Methods))
	for i, md := range sd.Methods {
		md.Handler = r.g.unary("/"+sd.ServiceName+"/"+md.MethodName, md.Handler)
		wrapped.Methods[i] = md
	}
	r.s.RegisterService(&wrapped, impl)
}

// GetServiceInfo is the server's.
func (r *Registrar) GetServiceInfo() map[string]grpc.ServiceInfo { return r.s.GetServiceInfo() }

// transportStream is what grpc-go's parser reads a message with
// (internal/transport's ServerStream, which grpc-go puts in each RPC's
// context as its ServerTransportStream).
type transportStream interface {
	ReadMessageHeader(header []byte) error
	Read(n int) (mem.BufferSlice, error)
}

var (
	errOverBudget = errors.New("inflight: no budget in time")
	errNoStream   = errors.New("inflight: the RPC's transport stream cannot be read directly")
)

// receive reads the RPC's next message within the budget: the length
// prefix, then that many bytes of the budget, then the message. It returns
// the bytes taken, to give back once the message has been handled (0 when
// none were). At the end of the stream it returns io.EOF.
func (g *Gate) receive(ctx context.Context) (data mem.BufferSlice, taken int64, err error) {
	ts, ok := grpc.ServerTransportStreamFromContext(ctx).(transportStream)
	if !ok {
		return nil, 0, errNoStream
	}
	var hdr [5]byte
	if err := ts.ReadMessageHeader(hdr[:]); err != nil {
		return nil, 0, rpcError(err)
	}
	if hdr[0]&1 != 0 {
		// Neither Envoy nor grpc-go's clients compress unless told to,
		// and this server offers no compressor.
		return nil, 0, status.Error(codes.Unimplemented, "compressed requests are not accepted")
	}
	n := int64(binary.BigEndian.Uint32(hdr[1:]))
	if n > int64(g.o.MaxMessage) {
		return nil, 0, status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, g.o.MaxMessage)
	}
	if n <= StreamWindow {
		// Within the stream's window the sender has sent it all already,
		// whether it is read or not: waiting would only keep an ordinary
		// Check from being decided while large requests hold the budget.
		taken = g.o.Budget.TakeNow(n)
	} else if taken, ok = g.o.Budget.Take(ctx, n, g.wait(ctx)); !ok {
		return nil, 0, errOverBudget
	}
	data, err = ts.Read(int(n))
	if err != nil {
		g.o.Budget.Give(taken)
		return nil, 0, rpcError(err)
	}
	return data, taken, nil
}

// wait is how long a request of ctx may wait for bytes.
func (g *Gate) wait(ctx context.Context) time.Duration {
	w := g.o.Wait
	if d, ok := ctx.Deadline(); ok {
		w = min(w, time.Until(d)/2)
	}
	return max(w, 0)
}

// rpcError is what grpc-go's serverStream.RecvMsg makes of a read error.
func rpcError(err error) error {
	if err == io.EOF {
		return err
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if err == io.ErrUnexpectedEOF {
		return status.Error(codes.Internal, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

func (g *Gate) decode(data mem.BufferSlice, v any) error {
	defer data.Free()
	if err := g.o.Codec.Unmarshal(data, v); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	return nil
}

// unary wraps a unary method's handler: the request is read within the
// budget, and its bytes are held until the handler has answered.
func (g *Gate) unary(method string, h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		data, taken, err := g.receive(ctx)
		defer g.o.Budget.Give(taken)
		switch {
		case errors.Is(err, errNoStream):
			taken, ok := g.o.Budget.Take(ctx, int64(g.o.MaxMessage), g.wait(ctx))
			if !ok {
				return g.answerUnread(ctx, method)
			}
			defer g.o.Budget.Give(taken)
			g.coarse.Inc()
			return h(srv, ctx, dec, ic)
		case errors.Is(err, errOverBudget):
			return g.answerUnread(ctx, method)
		case err == io.EOF:
			return nil, status.Error(codes.Internal, "cardinality violation: received no request message from non-client-streaming RPC")
		case err != nil:
			return nil, err
		}
		decoded := false
		defer func() {
			if !decoded {
				data.Free()
			}
		}()
		return h(srv, ctx, func(v any) error {
			if decoded {
				return status.Error(codes.Internal, "the request was decoded twice")
			}
			decoded = true
			return g.decode(data, v)
		}, ic)
	}
}

func (g *Gate) answerUnread(ctx context.Context, method string) (any, error) {
	g.unread.WithLabelValues(method).Inc()
	if f := g.o.Unread[method]; f != nil {
		return f(ctx)
	}
	return nil, status.Error(codes.ResourceExhausted, "the server is reading as many request bytes as it may hold: try again")
}

// streamInterceptor reads each message of a streaming RPC within the
// budget, holding its bytes while it is decoded.
func (g *Gate) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &gatedStream{ServerStream: ss, g: g, method: info.FullMethod})
}

type gatedStream struct {
	grpc.ServerStream
	g      *Gate
	method string
}

func (s *gatedStream) RecvMsg(m any) error {
	data, taken, err := s.g.receive(s.Context())
	defer s.g.o.Budget.Give(taken)
	switch {
	case errors.Is(err, errNoStream):
		taken, ok := s.g.o.Budget.Take(s.Context(), int64(s.g.o.MaxMessage), s.g.wait(s.Context()))
		if !ok {
			s.g.unread.WithLabelValues(s.method).Inc()
			return status.Error(codes.ResourceExhausted, "the server is reading as many request bytes as it may hold: try again")
		}
		defer s.g.o.Budget.Give(taken)
		s.g.coarse.Inc()
		return s.ServerStream.RecvMsg(m)
	case errors.Is(err, errOverBudget):
		s.g.unread.WithLabelValues(s.method).Inc()
		return status.Error(codes.ResourceExhausted, "the server is reading as many request bytes as it may hold: try again")
	case err != nil:
		return err
	}
	return s.g.decode(data, m)
}
