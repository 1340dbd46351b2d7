package bench

import (
	"fmt"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"
)

// checkRequest builds an Envoy-shaped CheckRequest as Envoy's HTTP filter
// sends it in its default mode (headers map, pseudo-headers included) for
// caller i. apiKey "" leaves x-api-key out. The addresses are data inside the
// request (198.18.0.0/15, the benchmarking range); nothing is sent to them.
func checkRequest(path, apiKey string, i int) *authv3.CheckRequest {
	ip := "198.18." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	if i >= 1<<16 {
		ip = "198.19." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	h := map[string]string{
		":authority":        "api.example.com",
		":method":           "GET",
		":path":             path,
		":scheme":           "http",
		"accept":            "application/json",
		"user-agent":        "floodbench/1.0",
		"x-forwarded-for":   ip,
		"x-forwarded-proto": "http",
		"x-request-id":      fmt.Sprintf("5f0e1b7c-8a43-4a59-9d2e-%012d", i),
	}
	if apiKey != "" {
		h["x-api-key"] = apiKey
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: socketAddress(ip, 40000+uint32(i%20000))},
		Destination: &authv3.AttributeContext_Peer{Address: socketAddress("127.0.0.1", 8080)},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: strconv.Itoa(1_000_000 + i), Method: "GET", Path: path, Host: "api.example.com",
			Scheme: "http", Protocol: "HTTP/1.1", Headers: h,
		}},
	}}
}

func socketAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

// workload is what the load generator sends: requests encoded once, so the
// client spends its CPU on gRPC only, and the answer every one should get.
type workload struct {
	reqs  [][]byte
	allow bool // every request should be allowed (else: denied)
	// method is the gRPC method the requests are for; "" is ext_authz
	// Check. allowed reads an answer of that method; nil reads a
	// CheckResponse's status.
	method  string
	allowed func(resp []byte) (bool, error)
	// messages returns empty messages of the method's request and response
	// types, for the client that does protobuf's work (--client proto);
	// nil is ext_authz's CheckRequest and CheckResponse.
	messages func() (req, resp proto.Message)
}

// newMessages returns empty request and response messages of w's method.
func (w workload) newMessages() (req, resp proto.Message) {
	if w.messages != nil {
		return w.messages()
	}
	return &authv3.CheckRequest{}, &authv3.CheckResponse{}
}

// rpc is the full gRPC method name w's requests are sent to.
func (w workload) rpc() string {
	if w.method == "" {
		return checkMethod
	}
	return w.method
}

// answer reports whether resp, an answer to one of w's requests, allows it.
func (w workload) answer(resp []byte) (bool, error) {
	if w.allowed != nil {
		return w.allowed(resp)
	}
	code, err := statusCode(resp)
	return code == 0, err
}

func encode(reqs []*authv3.CheckRequest) [][]byte {
	out := make([][]byte, len(reqs))
	for i, r := range reqs {
		b, err := proto.Marshal(r)
		if err != nil {
			panic(err) // built above: cannot fail
		}
		out[i] = b
	}
	return out
}

// distinct is one request per caller: n API keys, n client IPs.
func distinct(path string, n int) workload {
	reqs := make([]*authv3.CheckRequest, n)
	for i := range reqs {
		reqs[i] = checkRequest(path+"items/"+strconv.Itoa(i%1000), "k_live_"+strconv.Itoa(10_000_000+i), i)
	}
	return workload{reqs: encode(reqs), allow: true}
}

// single is one caller sending the same request over and over.
func single(path, apiKey string, allow bool) workload {
	return workload{reqs: encode([]*authv3.CheckRequest{checkRequest(path+"items/1", apiKey, 7)}), allow: allow}
}
