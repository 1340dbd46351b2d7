package bench

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The reference rows (rt) and (naive) are not a server answering gRPC: the
// load generator itself calls a script on the same redis-server over
// go-redis, timed per call like every other cell. (rt) is the floor of any
// limiter that asks Redis: one round trip. (naive) is the limiter without
// batching: one GET + SET script call per decision, so Redis' CPU per
// decision of (b) and (c) can be set against it in the same run.

// redisDirect is the "server" of the rows the load generator drives over
// go-redis itself.
const redisDirect = "redis-direct"

// rtScript returns at once: a round trip and nothing else.
const rtScript = `return 1`

// naiveScript is a minimal token-bucket-like decision: read the caller's
// state, write it back with an expiry, one script call per decision.
const naiveScript = `local n = (tonumber(redis.call('GET', KEYS[1])) or 0) + 1
redis.call('SET', KEYS[1], n, 'PX', 60000)
return n`

// directDriver drives (rt) and (naive) from the load generator's process.
type directDriver struct {
	rc        *redis.Client
	rtSHA     string
	naiveSHA  string
	naiveKeys []string
}

// newDirectDriver loads both scripts into the redis-server at addr and
// opens a go-redis client with a connection for each call in flight.
func newDirectDriver(ctx context.Context, addr string, poolSize, keys int) (*directDriver, error) {
	if err := CheckLoopback(addr); err != nil {
		return nil, err
	}
	d := &directDriver{rc: redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize, MinIdleConns: poolSize})}
	var err error
	if d.rtSHA, err = d.rc.ScriptLoad(ctx, rtScript).Result(); err == nil {
		d.naiveSHA, err = d.rc.ScriptLoad(ctx, naiveScript).Result()
	}
	if err != nil {
		d.rc.Close()
		return nil, fmt.Errorf("loading the reference scripts into redis-server at %s: %w", addr, err)
	}
	d.naiveKeys = make([]string, keys)
	for i := range d.naiveKeys {
		d.naiveKeys[i] = "floodbench:naive:k_live_" + strconv.Itoa(10_000_000+i)
	}
	return d, nil
}

func (d *directDriver) close() { d.rc.Close() }

// drive runs one cell of scenario id ("rt" or "naive"). An answer other
// than a positive integer is unexpected.
func (d *directDriver) drive(ctx context.Context, id string, cl cell) result {
	return driveCalls(ctx, cl, func(i int) callFunc {
		next := i * 7919 // callers walk the keys from spread-out points, as in drive
		return func(ctx context.Context) (bool, error) {
			var n int64
			var err error
			if id == "naive" {
				n, err = d.rc.EvalSha(ctx, d.naiveSHA, []string{d.naiveKeys[next%len(d.naiveKeys)]}).Int64()
				next++
			} else {
				n, err = d.rc.EvalSha(ctx, d.rtSHA, nil).Int64()
			}
			return n < 1, err
		}
	})
}
