//go:build vtprotobuf

package check

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// go-control-plane's vtprotobuf marshaller for CheckResponse, measured
// beside the encoder (BenchmarkEncodeCheckResponse): go-control-plane
// compiles it only under the vtprotobuf build tag, so it is measured with
// go test -tags vtprotobuf -bench EncodeCheckResponse ./internal/door/check/
// (docs/performance.md says why the encoder stays).

func BenchmarkEncodeCheckResponseVT(b *testing.B) {
	resp := handlerAllow()
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
