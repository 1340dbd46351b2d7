package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter/redistest"
)

// What the token-bucket script costs Redis, part by part. Each part is the
// script cut short (it returns 1 there), so the difference between two
// parts is what the code between them costs: Redis' own timing of the call
// (INFO commandstats), per call and per decision, for one decision per call
// (a lone decision) and for 16 (a pipelined batch), on distinct keys and on
// one hot key, beside the naive limiter's GET + SET script and a script
// that returns at once. docs/performance.md has the figures:
//
//	go test ./limiter/redisstore -run '^$' -bench ScriptParts -benchtime 3000x

// scriptPart is tokenbucket.lua (after bucket.lua) cut short.
type scriptPart struct{ name, src string }

// Markers in tokenbucket.lua where the parts end; TestScriptPartsCut checks
// that each is there once, so the parts cannot drift from the script.
const (
	afterArgumentsMarker = "-- decide1 takes a decision of one bucket"
	flushMarker          = "\nflush()\nreturn out\n"
)

func scriptParts() ([]scriptPart, error) {
	i := strings.Index(takeBody, afterArgumentsMarker)
	if i < 0 || strings.Count(takeBody, afterArgumentsMarker) != 1 || strings.Count(takeBody, flushMarker) != 1 {
		return nil, fmt.Errorf("tokenbucket.lua no longer has the markers the parts are cut at")
	}
	return []scriptPart{
		{"1-return", "return 1\n"},
		{"2-clock-and-state-code", bucketSource + "\nreturn 1\n"},
		{"3-arguments", bucketSource + takeBody[:i] + "\nreturn 1\n"},
		{"4-decide-no-write", bucketSource + strings.Replace(takeBody, flushMarker, "\nreturn out\n", 1)},
		{"5-whole", bucketSource + takeBody},
	}, nil
}

// naiveScript is the naive limiter's call: one GET and one SET of its key.
const naiveScript = "local v = tonumber(redis.call('GET', KEYS[1]) or '0') + 1\nredis.call('SET', KEYS[1], v, 'EX', 60)\nreturn v\n"

func TestScriptPartsCut(t *testing.T) {
	parts, err := scriptParts()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(parts); i++ {
		if len(parts[i].src) <= len(parts[i-1].src) {
			t.Errorf("part %s is not longer than %s", parts[i].name, parts[i-1].name)
		}
	}
	if parts[len(parts)-1].src != takeScript.src {
		t.Error("the last part is not the whole script")
	}
}

func BenchmarkScriptParts(b *testing.B) {
	parts, err := scriptParts()
	if err != nil {
		b.Fatal(err)
	}
	parts = append(parts, scriptPart{"naive-get-set", naiveScript})
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	lim := limitArgs{c: 1_000_000_000, k: 1, g: 1} // never denies; a charged bucket is full again within a millisecond
	for _, p := range parts {
		for _, d := range []int{1, 16} {
			for _, hot := range []bool{false, true} {
				if p.name == "naive-get-set" && d > 1 {
					continue // one call per decision: that is the naive limiter
				}
				keys := map[bool]string{false: "distinct", true: "hot"}[hot]
				b.Run(fmt.Sprintf("%s/decisions=%d/%s", p.name, d, keys), func(b *testing.B) {
					benchScriptPart(b, ctx, c, p, d, hot, lim)
				})
			}
		}
	}
}

func benchScriptPart(b *testing.B, ctx context.Context, c *redis.Client, p scriptPart, d int, hot bool, lim limitArgs) {
	sc := redis.NewScript(p.src)
	if err := sc.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	buckets := make([]bucketArgs, 1)
	buckets[0] = bucketArgs{limitArgs: lim, cost: 1}
	argv := takeArgv(d, func(int) []bucketArgs { return buckets })
	keys := make([]string, d)
	n := 0
	call := func() {
		for j := range keys {
			if hot {
				keys[j] = "fg:parts:{hot}"
			} else {
				keys[j] = "fg:parts:{" + strconv.Itoa(n) + "}"
				n++
			}
		}
		if err := sc.EvalSha(ctx, c, keys, argv...).Err(); err != nil && err != redis.Nil {
			b.Fatal(err)
		}
	}
	for range 200 { // warm the script and the keys' memory
		call()
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		call()
	}
	b.StopTimer()
	calls, usec := evalshaStat(b, ctx, c)
	if calls < int64(b.N) {
		b.Fatalf("Redis counted %d EVALSHA calls, %d were made", calls, b.N)
	}
	b.ReportMetric(usec/float64(calls), "redis-µs/call")
	b.ReportMetric(usec/float64(calls)/float64(d), "redis-µs/decision")
}

// evalshaStat reads EVALSHA's calls and microseconds from INFO
// commandstats.
func evalshaStat(b *testing.B, ctx context.Context, c *redis.Client) (calls int64, usec float64) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return calls, usec
}
