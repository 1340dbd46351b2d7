package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// proc is a child process the orchestrator started and will stop.
type proc struct {
	name  string
	cmd   *exec.Cmd
	addr  string // the gRPC (or Redis) address it serves on
	http  string // the HTTP address it serves on: floodgate's listen.http, floodbench noop-http's
	pprof string // floodgate --pprof: the profiler's address
	done  chan struct{}

	mu   sync.Mutex
	tail []string // its last output lines, for error messages
}

func (p *proc) keep(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tail) == 20 {
		p.tail = p.tail[1:]
	}
	p.tail = append(p.tail, line)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// stop asks the process to end (SIGTERM), then kills it after 5s.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// follow reads the process' output until it ends, keeping its last lines
// and handing each to onLine (if not nil), then waits for the process and
// closes done.
func (p *proc) follow(out io.Reader, onLine func(string)) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.keep(sc.Text())
		if onLine != nil {
			onLine(sc.Text())
		}
	}
	io.Copy(io.Discard, out)
	p.cmd.Wait()
	close(p.done)
}

// startServing runs a command that logs a JSON line {"msg":"serving","grpc":ADDR}
// (floodgate serve and floodbench noop both do) and returns once it has.
func startServing(ctx context.Context, name, bin string, args ...string) (*proc, error) {
	return startServingCmd(ctx, name, exec.Command(bin, args...), 20*time.Second)
}

// startServingCmd is startServing for a command built by the caller (under
// valgrind, say), which has within to report serving.
func startServingCmd(ctx context.Context, name string, cmd *exec.Cmd, within time.Duration) (*proc, error) {
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	serving := make(chan string, 1)
	go p.follow(out, func(line string) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "pprof" {
			p.mu.Lock()
			p.pprof, _ = m["addr"].(string)
			p.mu.Unlock()
		}
		if m["msg"] == "serving" {
			grpcAddr, g := m["grpc"].(string)
			httpAddr, h := m["http"].(string)
			if g || h {
				p.mu.Lock()
				p.http = httpAddr
				p.mu.Unlock()
				select {
				case serving <- grpcAddr:
				default:
				}
			}
		}
	})
	select {
	case p.addr = <-serving: // after p.http was set
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before serving:\n%s", name, p.output())
	case <-time.After(within):
		p.stop()
		return nil, fmt.Errorf("%s did not report serving within %v:\n%s", name, within, p.output())
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis runs redis-server on a free loopback port, persistence off,
// and waits until it answers PING. portArgs, when set, gives more
// arguments for the port it is about to use (a cluster node's files).
func startRedis(ctx context.Context, bin, dir string, portArgs func(port int) []string) (*proc, *redis.Client, error) {
	return startRedisUnder(ctx, nil, 10*time.Second, bin, dir, portArgs)
}

// redisInTemp runs redis-server (bin) in a new temporary directory named
// after prefix, as startRedis; stop stops it, closes its client and
// removes the directory, which also holds the caller's own files.
func redisInTemp(ctx context.Context, bin, prefix string) (dir string, rc *redis.Client, stop func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, nil, err
	}
	rp, rc, err := startRedis(ctx, bin, dir, nil)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, err
	}
	return dir, rc, func() { rc.Close(); rp.stop(); os.RemoveAll(dir) }, nil
}

// startRedisUnder is startRedis with the command run under wrap (valgrind
// and its arguments, say; nil: none), answering PING within.
func startRedisUnder(ctx context.Context, wrap []string, within time.Duration, bin, dir string, portArgs func(port int) []string) (*proc, *redis.Client, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p := &proc{name: "redis-server", done: make(chan struct{}), addr: addr}
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning"}
		if portArgs != nil {
			args = append(args, portArgs(port)...)
		}
		if len(wrap) > 0 {
			p.cmd = exec.Command(wrap[0], append(append(slices.Clone(wrap[1:]), bin), args...)...)
		} else {
			p.cmd = exec.Command(bin, args...)
		}
		logf, err := os.Create(filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log"))
		if err != nil {
			return nil, nil, err
		}
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		if err := p.cmd.Start(); err != nil {
			logf.Close()
			return nil, nil, fmt.Errorf("redis-server: %w", err)
		}
		go func() { p.cmd.Wait(); logf.Close(); close(p.done) }()
		deadline := time.Now().Add(within)
		// Until the port is open (slow under valgrind), without go-redis,
		// which logs every refused dial.
		for !p.exited() && time.Now().Before(deadline) && ctx.Err() == nil {
			if conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
				conn.Close()
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		for {
			pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			lastErr = c.Ping(pctx).Err()
			cancel()
			if lastErr == nil {
				return p, c, nil
			}
			if p.exited() || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		c.Close()
		p.stop()
		if log, _ := os.ReadFile(logf.Name()); len(log) > 0 {
			lastErr = fmt.Errorf("%v; log: %s", lastErr, strings.TrimSpace(string(log)))
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
	}
	return nil, nil, fmt.Errorf("redis-server would not start: %v", lastErr)
}

// startCluster runs masters cluster-enabled redis-servers, gives each an
// equal share of the 16384 slots, introduces them to one another (CLUSTER
// MEET) and waits until every node reports cluster_state:ok and knows the
// others. The caller stops the processes and closes the clients, which
// talk to one node each (the table reads every node's counters).
func startCluster(ctx context.Context, bin, dir string, masters int) ([]*proc, []*redis.Client, error) {
	var procs []*proc
	var nodes []*redis.Client
	fail := func(err error) ([]*proc, []*redis.Client, error) {
		for _, c := range nodes {
			c.Close()
		}
		for _, p := range procs {
			p.stop()
		}
		return nil, nil, fmt.Errorf("redis cluster: %w", err)
	}
	var buses []int // each node's cluster bus port, which CLUSTER MEET needs
	for i := 0; i < masters; i++ {
		var bus int
		p, c, err := startRedis(ctx, bin, dir, func(port int) []string {
			// An explicit bus port: port+10000, the default, may be taken
			// or above 65535 for a high ephemeral port.
			var err error
			if bus, err = freePort(); err != nil {
				bus = port + 10000
			}
			return []string{"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
				"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(bus)}
		})
		if err != nil {
			return fail(err)
		}
		procs, nodes, buses = append(procs, p), append(nodes, c), append(buses, bus)
	}
	for i, c := range nodes {
		first, last := i*16384/masters, (i+1)*16384/masters-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			return fail(err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(procs[i].addr)
			if err := nodes[0].Do(ctx, "CLUSTER", "MEET", host, port, buses[i]).Err(); err != nil {
				return fail(err)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range nodes {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(masters)) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fail(fmt.Errorf("not ready within 30s: %v\n%s", err, info))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return procs, nodes, nil
}

// redisStats are the counters the table reads from INFO before and after a
// window: CPU seconds (user + sys) and script calls.
type redisStats struct {
	cpu     float64 // seconds
	scripts int64   // EVALSHA + EVAL calls
	calls   int64   // every command
	reads   int64   // read events that brought commands (a pipeline is one, or a few)
}

func readRedisStats(ctx context.Context, c *redis.Client) (redisStats, error) {
	info, err := c.Info(ctx, "cpu", "commandstats", "stats").Result()
	if err != nil {
		return redisStats{}, err
	}
	var s redisStats
	for _, line := range strings.Split(info, "\n") {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			f, _ := strconv.ParseFloat(val, 64)
			s.cpu += f
		case name == "total_reads_processed":
			s.reads, _ = strconv.ParseInt(val, 10, 64)
		case strings.HasPrefix(name, "cmdstat_"):
			for _, f := range strings.Split(val, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					s.calls += n
					if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
						s.scripts += n
					}
				}
			}
		}
	}
	return s, nil
}

// readAllRedisStats sums the counters of every server in cs (a cluster's
// nodes, or the one standalone server).
func readAllRedisStats(ctx context.Context, cs []*redis.Client) (redisStats, error) {
	var sum redisStats
	for _, c := range cs {
		s, err := readRedisStats(ctx, c)
		if err != nil {
			return redisStats{}, err
		}
		sum = sum.plus(s)
	}
	return sum, nil
}

func (s redisStats) plus(o redisStats) redisStats {
	return redisStats{cpu: s.cpu + o.cpu, scripts: s.scripts + o.scripts, calls: s.calls + o.calls, reads: s.reads + o.reads}
}

func (s redisStats) minus(o redisStats) redisStats {
	return redisStats{cpu: s.cpu - o.cpu, scripts: s.scripts - o.scripts, calls: s.calls - o.calls, reads: s.reads - o.reads}
}

// machine describes where the run happened: CPUs, CPU model, Go, Redis.
func machine(redisBin string) string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	rv := "unknown"
	if out, err := exec.Command(redisBin, "--version").Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if v, ok := strings.CutPrefix(f, "v="); ok {
				rv = v
			}
		}
	}
	return fmt.Sprintf("%d CPUs (nproc) · %s · %s · redis-server %s", nproc(), model, goVersion(), rv)
}

// procCPU is the CPU time (user + system, seconds) a child process has used,
// from /proc/PID/stat; 0 when it cannot be read.
func procCPU(p *proc) float64 {
	if p == nil || p.cmd.Process == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is parenthesised and may hold spaces: count
	// fields after its closing parenthesis. utime and stime are fields 14
	// and 15, in clock ticks (USER_HZ, 100 on Linux).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// selfCPU is the load generator's own CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
