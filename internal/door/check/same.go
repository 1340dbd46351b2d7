package check

import (
	"bytes"
	"fmt"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"
)

// SameAsProto reports how EncodeCheckResponse's bytes for resp differ from
// proto.Marshal's, or nil when they are the same (or when the encoder
// declines a response it does not cover, which the codec then hands to
// proto.Marshal itself). Tests of every package that builds responses run
// it on them: the encoder must never write what protobuf would not.
func SameAsProto(resp *authv3.CheckResponse) error {
	want, wantErr := proto.Marshal(resp)
	got, ok := EncodeCheckResponse(resp)
	if !ok {
		if wantErr == nil && covered(resp) {
			return fmt.Errorf("the encoder declined a response it covers: %v", resp)
		}
		return nil
	}
	if wantErr != nil {
		return fmt.Errorf("the encoder wrote a response proto.Marshal refuses (%v): %v", wantErr, resp)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		return fmt.Errorf("encoder and proto.Marshal differ from byte %d (%d and %d bytes) for a response with status %v and %d headers",
			i, len(got), len(want), resp.GetStatus(), len(resp.GetOkResponse().GetResponseHeadersToAdd())+len(resp.GetDeniedResponse().GetHeaders()))
	}
	return nil
}

// covered is what every response Floodgate builds is: a status, and an
// allow with client headers or a deny.
func covered(r *authv3.CheckResponse) bool {
	return r.DynamicMetadata == nil && len(r.GetStatus().GetDetails()) == 0 && len(r.GetOkResponse().GetHeaders()) == 0
}
