package replay

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/floodgatetest"
)

// benchConfig is a realistic edge: per API key (per address without one),
// per address, and a shadow candidate.
const benchConfig = `
store: {backend: redis, redis: {addresses: ["127.0.0.1:6379"]}}
client_ip: {trusted_hops: 1}
policies:
  - name: api-per-key
    match: {path_prefix: /api/}
    key: [header:x-api-key, client_ip]
    capacity: 20
    refill_per_second: 2
  - name: per-ip
    key: [client_ip]
    capacity: 50
    refill_per_second: 5
  - name: per-ip-candidate
    key: [client_ip]
    capacity: 10
    refill_per_second: 1
    mode: shadow
`

// writeBenchLog writes n access-log lines from callers callers (half with
// an API key, half by address), spread over an hour and written slightly
// out of start order, as Envoy writes them.
func writeBenchLog(w io.Writer, n, callers int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed))
	bw := bufio.NewWriterSize(w, 1<<20)
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli()
	span := int64(3600_000)
	paths := []string{"/api/items?page=2", "/api/items/42", "/api/search?q=x", "/static/app.js", "/api/orders"}
	agents := []string{"curl/8.5.0", "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0", "okhttp/4.12.0", "python-requests/2.32"}
	var buf []byte
	for i := range n {
		// Start times rise through the hour; the jitter (up to 2 s) is how
		// much later than its start each line is written.
		ms := start + span*int64(i)/int64(n) - rng.Int64N(2000)
		c := rng.IntN(callers)
		buf = buf[:0]
		buf = append(buf, `{"start_time":"`...)
		buf = time.UnixMilli(ms).UTC().AppendFormat(buf, "2006-01-02T15:04:05.000Z")
		buf = append(buf, `","method":"GET","path":"`...)
		buf = append(buf, paths[rng.IntN(len(paths))]...)
		buf = append(buf, `","authority":"api.example.com","downstream_remote_address":"10.0.`...)
		buf = strconv.AppendInt(buf, int64(rng.IntN(4)), 10)
		buf = append(buf, `.1:`...)
		buf = strconv.AppendInt(buf, int64(30000+rng.IntN(30000)), 10)
		buf = append(buf, `","response_code":200,"duration":`...)
		buf = strconv.AppendInt(buf, int64(rng.IntN(300)), 10)
		buf = append(buf, `,"request_headers":{"x-api-key":`...)
		if c%2 == 0 {
			buf = append(buf, `"key-`...)
			buf = strconv.AppendInt(buf, int64(c), 36)
			buf = append(buf, '"')
		} else {
			buf = append(buf, `null`...)
		}
		buf = append(buf, `,"x-forwarded-for":"`...)
		buf = fmt.Appendf(buf, "%d.%d.%d.%d, 10.0.0.1", 100+c>>16&0x3f, c>>8&0xff, c&0xff, 1+c%250)
		buf = append(buf, `","user-agent":"`...)
		buf = append(buf, agents[c%len(agents)]...)
		buf = append(buf, "\"}}\n"...)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// BenchmarkReplay decides a generated log in process: lines per second of
// the whole pipeline (read, parse and plan on every core, decide in order).
func BenchmarkReplay(b *testing.B) {
	cfg, err := doors.Parse("bench.yaml", []byte(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "access.log")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	const lines = 200_000
	if err := writeBenchLog(f, lines, 20_000, 1); err != nil {
		b.Fatal(err)
	}
	f.Close()
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		res, err := Run(context.Background(), f, Options{Workers: 2, MaxLineBytes: DefaultMaxLineBytes, Engine: cfg.Engine, ReorderWindow: DefaultReorderWindow, MaxBuckets: 1 << 30})
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		if res.Decided != lines {
			b.Fatalf("decided %d of %d", res.Decided, lines)
		}
	}
	b.ReportMetric(float64(lines*b.N)/b.Elapsed().Seconds(), "lines/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(lines*b.N), "cpu-µs/line")
}

// cpuTime is the CPU time this process has used (user and system): on a
// machine shared with other work, CPU per line says more than lines per
// second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var (
	millionLines   = flag.Int("replay.lines", 1_000_000, "lines of BenchmarkReplayBinary's log")
	millionCallers = flag.Int("replay.callers", 100_000, "callers in BenchmarkReplayBinary's log")
	maxCallers     = flag.Int("replay.max-callers", 0, "BenchmarkReplayBinary's --max-callers (0: none)")
)

// TestMain removes the floodgate binary BenchmarkReplayBinary builds.
func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// BenchmarkReplayBinary is `make bench-replay`: it builds floodgate,
// generates a log of a million lines from 100,000 callers, replays it with
// the binary and reports lines per second and the process's peak resident
// memory.
func BenchmarkReplayBinary(b *testing.B) {
	dir := b.TempDir()
	bin := floodgatetest.Floodgate(b, floodgatetest.Build{})
	cfgPath := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(cfgPath, []byte(benchConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	logPath := filepath.Join(dir, "access.log")
	f, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	if err := writeBenchLog(f, *millionLines, *millionCallers, 1); err != nil {
		b.Fatal(err)
	}
	f.Close()
	st, _ := os.Stat(logPath)
	b.ResetTimer()
	var rss int64
	var cpu time.Duration
	for range b.N {
		cmd := exec.Command(bin, "replay", "--config", cfgPath, "--log", logPath, "--json", "--max-callers", strconv.Itoa(*maxCallers))
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			rss = max(rss, ru.Maxrss*1024)
		}
		cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	secs := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(*millionLines)/secs, "lines/s")
	b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MB")
	cpuPerLine := float64(cpu.Microseconds()) / float64(b.N) / float64(*millionLines)
	b.ReportMetric(cpuPerLine, "cpu-µs/line")
	fmt.Printf("replay: %d lines (%d MB) from %d callers in %.2f s: %.0f lines/s, %.2f µs of CPU a line (%.1f cores busy), peak RSS %.0f MB\n",
		*millionLines, st.Size()>>20, *millionCallers, secs, float64(*millionLines)/secs, cpuPerLine,
		cpu.Seconds()/float64(b.N)/secs, float64(rss)/(1<<20))
}
