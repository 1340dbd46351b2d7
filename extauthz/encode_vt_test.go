//go:build vtprotobuf

package extauthz

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/limiter/memory"
)

// go-control-plane's vtprotobuf marshaller for CheckResponse, measured
// beside the encoder (BenchmarkEncodeCheckResponse): go-control-plane
// compiles it only under the vtprotobuf build tag, so it is measured with
// go test -tags vtprotobuf -bench EncodeCheckResponse ./extauthz/ (the README
// says why the encoder stays).

func BenchmarkEncodeCheckResponseVT(b *testing.B) {
	s := NewServer(mustCompile(b, benchPerKey), memory.New(memory.Options{}), ServerOptions{})
	resp, err := s.Check(context.Background(), benchRequests(1)[0])
	if err != nil || len(resp.GetOkResponse().GetResponseHeadersToAdd()) == 0 {
		b.Fatalf("no allow with headers to encode: %v, %v", resp, err)
	}
	want, err := proto.Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	if got, err := resp.MarshalVTStrict(); err != nil || string(got) != string(want) {
		b.Fatalf("MarshalVTStrict wrote other bytes than proto.Marshal (%v)", err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := resp.MarshalVTStrict(); err != nil {
			b.Fatal(err)
		}
	}
}
