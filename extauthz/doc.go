// Package extauthz is Envoy's external authorization API as Floodgate
// serves it: it reads a request (View), selects the policies that match and
// derives each one's bucket identity and cost (Engine.Plan), hands the plan
// to the decide step every front end shares (limiter/decide), and renders
// Envoy's CheckResponse from the result (respond.go, with the RateLimit
// fields of limiter/respond). HTTPServer (http.go) is the API's other
// half, the protocol of Envoy's http_service, which nginx, HAProxy,
// Traefik and Caddy speak too: the same policies through the same decide
// step, answered as HTTP. floodgate replay plans logged requests with the
// same Engine.
//
// The Envoy contract it follows (Envoy's ext_authz filter,
// source/extensions/filters/http/ext_authz/ext_authz.cc, and its gRPC client,
// source/extensions/filters/common/ext_authz/ext_authz_grpc_impl.cc):
// a decision is never an RPC error; a deny is a non-OK status with a 429
// denied_response; RateLimit headers on allow go to the client through
// ok_response.response_headers_to_add; every returned header overwrites.
package extauthz
