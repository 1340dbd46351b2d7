// Package ratelimit is the rate limit service door's wire codec: Envoy's
// RateLimitRequests read by hand where protobuf-go's generic code costs a
// decision the most (decode.go), on grpccodec's wire reader. It lives here,
// beside the door, so that the door is one folder holding everything of
// it; grpccodec serves it (Codec) beside the other doors'.
//
// The decoder gives the messages protobuf-go gives, or hands the message
// to protobuf-go: the tests and FuzzRateLimitDecoder compare the two.
package ratelimit

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/grpccodec"
)

// Codec is the rate limit service's codec, for grpccodec.Fast and
// grpccodec.Protobuf: RateLimitRequests decoded by DecodeRateLimitRequest;
// its responses are left to protobuf-go.
func Codec() grpccodec.Message {
	return grpccodec.Message{
		Request: (*rlsv3.RateLimitRequest)(nil),
		Decode:  grpccodec.Decoding(DecodeRateLimitRequest),
	}
}
