package check

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/floodgate/floodgate/internal/grpccodec"
)

// Encoding CheckResponses. protobuf-go's reflection-driven marshalling is a
// measurable part of a Check (docs/performance.md has the figures, and why
// go-control-plane's vtprotobuf marshaller is not used).
// The response has a handful of fixed fields, so it is written here by hand:
// sizes first, then one slice of exactly that size. The bytes are the ones
// proto.Marshal writes (fields in number order, zero values left out, a
// present empty message as its tag and length 0), which
// TestTheEncoderIsProtoMarshal checks on every kind of response Floodgate
// gives.
//
// Only the fields Floodgate sets are written. A response that sets any
// other (dynamic metadata, upstream headers, status details, raw header
// values...), or a string that is not valid UTF-8, is left to
// proto.Marshal: EncodeCheckResponse says so and grpccodec.Fast falls back.
// TestTheEncoderKnowsEveryField fails when a new version of Envoy's API
// adds a field this file does not weigh.
// Responses are built by this package, never decoded, so they carry no
// unknown fields: the encoder does not look for them.

// Field numbers (envoy.service.auth.v3, envoy.config.core.v3,
// envoy.type.v3, google.rpc).
const (
	fCheckResponseStatus    = 1 // google.rpc.Status
	fCheckResponseDenied    = 2 // DeniedHttpResponse
	fCheckResponseOk        = 3 // OkHttpResponse
	fStatusCode             = 1
	fStatusMessage          = 2
	fDeniedStatus           = 1 // envoy.type.v3.HttpStatus
	fDeniedHeaders          = 2
	fDeniedBody             = 3
	fHTTPStatusCode         = 1
	fOkResponseHeadersToAdd = 6
	fOptionHeader           = 1
	fOptionAppendAction     = 3
	fHeaderKey              = 1
	fHeaderValue            = 2
)

// EncodeCheckResponse returns r's wire form, the bytes proto.Marshal
// writes, or false when r sets a field this encoder does not write.
func EncodeCheckResponse(r *authv3.CheckResponse) ([]byte, bool) {
	if !encodable(r) {
		return nil, false
	}
	status, http := sizeParts(r)
	n := 0
	if r.Status != nil {
		n += grpccodec.SizeMessage(fCheckResponseStatus, status)
	}
	if http >= 0 {
		n += grpccodec.SizeMessage(fCheckResponseOk, http) // the same size under either field number
	}
	return appendCheckResponse(make([]byte, 0, n), r, status, http), true
}

// encodable reports whether r sets only the fields written here.
func encodable(r *authv3.CheckResponse) bool {
	if r.DynamicMetadata != nil {
		return false
	}
	if s := r.Status; s != nil && (len(s.Details) > 0 || !grpccodec.ValidUTF8(s.Message)) {
		return false
	}
	switch h := r.HttpResponse.(type) {
	case nil:
	case *authv3.CheckResponse_OkResponse:
		ok := h.OkResponse
		if ok == nil {
			return false
		}
		//lint:ignore SA1019 a response that sets the deprecated field is left to protobuf-go, which writes it
		setsMetadata := ok.DynamicMetadata != nil
		if len(ok.Headers) > 0 || len(ok.HeadersToRemove) > 0 || setsMetadata ||
			len(ok.QueryParametersToSet) > 0 || len(ok.QueryParametersToRemove) > 0 {
			return false
		}
		return optionsEncodable(ok.ResponseHeadersToAdd)
	case *authv3.CheckResponse_DeniedResponse:
		d := h.DeniedResponse
		if d == nil || !grpccodec.ValidUTF8(d.Body) {
			return false
		}
		return optionsEncodable(d.Headers)
	default:
		return false
	}
	return true
}

func optionsEncodable(opts []*corev3.HeaderValueOption) bool {
	for _, o := range opts {
		//lint:ignore SA1019 an option that sets the deprecated append is left to protobuf-go, which writes it
		if o == nil || o.Append != nil || o.KeepEmptyValue {
			return false
		}
		if h := o.Header; h != nil && (len(h.RawValue) > 0 || !grpccodec.ValidUTF8(h.Key) || !grpccodec.ValidUTF8(h.Value)) {
			return false
		}
	}
	return true
}

// Sizes, in bytes, of each message's fields (not its own tag and length).

// sizeParts returns the sizes of r's status and of its allow or deny
// (-1 when it has none), computed once: the writer needs them again for
// their length prefixes.
func sizeParts(r *authv3.CheckResponse) (status, http int) {
	if r.Status != nil {
		status = sizeStatus(r.Status)
	}
	switch h := r.HttpResponse.(type) {
	case *authv3.CheckResponse_DeniedResponse:
		return status, sizeDenied(h.DeniedResponse)
	case *authv3.CheckResponse_OkResponse:
		return status, sizeOptions(fOkResponseHeadersToAdd, h.OkResponse.ResponseHeadersToAdd)
	}
	return status, -1
}

func sizeStatus(s *rpcstatus.Status) int {
	return grpccodec.SizeVarint(fStatusCode, uint64(int64(s.Code))) + grpccodec.SizeString(fStatusMessage, s.Message)
}

func sizeDenied(d *authv3.DeniedHttpResponse) int {
	n := 0
	if d.Status != nil {
		n += grpccodec.SizeMessage(fDeniedStatus, grpccodec.SizeVarint(fHTTPStatusCode, uint64(int64(d.Status.Code))))
	}
	return n + sizeOptions(fDeniedHeaders, d.Headers) + grpccodec.SizeString(fDeniedBody, d.Body)
}

func sizeOptions(num protowire.Number, opts []*corev3.HeaderValueOption) int {
	n := 0
	for _, o := range opts {
		n += grpccodec.SizeMessage(num, sizeOption(o))
	}
	return n
}

func sizeOption(o *corev3.HeaderValueOption) int {
	n := grpccodec.SizeVarint(fOptionAppendAction, uint64(int64(o.AppendAction)))
	if h := o.Header; h != nil {
		n += grpccodec.SizeMessage(fOptionHeader, grpccodec.SizeString(fHeaderKey, h.Key)+grpccodec.SizeString(fHeaderValue, h.Value))
	}
	return n
}

// Writers, in field order.

// appendCheckResponse writes r, whose parts' sizes sizeParts gave.
func appendCheckResponse(b []byte, r *authv3.CheckResponse, status, http int) []byte {
	if s := r.Status; s != nil {
		b = grpccodec.AppendMessageHead(b, fCheckResponseStatus, status)
		b = grpccodec.AppendVarint(b, fStatusCode, uint64(int64(s.Code)))
		b = grpccodec.AppendString(b, fStatusMessage, s.Message)
	}
	switch h := r.HttpResponse.(type) {
	case *authv3.CheckResponse_DeniedResponse:
		if d := h.DeniedResponse; d != nil {
			b = grpccodec.AppendMessageHead(b, fCheckResponseDenied, http)
			if d.Status != nil {
				b = grpccodec.AppendMessageHead(b, fDeniedStatus, grpccodec.SizeVarint(fHTTPStatusCode, uint64(int64(d.Status.Code))))
				b = grpccodec.AppendVarint(b, fHTTPStatusCode, uint64(int64(d.Status.Code)))
			}
			b = appendOptions(b, fDeniedHeaders, d.Headers)
			b = grpccodec.AppendString(b, fDeniedBody, d.Body)
		}
	case *authv3.CheckResponse_OkResponse:
		if ok := h.OkResponse; ok != nil {
			b = grpccodec.AppendMessageHead(b, fCheckResponseOk, http)
			b = appendOptions(b, fOkResponseHeadersToAdd, ok.ResponseHeadersToAdd)
		}
	}
	return b
}

func appendOptions(b []byte, num protowire.Number, opts []*corev3.HeaderValueOption) []byte {
	for _, o := range opts {
		b = grpccodec.AppendMessageHead(b, num, sizeOption(o))
		if h := o.Header; h != nil {
			b = grpccodec.AppendMessageHead(b, fOptionHeader, grpccodec.SizeString(fHeaderKey, h.Key)+grpccodec.SizeString(fHeaderValue, h.Value))
			b = grpccodec.AppendString(b, fHeaderKey, h.Key)
			b = grpccodec.AppendString(b, fHeaderValue, h.Value)
		}
		b = grpccodec.AppendVarint(b, fOptionAppendAction, uint64(int64(o.AppendAction)))
	}
	return b
}
