package redisstore

import "time"

// Options describe how to reach Redis: standalone, Redis Cluster or Sentinel,
// with optional AUTH/ACL and TLS. The config loader fills it from
// store.redis; Dial turns it into a client.
type Options struct {
	// Addresses: one host:port for a standalone server; several for Redis
	// Cluster seed nodes; with SentinelMaster, the Sentinels.
	Addresses []string
	// SentinelMaster names the master the Sentinels watch; set it to use
	// Sentinel instead of Cluster when several addresses are given.
	SentinelMaster string
	// Cluster treats a single address as a Redis Cluster seed (a managed
	// cluster's configuration endpoint, say). Several addresses always mean
	// a Cluster unless SentinelMaster is set.
	Cluster bool

	// Username and Password authenticate (ACL user, or the default user
	// when Username is empty). SentinelPassword authenticates to the
	// Sentinels themselves, when they require it.
	Username         string
	Password         string
	SentinelPassword string

	// TLS, when non-nil, encrypts every connection.
	TLS *TLSOptions

	// Timeout bounds each decision's Redis work (the resilience layer also
	// applies it as a context deadline); Dial uses it for socket reads and
	// writes and the wait for a pooled connection (default DefaultTimeout).
	// DialTimeout bounds a new connection (default DefaultDialTimeout).
	// PoolSize and MinIdleConns size the pool per node (0: go-redis'
	// defaults).
	Timeout      time.Duration
	DialTimeout  time.Duration
	PoolSize     int
	MinIdleConns int

	// Prefix starts every key (default DefaultPrefix).
	Prefix string
}

// TLSOptions configure TLS to Redis. Files are PEM.
type TLSOptions struct {
	CAFile             string // trust these CAs instead of the system pool
	CertFile, KeyFile  string // client certificate, for servers that require one
	ServerName         string // expected name on the server certificate (default: the host dialled)
	InsecureSkipVerify bool   // never in production
}
