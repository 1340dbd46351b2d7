package main

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/floodgate/floodgate/internal/config"
)

// debugFor wraps the admin port's /debug/ pages for listen.admin_debug:
// with loopback (the default) a peer that is not on this host is answered
// 403, whatever address the port listens on (envoyproxy/ratelimit's
// variables put it on 0.0.0.0, and a pod's port is reachable from the
// cluster); with all, every peer is served.
func debugFor(who string) func(http.Handler) http.Handler {
	if who == config.AdminDebugAll {
		return func(h http.Handler) http.Handler { return h }
	}
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !loopbackPeer(r.RemoteAddr) {
				http.Error(w, "floodgate: /debug/ answers loopback peers only (listen.admin_debug: loopback); "+
					"set listen.admin_debug: all to serve it to every peer that reaches the admin port", http.StatusForbidden)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

// loopbackPeer reports whether a request's RemoteAddr is on this host.
func loopbackPeer(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
