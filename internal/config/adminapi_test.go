package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminAPIIsCheckedAtItsLines(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens")
	if err := os.WriteFile(good, []byte("alice:0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("alice:short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := parseResolved("ok.yaml", []byte("admin_api: {token_file: "+good+"}\n"+goodPolicy)); err != nil || c.AdminAPI.TokenFile != good {
		t.Fatalf("a good token file: %v", err)
	}
	if c := mustParse(t, goodPolicy); c.AdminAPI != nil {
		t.Fatal("admin_api left out is on")
	}
	for _, tc := range []struct{ y, want string }{
		{"admin_api: {}\n" + goodPolicy, "bad.yaml:1: admin_api.token_file: is required"},
		{"listen: {admin: \"\"}\nadmin_api:\n  token_file: " + good + "\n" + goodPolicy, "bad.yaml:2: admin_api: the /v1/ API is served on listen.admin, which is off"},
		{"admin_api:\n  token_file: " + short + "\n" + goodPolicy, "bad.yaml:2: admin_api.token_file: " + short + ":1: token alice holds 5 characters"},
		{"admin_api:\n  token_file: " + filepath.Join(dir, "missing") + "\n" + goodPolicy, "bad.yaml:2: admin_api.token_file: open " + filepath.Join(dir, "missing")},
	} {
		_, err := parseResolved("bad.yaml", []byte(tc.y))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.y, err, tc.want)
		}
	}
}
