package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/proxytest"
)

// TestTryRunsEachRecipeFromZero runs `bash e2e/try.sh PROXY` (what make
// try-nginx, try-haproxy and try-caddy run) on free ports, as a user would
// from a fresh checkout: once it says it is ready, the sample policy's burst
// of five reaches the demo application through the proxy (Caddy's recipe
// mounts it under /api/, so it gets /items), the sixth request
// is Floodgate's 429 with Retry-After, and Ctrl-C (SIGINT) stops every
// process it started, leaving the ports free.
func TestTryRunsEachRecipeFromZero(t *testing.T) {
	for _, proxy := range []struct{ name, pkg string }{{"nginx", "nginx"}, {"haproxy", "haproxy"}, {"caddy", "caddy"}} {
		t.Run(proxy.name, func(t *testing.T) {
			proxytest.Binary(t, proxy.name, proxy.pkg)
			addrs := proxytest.FreeAddrs(t, 8)
			port := func() string {
				_, p, _ := net.SplitHostPort(addrs[0])
				addrs = addrs[1:]
				return p
			}
			env := map[string]string{
				"TRY_PORT": port(), "TRY_GRPC_PORT": port(), "TRY_DOOR_PORT": port(), "TRY_APP_PORT": port(),
				"TRY_GRPC_APP_PORT": port(), "TRY_GRPC_LISTEN": port(), "TRY_ADMIN_PORT": port(),
				"TRY_ABNS": "floodgate-try-" + port(),
			}
			cmd := exec.Command("bash", "try.sh", proxy.name)
			cmd.Env = cmd.Environ()
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					<-done
				}
			})
			ready := make(chan string, 1)
			go func() {
				var seen strings.Builder
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					seen.WriteString(sc.Text() + "\n")
					if strings.Contains(sc.Text(), "Ctrl-C stops everything") {
						ready <- seen.String()
					}
				}
				io.Copy(io.Discard, out)
				done <- cmd.Wait()
			}()
			select {
			case <-ready:
			case err := <-done:
				stopped = true
				t.Fatalf("try.sh %s exited before it was ready: %v\n%s", proxy.name, err, stderr.String())
			case <-time.After(3 * time.Minute):
				t.Fatalf("try.sh %s not ready after 3 minutes\n%s", proxy.name, stderr.String())
			}

			client := &http.Client{Timeout: 10 * time.Second}
			url := "http://127.0.0.1:" + env["TRY_PORT"] + "/api/items"
			for i := 1; i <= 6; i++ {
				resp, err := client.Get(url)
				if err != nil {
					t.Fatalf("request %d: %v\n%s", i, err, stderr.String())
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case i <= 5 && (resp.StatusCode != 200 || !strings.HasPrefix(string(body), "the application got GET /")):
					t.Errorf("request %d of the burst: %d %q, want the demo application's 200", i, resp.StatusCode, body)
				case i <= 5 && resp.Header.Get("RateLimit-Remaining") != string(rune('0'+5-i)):
					t.Errorf("request %d: RateLimit-Remaining %q, want %d", i, resp.Header.Get("RateLimit-Remaining"), 5-i)
				case i == 6 && (resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1"):
					t.Errorf("request 6: %d %v %q, want Floodgate's 429 with Retry-After 1", resp.StatusCode, resp.Header, body)
				}
			}
			client.CloseIdleConnections()

			syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			select {
			case <-done:
				stopped = true
			case <-time.After(30 * time.Second):
				t.Fatalf("try.sh %s still running 30 s after Ctrl-C", proxy.name)
			}
			for _, k := range []string{"TRY_PORT", "TRY_DOOR_PORT", "TRY_APP_PORT", "TRY_ADMIN_PORT"} {
				if c, err := net.DialTimeout("tcp", "127.0.0.1:"+env[k], time.Second); err == nil {
					c.Close()
					t.Errorf("%s (%s) still accepts connections after Ctrl-C: a process outlived try.sh", k, env[k])
				}
			}
		})
	}
}
