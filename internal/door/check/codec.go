// Package check is the Check door's wire codec: Envoy's CheckRequests read
// and CheckResponses written by hand where protobuf-go's generic code costs
// a decision the most (decode.go, encode.go), on grpccodec's wire reader
// and writer, and SameAsProto, which holds the encoder to proto.Marshal. It
// lives here, beside the door, so that the door is one folder holding
// everything of it; grpccodec serves it (Codec) beside the other doors'.
//
// The hand-written parts give the bytes and messages protobuf-go gives, or
// hand the message to protobuf-go: the tests, FuzzDecoder and FuzzCheck
// compare the two on every kind of request and response.
package check

import (
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/floodgate/floodgate/internal/grpccodec"
)

// Codec is Check's codec, for grpccodec.Fast and grpccodec.Protobuf:
// CheckRequests decoded by DecodeCheckRequest, CheckResponses written by
// EncodeCheckResponse.
func Codec() grpccodec.Message {
	return grpccodec.Message{
		Request: (*authv3.CheckRequest)(nil),
		Decode:  grpccodec.Decoding(DecodeCheckRequest),
		Encode: func(v any) ([]byte, bool) {
			r, ok := v.(*authv3.CheckResponse)
			if !ok {
				return nil, false
			}
			return EncodeCheckResponse(r)
		},
	}
}
