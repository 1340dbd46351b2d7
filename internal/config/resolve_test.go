package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parseResolved is Load for bytes: Parse, then Resolve.
func parseResolved(file string, data []byte) (*Config, error) {
	c, err := Parse(file, data)
	if err != nil {
		return nil, err
	}
	if err := c.Resolve(); err != nil {
		return nil, err
	}
	return c, nil
}

// TestParseReadsNoSecretAndNoFile: every secret and file a configuration
// names outside itself is missing here, and Parse accepts it (a CI machine
// lacks them all); Resolve then reports each at its line.
func TestParseReadsNoSecretAndNoFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	y := `identity: {hash_secret_env: FG_TEST_PARSE_UNSET}
listen:
  tls: {cert_file: ` + missing + `/cert.pem, key_file: ` + missing + `/key.pem}
store:
  backend: redis
  redis:
    addresses: ["127.0.0.1:6379"]
    username: app
    password_file: ` + missing + `/password
    tls: {ca_file: ` + missing + `/ca.pem}
` + goodPolicy
	c, err := Parse("ci.yaml", []byte(y))
	if err != nil {
		t.Fatalf("Parse read something outside the file: %v", err)
	}
	err = c.Resolve()
	if err == nil {
		t.Fatal("Resolve found everything missing present")
	}
	for _, want := range []string{
		"ci.yaml:1: identity.hash_secret_env: environment variable FG_TEST_PARSE_UNSET is not set",
		"ci.yaml:3: listen.tls.cert_file: stat " + missing + "/cert.pem",
		"ci.yaml:3: listen.tls.key_file: stat " + missing + "/key.pem",
		"ci.yaml:9: store.redis.password_file: open " + missing + "/password",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve's problems lack %q:\n%v", want, err)
		}
	}
}

// TestASecretGivenTwiceIsTheFilesMistake: both a file and a variable for
// one secret is wrong wherever the file is checked, so Parse says so.
func TestASecretGivenTwiceIsTheFilesMistake(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"identity: {hash_secret_file: /a, hash_secret_env: B}\n" + goodPolicy, "bad.yaml:1: identity.hash_secret_file: a secret is given both in file /a and in environment variable B; give one"},
		{"store: {backend: redis, redis: {addresses: [\"127.0.0.1:6379\"], password_file: /a, password_env: B}}\n" + goodPolicy, "bad.yaml:1: store.redis.password_file: a secret is given both"},
	} {
		if _, err := Parse("bad.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse = %v, want %q", err, tc.want)
		}
	}
}

// TestAReloadKeepsTheSecretItStartedWith: a reload keys the new policies
// with the running identity hash secret, whatever the file behind it holds
// now, and names identity as waiting for a restart when it differs or
// cannot be read; a Redis password it cannot read does not reject it.
func TestAReloadKeepsTheSecretItStartedWith(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	password := filepath.Join(dir, "password")
	os.WriteFile(secret, []byte("0123456789abcdef-first\n"), 0o600)
	os.WriteFile(password, []byte("pw\n"), 0o600)
	y := "identity: {hash_secret_file: " + secret + "}\nstore: {backend: redis, redis: {addresses: [\"127.0.0.1:6379\"], password_file: " + password + "}}\n" + goodPolicy
	running, err := parseResolved("ok.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if string(running.HashSecret()) != "0123456789abcdef-first" {
		t.Fatalf("Resolve keyed the policies with %q", running.HashSecret())
	}
	reload := func() ([]string, *Config, error) {
		next := mustParse(t, strings.Replace(y, "capacity: 10", "capacity: 11", 1))
		changed, err := next.ResolveReload(running)
		return changed, next, err
	}
	if changed, next, err := reload(); len(changed) != 0 || err != nil || string(next.HashSecret()) != "0123456789abcdef-first" {
		t.Errorf("same secret: changed %q, %v, secret %q", changed, err, next.HashSecret())
	}

	os.WriteFile(secret, []byte("0123456789abcdef-second\n"), 0o600)
	os.Remove(password)
	changed, next, err := reload()
	if strings.Join(changed, " ") != "identity" || err != nil {
		t.Errorf("rotated secret: changed %q, %v; want identity named, nothing wrong", changed, err)
	}
	if string(next.HashSecret()) != "0123456789abcdef-first" || next.Policies[0].Capacity != 11 {
		t.Errorf("the reload runs %q with capacity %d; want the secret it started with and the new capacity", next.HashSecret(), next.Policies[0].Capacity)
	}

	os.Remove(secret)
	changed, next, err = reload()
	if strings.Join(changed, " ") != "identity" || err == nil || !strings.Contains(err.Error(), "identity.hash_secret_file: open "+secret) {
		t.Errorf("unreadable secret: changed %q, %v", changed, err)
	}
	if string(next.HashSecret()) != "0123456789abcdef-first" {
		t.Errorf("an unreadable secret replaced the running one: %q", next.HashSecret())
	}

	other := mustParse(t, "log: {level: warn}\n"+strings.Replace(y, "hash_secret_file: "+secret, "hash_secret_env: FG_TEST_RELOAD_UNSET", 1))
	if changed, _ := other.ResolveReload(running); strings.Join(changed, " ") != "identity log" {
		t.Errorf("a changed identity section and log: %q, want identity log in section order", changed)
	}
}
