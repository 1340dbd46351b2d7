package config

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"
)

// The default listen.max_request_bytes exceeds the largest CheckRequest
// Envoy can send without a body, with room for one. Envoy caps a request's
// headers at max_request_headers_kb (at most 8192 KiB: the HCM's
// validation rule), counting names and values
// (HeaderMapImpl::byteSize, source/common/http/header_map_impl.cc), and at
// max_request_headers_count (default 100); the CheckRequest carries every
// header in `headers` (or header_map) and repeats :path, :authority and
// :method as fields (CheckRequestUtils::setHttpRequest,
// source/extensions/filters/common/ext_authz/check_request_utils.cc). A
// request over the limit is an RPC error, which Envoy takes for an outage.
func TestTheDefaultMaxRequestBytesExceedsWhatEnvoyCanSend(t *testing.T) {
	const headerBytes = 8192 << 10
	const headerCount = 100
	const bodyRoom = 15 << 20
	for _, raw := range []bool{false, true} {
		h := map[string]string{":method": "GET", ":scheme": "https", ":authority": "api.example.com"}
		used := 0
		for k, v := range h {
			used += len(k) + len(v)
		}
		for i := len(h); i < headerCount-1; i++ {
			k := "x-" + strings.Repeat("h", 6) + string(rune('a'+i%26)) + string(rune('a'+i/26))
			h[k] = "v"
			used += len(k) + 1
		}
		// The rest goes to :path, which the request carries twice.
		h[":path"] = "/" + strings.Repeat("a", headerBytes-used-len(":path")-1)
		http := &authv3.AttributeContext_HttpRequest{
			Id: "1234567890123456789", Method: "GET", Path: h[":path"], Host: h[":authority"], Scheme: "https", Protocol: "HTTP/1.1", Size: -1,
		}
		if raw {
			hm := &corev3.HeaderMap{}
			for k, v := range h {
				hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
			}
			http.HeaderMap = hm
		} else {
			http.Headers = h
		}
		addr := &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "2001:db8::1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 65535}}}}
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source:      &authv3.AttributeContext_Peer{Address: addr, Principal: "spiffe://cluster.local/ns/default/sa/client"},
			Destination: &authv3.AttributeContext_Peer{Address: addr, Principal: "spiffe://cluster.local/ns/default/sa/server"},
			Request:     &authv3.AttributeContext_Request{Http: http},
			TlsSession:  &authv3.AttributeContext_TLSSession{Sni: "api.example.com"},
		}}
		size := proto.Size(req)
		if size < 2*headerBytes-1024 {
			t.Fatalf("the largest request measures only %d bytes: the test builds the wrong one", size)
		}
		if size+bodyRoom > DefaultMaxRequestBytes {
			t.Errorf("raw %v: Envoy's largest request without a body is %d bytes; with %d bytes of body it exceeds the default max_request_bytes %d", raw, size, bodyRoom, DefaultMaxRequestBytes)
		}
	}
}
