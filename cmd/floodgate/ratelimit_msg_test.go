package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestRatelimitMessagesNameTheEnvironment: in ratelimit mode a rate limit
// configuration that cannot be read, or holds problems, is reported in the
// user's own terms: the variables that name it (RUNTIME_ROOT and beside it)
// and the files with their lines, never a line of the configuration
// Floodgate built from the environment, and the setting not said twice.
func TestRatelimitMessagesNameTheEnvironment(t *testing.T) {
	root := t.TempDir()
	bad := filepath.Join(root, "rl", "config", "a.yaml")
	writeFile(t, bad, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n  - key: k\n")
	for _, tc := range []struct {
		name, root string
		want       []string
	}{
		{"problems", root, []string{"RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY: 2 problems in the rate limit configuration " + filepath.Dir(bad), bad + ":4: d: descriptors[0]", bad + ":5: duplicate descriptor d.k"}},
		{"absent", filepath.Join(root, "none"), []string{"RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY: the rate limit configuration they name, " + filepath.Join(root, "none", "rl", "config") + ", cannot be read: stat "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1", "RUNTIME_ROOT": tc.root, "RUNTIME_SUBDIRECTORY": "rl"}
			var environ []string
			for k, v := range env {
				environ = append(environ, k+"="+v)
			}
			lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var stdout, stderr bytes.Buffer
			if code := runRatelimit(ctx, nil, lookup, environ, &stdout, &stderr); code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
			}
			msg := stderr.String()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the message lacks %q:\n%s", w, msg)
				}
			}
			for _, never := range []string{"environment:", "rls.config"} {
				if strings.Contains(msg, never) {
					t.Errorf("the message names %q, which the user never wrote:\n%s", never, msg)
				}
			}
		})
	}
}
