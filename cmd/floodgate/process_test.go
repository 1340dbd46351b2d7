package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/extauthz/extauthztest"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/floodgate/floodgate/internal/floodgatetest"
)

// binary is the floodgate command built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	var err error
	if binary, err = (floodgatetest.Build{}).Path(); err != nil {
		fmt.Fprintln(os.Stderr, "building floodgate:", err)
		os.Exit(1)
	}
	os.Exit(floodgatetest.Main(m))
}

// proc is a running floodgate process.
type proc = floodgatetest.Process

// startFloodgate runs `floodgate serve --config` on cfg (YAML) and waits for
// its "serving" log line, which names the addresses it bound.
func startFloodgate(t *testing.T, cfg string, extra ...string) *proc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return startCommand(t, append([]string{"serve", "--config", path}, extra...)...)
}

// startCommand runs floodgate with args, waits for its "serving" line and
// stops it when the test ends.
func startCommand(t *testing.T, args ...string) *proc {
	t.Helper()
	return floodgatetest.Start(t, binary, args...)
}

func loadFixture(t *testing.T, name string) *authv3.CheckRequest {
	t.Helper()
	return extauthztest.Fixture(t, filepath.Join("..", "..", "extauthz", "testdata", "envoy", name))
}

func hdr(resp *authv3.CheckResponse, name string) string {
	for _, h := range append(resp.GetOkResponse().GetResponseHeadersToAdd(), resp.GetDeniedResponse().GetHeaders()...) {
		if h.GetHeader().GetKey() == name {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

func isAllowed(resp *authv3.CheckResponse) bool { return resp.GetStatus().GetCode() == 0 }
