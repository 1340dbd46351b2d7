package main

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/encoding"

	"github.com/floodgate/floodgate/internal/admission"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/internal/store"
)

// Sizing listen.max_request_bytes_in_flight when the file leaves it 0
// (docs/operations.md, "Memory: request bytes in flight").
const (
	// requestBytesShare: a request of n bytes costs the process about 3n
	// at its peak (the bytes read, the contiguous copy the decoder reads,
	// the strings decoded from it), and gets half of the memory limit left
	// after the in-memory buckets: a sixth of it in request bytes.
	requestBytesShare = 6
	// requestBytesFloor: never less, so that a request of the default
	// max_request_bytes' half still passes beside the small ones.
	requestBytesFloor = 16 << 20
	// requestBytesUnlimited: without any memory limit (no container
	// limit, GOMEMLIMIT or in-memory store to size one from), still small.
	requestBytesUnlimited = 48 << 20
)

// requestBytesInFlight is the budget of request bytes in flight and where
// it comes from: the file's, or sized from memLimit (the Go memory limit in
// force, math.MaxInt64 for none) less storeBytes, what the in-memory
// buckets may hold, and less windows, what the streams may hold before
// their requests are read: a share of what is left.
func requestBytesInFlight(set int, memLimit, storeBytes, windows int64) (int64, string) {
	switch {
	case set > 0:
		return int64(set), "listen.max_request_bytes_in_flight"
	case memLimit <= 0 || memLimit >= unlimited:
		return requestBytesUnlimited, fmt.Sprintf("%d MiB: no memory limit", requestBytesUnlimited>>20)
	}
	b := max((memLimit-storeBytes-windows)/requestBytesShare, requestBytesFloor)
	return b, fmt.Sprintf("1/%d of the memory limit (%d bytes) less the in-memory buckets (%d bytes) and one connection's stream windows (%d bytes), at least %d MiB",
		requestBytesShare, memLimit, storeBytes, windows, requestBytesFloor>>20)
}

// streamWindows is what one connection's streams may hold before their
// requests are read, none of it in the budget: each its flow-control window
// (admission.StreamWindow), which its sender may fill whether or not the
// request will ever be read. A flood of large requests from an Envoy fills
// them all; the budget is sized beside them.
func streamWindows(maxStreams int) int64 { return int64(maxStreams) * admission.StreamWindow }

// requestBudget is the budget of request bytes in flight, shared by the
// gRPC requests (the request gate) and the HTTP door's (admission.HTTPGate).
func requestBudget(cfg *door.Config, log *zap.Logger) *admission.Budget {
	limit, from := requestBytesInFlight(cfg.Listen.MaxRequestBytesInFlight, debug.SetMemoryLimit(-1), store.MemoryBytes(cfg.Config), streamWindows(cfg.Listen.MaxConcurrentStreams))
	if limit < int64(cfg.Listen.MaxRequestBytes) {
		from += fmt.Sprintf("; below listen.max_request_bytes (%d): a larger request waits until it is read alone", cfg.Listen.MaxRequestBytes)
	}
	log.Info("request bytes in flight", zap.Int64("limit", limit), zap.String("limit_from", from))
	return admission.NewBudget(limit)
}

// newRequestGate is the gate every gRPC request is read through: within
// the budget of request bytes in flight, a request that finds no room in
// time is answered by its door's failure mode (door.Door.Unread), as when
// the store cannot decide, never with an RPC error that Envoy would turn
// into its own failure mode (failure_mode_allow, status_on_error, the rate
// limit filter's failure_mode_deny). Such an answer leaves the rest of the
// request unread: gRPC ends the stream after it (RST_STREAM NO_ERROR), and
// Envoy's router takes a complete answer to a request it is still sending
// as the answer, resetting its side itself (Filter::onUpstreamComplete,
// source/common/router/router.cc).
func newRequestGate(cfg *door.Config, doors []door.Door, budget *admission.Budget, reg prometheus.Registerer) *admission.Gate {
	unread := map[string]func(context.Context) (any, error){}
	for _, d := range doors {
		maps.Copy(unread, d.AnswerUnread())
	}
	return admission.New(admission.Options{
		Budget:     budget,
		MaxMessage: cfg.Listen.MaxRequestBytes,
		Codec:      gateCodec(cfg.Listen.Decoder),
		Wait:       admission.DefaultWait,
		Unread:     unread,
		Registerer: reg,
	})
}

// gateCodec decodes requests as the gRPC server's codec does
// (listen.decoder).
func gateCodec(decoder string) encoding.CodecV2 {
	if decoder == "fast" {
		return grpccodec.Fast(doors.Codecs()...)
	}
	return grpccodec.Protobuf(doors.Codecs()...)
}
