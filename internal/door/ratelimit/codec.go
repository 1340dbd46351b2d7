// Package ratelimit is the rate limit service door's wire codec: Envoy's
// RateLimitRequests read and RateLimitResponses written by hand where
// protobuf-go's generic code costs a decision the most (decode.go,
// encode.go), on grpccodec's wire reader and writer. It lives here,
// beside the door, so that the door is one folder holding everything of
// it; grpccodec serves it (Codec) beside the other doors'.
//
// The decoder gives the messages protobuf-go gives and the encoder the
// bytes, or each hands the message to protobuf-go: the tests and
// FuzzRateLimitDecoder compare the two.
package ratelimit

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/grpccodec"
)

// Codec is the rate limit service's codec, for grpccodec.Fast and
// grpccodec.Protobuf: RateLimitRequests decoded by DecodeRateLimitRequest,
// RateLimitResponses written by EncodeRateLimitResponse.
func Codec() grpccodec.Message {
	return grpccodec.Message{
		Request: (*rlsv3.RateLimitRequest)(nil),
		Decode:  grpccodec.Decoding(DecodeRateLimitRequest),
		Encode: func(v any) ([]byte, bool) {
			r, ok := v.(*rlsv3.RateLimitResponse)
			if !ok {
				return nil, false
			}
			return EncodeRateLimitResponse(r)
		},
	}
}
