package config

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/floodgate/floodgate/internal/secret"
	"github.com/floodgate/floodgate/limiter/fielderr"
	"github.com/floodgate/floodgate/limiter/redisstore"
)

// Resolve reads what a parsed configuration names outside itself: the
// identity hash secret (HashSecret), the Redis passwords (store.backend:
// redis) and the TLS files of listen.tls, rls.xds.tls and store.redis.tls, which must
// exist and, for Redis, load. Every problem is
// reported at the line of the setting that names the file or variable, in
// a fielderr.List. Parse reads none of them: a configuration is checked on a
// machine that lacks the secrets, and a reload does not read again what a
// running server read at start (ResolveReload).
func (c *Config) Resolve() error {
	v := c.resolver()
	hs, err := c.Identity.hashSecret()
	if err != nil {
		v.at(secretPath("identity.hash_secret", c.Identity.HashSecretFile, c.Identity.HashSecretEnv), "%v", err)
	}
	c.hashSecret = hs
	c.resolveAdminAPI(v)
	if t := c.Listen.TLS; t != nil {
		v.filesExist("listen.tls", map[string]string{"cert_file": t.CertFile, "key_file": t.KeyFile, "client_ca_file": t.ClientCAFile})
	}
	if x := c.RLS.XDS; x != nil && x.TLS != nil {
		v.filesExist("rls.xds.tls", map[string]string{"ca_file": x.TLS.CAFile, "cert_file": x.TLS.CertFile, "key_file": x.TLS.KeyFile})
	}
	if c.Store.Backend == "redis" {
		o, err := c.RedisOptions()
		if fe, ok := err.(*fielderr.Error); ok {
			v.at(fe.Path, "%s", fe.Msg)
		} else if _, err := o.TLS.Config(); err != nil {
			v.at("store.redis.tls", "%v", strings.TrimPrefix(err.Error(), redisstore.ErrOptions.Error()+": "))
		}
	}
	if len(v.problems) > 0 {
		sort.SliceStable(v.problems, func(i, j int) bool { return v.problems[i].Line < v.problems[j].Line })
		return v.problems
	}
	return nil
}

// resolver reports problems found after Parse at the lines Parse recorded.
func (c *Config) resolver() *validator {
	return &validator{file: c.Source, lines: c.lines, reported: map[string]bool{}}
}

// Problems puts problems found after Parse by the code a section is handed
// to (a front end compiling its part, say), each naming its setting by path
// and with no file, at the lines of c's file that set them (or the nearest
// enclosing setting's), in line order.
func (c *Config) Problems(ps fielderr.List) fielderr.List {
	v := c.resolver()
	for _, p := range ps {
		v.at(p.Path, "%s", p.Msg)
	}
	sort.SliceStable(v.problems, func(i, j int) bool { return v.problems[i].Line < v.problems[j].Line })
	return v.problems
}

// LineOf is the line of c's file that sets path, or the nearest enclosing
// setting's; 0 when the file sets neither.
func (c *Config) LineOf(path string) int { return c.resolver().lineOf(path) }

// ResolveReload resolves c, parsed from a changed file, for a server that
// started with running (resolved): what a running server read at start is
// not taken from c. c keeps running's identity hash secret, so no caller's
// bucket changes under it; the Redis passwords and TLS files are not read,
// so one that cannot be read now does not reject new policies. It returns the sections c changes that wait for a restart
// (RestartOnlyChanges), with "identity" also when the secret c names reads
// differently from running's, or cannot be read (then secretErr says why).
func (c *Config) ResolveReload(running *Config) (changed []string, secretErr error) {
	changed = running.RestartOnlyChanges(c)
	hs, err := c.Identity.hashSecret()
	if err != nil || !bytes.Equal(hs, running.hashSecret) {
		if !slices.Contains(changed, "identity") {
			changed = insertSection(changed, "identity")
		}
		if err != nil {
			secretErr = fmt.Errorf("%s: %w", secretPath("identity.hash_secret", c.Identity.HashSecretFile, c.Identity.HashSecretEnv), err)
		}
	}
	c.hashSecret = running.hashSecret
	return changed, secretErr
}

// insertSection adds section to changed in the order of restartOnly's
// fields, the order RestartOnlyChanges names them in.
func insertSection(changed []string, section string) []string {
	t := reflect.TypeOf(restartOnly{})
	out := make([]string, 0, len(changed)+1)
	for i := 0; i < t.NumField(); i++ {
		s := sectionName(t.Field(i))
		if s == section || slices.Contains(changed, s) {
			out = append(out, s)
		}
	}
	return out
}

// ResolveOffline is Resolve for a command that decides requests without
// serving them and shares no bucket with anyone (floodgate replay, whose
// buckets live for one run): an identity hash secret that cannot be read
// here (its file or environment variable missing on an operator's laptop,
// or too short) is replaced by a random one for this process, said in
// SecretReplaced. The Redis passwords and TLS files are not read: such a
// command connects to nothing.
func (c *Config) ResolveOffline() {
	hs, err := c.Identity.hashSecret()
	if err != nil {
		// What is missing is this machine's, not the file's: a run whose
		// buckets are its own needs no shared secret.
		at := secretPath("identity.hash_secret", c.Identity.HashSecretFile, c.Identity.HashSecretEnv)
		hs = make([]byte, 32)
		rand.Read(hs)
		c.SecretReplaced = fmt.Sprintf("%s: %v", at, err)
	}
	c.hashSecret = hs
}

// RedisOptions returns the connection settings for redisstore.Dial, reading
// the secrets now (a rotated password file takes effect on restart). The
// timeouts and the prefix the file leaves out hold this package's defaults
// (Parse filled them in); redisstore takes every field as given.
func (c *Config) RedisOptions() (redisstore.Options, error) { return c.Store.Redis.options() }

func (r Redis) options() (redisstore.Options, error) {
	pw, err := secret.Read(r.PasswordFile, r.PasswordEnv)
	if err != nil {
		return redisstore.Options{}, &fielderr.Error{Path: secretPath("store.redis.password", r.PasswordFile, r.PasswordEnv), Msg: err.Error()}
	}
	spw, err := secret.Read(r.SentinelPasswordFile, r.SentinelPasswordEnv)
	if err != nil {
		return redisstore.Options{}, &fielderr.Error{Path: secretPath("store.redis.sentinel_password", r.SentinelPasswordFile, r.SentinelPasswordEnv), Msg: err.Error()}
	}
	o := r.Options
	o.Password, o.SentinelPassword = pw, spw
	return o, nil
}

// secretPath names the key a secret was read from: base_file or base_env
// (base_file when both are set, the first of the two).
func secretPath(base, file, env string) string {
	if env != "" && file == "" {
		return base + "_env"
	}
	return base + "_file"
}

// hashSecret reads the identity hash secret from its file or environment
// variable; it must be long enough to resist guessing. Nil when neither is
// set.
func (id Identity) hashSecret() ([]byte, error) {
	s, err := secret.Read(id.HashSecretFile, id.HashSecretEnv)
	if err != nil || s == "" {
		return nil, err
	}
	if s = strings.TrimSpace(s); len(s) < 16 {
		return nil, fmt.Errorf("the hash secret holds %d characters; use at least 16", len(s))
	}
	return []byte(s), nil
}

// filesExist reports, under base, each named file that cannot be found.
func (v *validator) filesExist(base string, files map[string]string) {
	for key, f := range files {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			v.at(base+"."+key, "%v", err)
		}
	}
}
