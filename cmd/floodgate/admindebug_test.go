package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/config"
)

// TestDebugPagesAnswerLoopbackPeersOnly: with listen.admin_debug: loopback
// (the default) a /debug/ page is served to a peer on this host and
// refused, 403 naming the setting, to any other, whatever address the admin
// port listens on; with all, to every peer. (The peers are RemoteAddrs of
// requests handed to the handler: no traffic leaves loopback.)
func TestDebugPagesAnswerLoopbackPeersOnly(t *testing.T) {
	page := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("who is limited")) })
	for _, c := range []struct {
		who, peer string
		want      int
	}{
		{config.AdminDebugLoopback, "127.0.0.1:5000", 200},
		{config.AdminDebugLoopback, "127.9.9.9:5000", 200},
		{config.AdminDebugLoopback, "[::1]:5000", 200},
		{config.AdminDebugLoopback, "[::ffff:127.0.0.1]:5000", 200},
		{config.AdminDebugLoopback, "10.1.2.3:5000", 403},
		{config.AdminDebugLoopback, "[2001:db8::1]:5000", 403},
		{config.AdminDebugLoopback, "[::ffff:10.1.2.3]:5000", 403},
		{config.AdminDebugLoopback, "not-an-address", 403},
		{config.AdminDebugAll, "10.1.2.3:5000", 200},
		{config.AdminDebugAll, "127.0.0.1:5000", 200},
	} {
		req := httptest.NewRequest(http.MethodGet, "/debug/limited", nil)
		req.RemoteAddr = c.peer
		rec := httptest.NewRecorder()
		debugFor(c.who)(page).ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("admin_debug %s, peer %s: %d, want %d", c.who, c.peer, rec.Code, c.want)
		}
		if rec.Code == 403 && !strings.Contains(rec.Body.String(), "listen.admin_debug: all") {
			t.Errorf("the refusal does not say how to open the page: %q", rec.Body.String())
		}
		if rec.Code == 200 && rec.Body.String() != "who is limited" {
			t.Errorf("admin_debug %s, peer %s: body %q", c.who, c.peer, rec.Body.String())
		}
	}
}
