package redisstore

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Options describe how to reach Redis: standalone, Redis Cluster or Sentinel,
// with optional AUTH/ACL and TLS. Dial turns it into a client. Every field
// is taken as given: the timeouts must be positive, and an empty Prefix
// means no prefix. The yaml tags are the settings' names under store.redis
// in Floodgate's configuration, which reads them into this struct as they
// are and fills in the defaults it documents (internal/config); Validate
// names its problems by them.
type Options struct {
	// Addresses: one host:port for a standalone server; several for Redis
	// Cluster seed nodes; with SentinelMaster, the Sentinels.
	Addresses []string `yaml:"addresses"`
	// SentinelMaster names the master the Sentinels watch; set it to use
	// Sentinel instead of Cluster when several addresses are given.
	SentinelMaster string `yaml:"sentinel_master"`
	// Cluster treats a single address as a Redis Cluster seed (a managed
	// cluster's configuration endpoint, say). Several addresses always mean
	// a Cluster unless SentinelMaster is set.
	Cluster bool `yaml:"cluster"`

	// Username and Password authenticate (ACL user, or the default user
	// when Username is empty). SentinelPassword authenticates to the
	// Sentinels themselves, when they require it. A configuration names
	// the passwords' files or variables, never the secrets.
	Username         string `yaml:"username"`
	Password         string `yaml:"-"`
	SentinelPassword string `yaml:"-"`

	// TLS, when non-nil, encrypts every connection.
	TLS *TLSOptions `yaml:"tls"`

	// Timeout bounds each decision's Redis work (the resilience layer also
	// applies it as a context deadline); Dial uses it for socket reads and
	// writes and the wait for a pooled connection. DialTimeout bounds a new
	// connection. Both must be positive. PoolSize and MinIdleConns size the
	// pool per node (0: go-redis' defaults).
	Timeout      time.Duration `yaml:"timeout"`
	DialTimeout  time.Duration `yaml:"dial_timeout"`
	PoolSize     int           `yaml:"pool_size"`
	MinIdleConns int           `yaml:"min_idle_conns"`

	// Prefix starts every key; empty, keys start with the bucket's name.
	Prefix string `yaml:"prefix"`
}

// TLSOptions configure TLS to Redis. Files are PEM.
type TLSOptions struct {
	CAFile             string `yaml:"ca_file"`              // trust these CAs instead of the system pool
	CertFile           string `yaml:"cert_file"`            // client certificate, for servers that require one
	KeyFile            string `yaml:"key_file"`             // its key
	ServerName         string `yaml:"server_name"`          // expected name on the server certificate (default: the host dialled)
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"` // never in production
}

// Validate reports every problem with o that Dial would refuse, or nil:
// a fielderr.List whose problems are each an ErrOptions, named by the
// setting's yaml name ("addresses[1]", "tls.cert_file"; "password" and
// "sentinel_password" for the secrets), so a configuration reader can put
// each at its line. It reads no files (Dial reads the TLS files).
func (o Options) Validate() error {
	var es fielderr.List
	bad := func(field, format string, args ...any) {
		es = append(es, &fielderr.Error{Path: field, Msg: fmt.Sprintf(format, args...), Kind: ErrOptions})
	}
	if len(o.Addresses) == 0 {
		if o.SentinelMaster != "" {
			bad("addresses", "sentinel master %q is set but no Sentinel address is given: list the Sentinels' host:port addresses", o.SentinelMaster)
		} else {
			bad("addresses", "must list at least one host:port (there is no address): one for a standalone server, several for Redis Cluster, or the Sentinels' with a sentinel master name")
		}
	}
	seen := make(map[string]bool, len(o.Addresses))
	for i, a := range o.Addresses {
		field := fmt.Sprintf("addresses[%d]", i)
		if err := checkAddress(a); err != nil {
			bad(field, "address %q: %v", a, err)
		} else if seen[a] {
			bad(field, "address %q is listed twice", a)
		}
		seen[a] = true
	}
	if o.SentinelMaster != "" && o.Cluster {
		bad("cluster", "sentinel master %q and cluster mode are both set: Redis Cluster does not use Sentinel; choose one", o.SentinelMaster)
	}
	if strings.TrimSpace(o.SentinelMaster) != o.SentinelMaster {
		bad("sentinel_master", "sentinel master name %q has surrounding spaces", o.SentinelMaster)
	}
	if o.SentinelPassword != "" && o.SentinelMaster == "" {
		bad("sentinel_password", "a sentinel password is set but no sentinel master: it is only used to reach Sentinels")
	}
	if o.Username != "" && o.Password == "" {
		bad("username", "username %q has no password: an ACL user authenticates with both", o.Username)
	}
	if o.Timeout <= 0 {
		bad("timeout", "timeout must be positive: it bounds each decision's Redis work, e.g. 50ms (got %v)", o.Timeout)
	}
	if o.DialTimeout <= 0 {
		bad("dial_timeout", "dial timeout must be positive: it bounds opening a connection, e.g. 250ms (got %v)", o.DialTimeout)
	}
	if o.PoolSize < 0 {
		bad("pool_size", "pool size must not be negative (got %d)", o.PoolSize)
	}
	if o.MinIdleConns < 0 {
		bad("min_idle_conns", "min idle connections must not be negative (got %d)", o.MinIdleConns)
	} else if o.PoolSize > 0 && o.MinIdleConns > o.PoolSize {
		bad("min_idle_conns", "min idle connections (%d) exceed the pool size (%d)", o.MinIdleConns, o.PoolSize)
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		bad("prefix", "key prefix %q contains a brace: braces mark the Redis Cluster hash tag, which must be the identity alone", o.Prefix)
	}
	if t := o.TLS; t != nil {
		if (t.CertFile == "") != (t.KeyFile == "") {
			bad("tls.cert_file", "TLS client certificate and key go together: cert file %q, key file %q", t.CertFile, t.KeyFile)
		}
		if t.InsecureSkipVerify && (t.CAFile != "" || t.ServerName != "") {
			bad("tls.insecure_skip_verify", "TLS: insecure_skip_verify turns off the verification that the CA file and server name configure; drop one or the other")
		}
	}
	return es.Err()
}

func checkAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want host:port (%v)", err)
	}
	if host == "" {
		return errors.New("the host is empty")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}
