package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ErrOptions is wrapped by every error Validate (and so Dial) returns for
// options a user got wrong.
var ErrOptions = errors.New("redis options")

// Dial validates o and returns the client for its topology:
//
//   - SentinelMaster set: a Sentinel-managed master (redis.NewFailoverClient)
//     found through the Sentinels in Addresses;
//   - several Addresses, or Cluster: a Redis Cluster (*redis.ClusterClient)
//     seeded with them;
//   - one address: a standalone server (*redis.Client).
//
// The client never retries a command inside a decision (MaxRetries -1; the
// layer above decides what a failure means), dials once per attempt to get
// a connection, bounds reads, writes and the wait for a pooled connection by
// Timeout, and lets a context deadline cut a read short
// (ContextTimeoutEnabled). On a Cluster, MOVED and ASK redirections are
// still followed (go-redis' MaxRedirects, default 3) so decisions survive a
// resharding or failover; the store's script calls are never sent again
// after a network error (see sendOnce), which go-redis' cluster client
// otherwise does within that budget. Dial does not contact Redis: the first
// command connects. Use CheckServer to verify the server at start-up.
func Dial(o Options) (redis.UniversalClient, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	tlsConfig, err := o.TLS.Config()
	if err != nil {
		return nil, err
	}
	u := &redis.UniversalOptions{
		Addrs:                 o.Addresses,
		MasterName:            o.SentinelMaster,
		Username:              o.Username,
		Password:              o.Password,
		SentinelPassword:      o.SentinelPassword,
		TLSConfig:             tlsConfig,
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           o.DialTimeout,
		ReadTimeout:           o.Timeout,
		WriteTimeout:          o.Timeout,
		PoolTimeout:           o.Timeout,
		ContextTimeoutEnabled: true,
		PoolSize:              o.PoolSize,
		MinIdleConns:          o.MinIdleConns,
		// Pipelines (NewPipelined's batches, cross-slot decisions) share
		// the pool of single commands rather than a pool of their own, so
		// the first decisions after start ride the connection CheckServer
		// opened instead of paying a dial (a TLS handshake, AUTH) within
		// their deadline; pool_size bounds every connection.
		PipelinePoolSize: -1,
		// A new connection's handshake runs within the deadline of the
		// decision that needs it, a round trip per command: with Redis 20
		// ms away, HELLO, CLIENT SETINFO and the script call would not fit
		// a 50 ms timeout, and the pool could never replace a connection a
		// fault had closed. So the handshake is HELLO alone: no CLIENT
		// SETINFO (a label in CLIENT LIST) and no CLIENT MAINT_NOTIFICATIONS
		// (Redis Cloud's maintenance events, which a Redis >= 7.0 without
		// them refuses on the first connection). Connections lost to a
		// fault are also made again outside any decision (Store.warm).
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	var c redis.UniversalClient
	switch {
	case o.SentinelMaster != "":
		c = redis.NewFailoverClient(u.Failover())
	case len(o.Addresses) > 1 || o.Cluster:
		c = redis.NewClusterClient(u.Cluster())
	default:
		c = redis.NewClient(u.Simple())
	}
	if tlsConfig != nil && o.TLS.CertFile == "" {
		c.AddHook(noClientCertHint{})
	}
	return c, nil
}

// noClientCertHint explains a connection that a TLS server dropped when
// the client has no certificate to offer. A server that requires client
// certificates (tls-auth-clients yes) refuses one without after the TLS 1.3
// handshake has completed on the client's side, so, depending on timing,
// the client either reads the server's alert ("tls: certificate required")
// or finds the connection already reset, which says nothing of
// certificates. The hint names what to set in the second case too.
type noClientCertHint struct{}

func (noClientCertHint) DialHook(next redis.DialHook) redis.DialHook { return next }

func (noClientCertHint) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h := withClientCertHint(err); h != err {
			cmd.SetErr(h)
			return h
		}
		return err
	}
}

func (noClientCertHint) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if h := withClientCertHint(cmd.Err()); h != cmd.Err() {
				cmd.SetErr(h)
			}
		}
		return withClientCertHint(err)
	}
}

// withClientCertHint adds the hint to a connection reset, a broken pipe or
// an early end of stream; it returns any other error as it is.
func withClientCertHint(err error) error {
	if err == nil || strings.Contains(err.Error(), "certificate") ||
		!(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)) {
		return err
	}
	return fmt.Errorf("%w (the server closed the TLS connection; a server that requires client certificates does so to a client without one: set store.redis.tls cert_file and key_file)", err)
}

// Config builds the client TLS configuration: TLS 1.2 or later, the CA
// file's certificates as the only roots when CAFile is set (otherwise the
// system's), the client certificate when CertFile and KeyFile are set. It
// returns nil for nil options. Errors name the file at fault.
func (t *TLSOptions) Config() (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify,
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS CA file: %v", ErrOptions, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: TLS CA file %s holds no PEM certificate", ErrOptions, t.CAFile)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		if t.CertFile == "" || t.KeyFile == "" {
			return nil, fmt.Errorf("%w: TLS client certificate and key go together: cert file %q, key file %q", ErrOptions, t.CertFile, t.KeyFile)
		}
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS client certificate %s with key %s: %v", ErrOptions, t.CertFile, t.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
