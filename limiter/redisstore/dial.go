package redisstore

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dial returns a client for o (placeholder: standalone and cluster only; the
// full version with Sentinel, AUTH and TLS replaces it).
func Dial(o Options) (redis.UniversalClient, error) {
	if len(o.Addresses) == 0 {
		return nil, errors.New("redis: no addresses")
	}
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 250 * time.Millisecond
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: o.Addresses, MasterName: o.SentinelMaster, Username: o.Username, Password: o.Password,
		DialTimeout: o.DialTimeout, ReadTimeout: o.Timeout, WriteTimeout: o.Timeout, PoolTimeout: o.Timeout,
		ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: o.PoolSize, MinIdleConns: o.MinIdleConns,
	}), nil
}
