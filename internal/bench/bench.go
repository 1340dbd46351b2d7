package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/internal/config"
)

func nproc() int        { return runtime.NumCPU() }
func goVersion() string { return runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH }

// Options are floodbench run's flags.
type Options struct {
	Floodgate, RedisServer string
	Self                   string // the floodbench binary, run as the no-op server (default: this one)
	Scenarios              []string
	Conc                   []int
	Cell, Warmup           time.Duration
	Rounds                 int
	MaxCount               int64
	Keys, Conns            int
	Client                 string // the in-process client's kind: ClientLean or ClientProto
	ProfileDir             string
	TraceDir               string // record execution traces of floodgate (wakeups.go)
	Ghz                    string // drive the cells with this ghz binary instead of the in-process client
	ghzVersion             string // what that binary says it is (set by Run)
	Ratelimit              string // envoyproxy/ratelimit's service_cmd, for scenario (r)
	GOGC                   int    // the collector setting of floodgate and the no-op server alike (0: config.DefaultGOGC)
	// RedisRTT, when > 0, puts Redis behind a delaying proxy adding this
	// round trip (delay.go): a Redis a network hop away.
	RedisRTT time.Duration
	// Rates are the open-loop cells measured after the closed-loop ones:
	// requests a second, at most max(conc) in flight (hop.go).
	Rates []float64
}

// gcSetting says what collector setting both Go servers run with: the
// GOGC environment variable, which both inherit and which wins over
// runtime.gogc, or o.gogc.
func (o Options) gcSetting() string {
	if v, ok := os.LookupEnv("GOGC"); ok {
		return "GOGC=" + v + " (from the environment)"
	}
	return fmt.Sprintf("GOGC=%d, no memory limit (floodgate: runtime.gogc, memory_limit_ratio: 0; the no-op server: --gogc)", o.gcPercent())
}

func (o Options) gcPercent() int {
	if o.GOGC == 0 {
		return config.DefaultGOGC
	}
	return o.GOGC
}

// row is one measured cell.
type row struct {
	sc    scenario
	conc  int
	rate  float64 // open-loop: requests a second offered, conc the most in flight (0: closed-loop)
	res   result
	redis redisStats
	rerr  error // reading Redis' counters failed
	// CPU seconds over the windows: the serving process (floodgate or the
	// no-op server) and the load generator.
	serverCPU, clientCPU float64
	// rounds is each round's own figures, in turn: how far the machine's
	// noise moves a ratio within the run (byRound).
	rounds []costs
}

// Run starts the servers, measures every (scenario, concurrency) cell and
// prints the table.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if o.Client == "" {
		o.Client = ClientLean
	}
	if o.Ghz != "" && o.Client != ClientLean {
		return fmt.Errorf("--client %s chooses the in-process client, which --ghz replaces", o.Client)
	}
	scs, wanted, err := selectScenarios(o)
	if err != nil {
		return err
	}
	self := o.Self
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return err
		}
	}
	if _, err := os.Stat(o.Floodgate); err != nil {
		return fmt.Errorf("floodgate binary: %w (build it with make build, or pass --floodgate)", err)
	}
	redisBin, err := exec.LookPath(o.RedisServer)
	if err != nil {
		return fmt.Errorf("redis-server not found (%v): install Redis >= 7.0, e.g. apt-get install redis-server", err)
	}
	dir, err := os.MkdirTemp("", "floodbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(stderr, "floodbench: starting redis-server, the no-op server and floodgate (%s)\n", o.Floodgate)
	var procs []*proc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()
	rp, rc, err := startRedis(ctx, redisBin, dir, nil)
	if err != nil {
		return err
	}
	procs = append(procs, rp)
	defer rc.Close()
	// Where Redis' clients connect: Redis itself, or the delaying proxy in
	// front of it. Its counters (rc) are read directly.
	redisAddr := rp.addr
	if o.RedisRTT > 0 {
		hop, err := startDelay(rp.addr, o.RedisRTT)
		if err != nil {
			return err
		}
		defer hop.Close()
		redisAddr = hop.Addr()
		fmt.Fprintf(stderr, "floodbench: Redis behind a proxy adding %v to every round trip (%s)\n", o.RedisRTT, redisAddr)
	}
	// Whose counters a row reads: the standalone server's, or for the
	// cluster scenario the sum of its masters'.
	redisOf := map[string][]*redis.Client{}
	var clusterAddrs []string
	if wanted["redis-cluster"] {
		fmt.Fprintf(stderr, "floodbench: starting a Redis Cluster of %d masters\n", clusterMasters)
		cps, ccs, err := startCluster(ctx, redisBin, dir, clusterMasters)
		if err != nil {
			return err
		}
		procs = append(procs, cps...)
		defer func() {
			for _, c := range ccs {
				c.Close()
			}
		}()
		for _, p := range cps {
			clusterAddrs = append(clusterAddrs, p.addr)
		}
		redisOf["redis-cluster"] = ccs
	}
	statsOf := func(server string) []*redis.Client {
		if cs, ok := redisOf[server]; ok {
			return cs
		}
		return []*redis.Client{rc}
	}

	f := &fleet{servers: map[string]*proc{}, clients: map[string]*client{}, httpClients: map[string]*httpClient{}}
	defer f.close()
	err = f.start(ctx, o, self, dir, wanted, redisAddr, clusterAddrs)
	procs = append(procs, f.procs...)
	if err != nil {
		return err
	}
	var direct *directDriver
	if wanted[redisDirect] {
		if direct, err = newDirectDriver(ctx, redisAddr, slices.Max(o.Conc), o.Keys); err != nil {
			return err
		}
		defer direct.close()
	}
	var ghz *ghzDriver
	if o.Ghz != "" {
		if ghz, err = newGhzDriver(o.Ghz, dir); err != nil {
			return err
		}
		o.ghzVersion = ghz.version
	}

	work := map[string]workload{}
	for _, sc := range scs {
		if sc.work == nil { // (rt), (naive): the load generator's own Redis calls
			continue
		}
		if _, ok := work[sc.cache(o.Keys)]; !ok {
			work[sc.cache(o.Keys)] = sc.work(o.Keys)
		}
	}

	m := &measurer{o: o, scs: scs, servers: f.servers, clients: f.clients, httpClients: f.httpClients, direct: direct, ghz: ghz, work: work, statsOf: statsOf}
	rows, steady, traced, err := m.measureAll(ctx, stderr)
	if err != nil {
		return err
	}
	open, err := m.measureOpen(ctx, stderr)
	if err != nil {
		return err
	}
	for _, p := range procs {
		if p.exited() {
			return fmt.Errorf("%s exited during the run:\n%s", p.name, p.output())
		}
	}
	printTable(stdout, o, machine(redisBin), steady, rows)
	if ol := openLoopRows(open, o.RedisRTT); ol != nil {
		fmt.Fprintln(stdout)
		fmt.Fprintln(stdout, openLoopCaption(o))
		fmt.Fprintln(stdout)
		writeMarkdown(stdout, ol)
	}
	if len(traced) > 0 {
		t, err := wakeupRows(traced)
		if err != nil {
			return fmt.Errorf("reading the traces: %w", err)
		}
		fmt.Fprintln(stdout)
		fmt.Fprintf(stdout, "what a decision wakes in floodgate (execution traces over the last round, in %s; tracing slows the server, so count, do not time, from them): goroutines made runnable, threads woken to run a processor, system calls, goroutines parked on the network poller; decisions: the calls gRPC handed to a goroutine (started for it, or a stream worker woken)\n", o.TraceDir)
		fmt.Fprintln(stdout)
		writeMarkdown(stdout, t)
	}
	return nil
}

// fleet is the servers a run measures, by instance name, and the clients
// that drive them.
type fleet struct {
	servers     map[string]*proc
	procs       []*proc // in the order started
	clients     map[string]*client
	httpClients map[string]*httpClient // (a-http), (b-http)
	stopXDS     func()
}

// start starts every instance wanted, each with its client: on redisAddr
// (clusterAddrs for the cluster's), the rate limit service's with (r)'s
// file of limits, or with the same limits pushed over xDS by a management
// server started first.
func (f *fleet) start(ctx context.Context, o Options, self, dir string, wanted map[string]bool, redisAddr string, clusterAddrs []string) error {
	// (b-rls)'s limits: (r)'s configuration, the same file envoyproxy/ratelimit reads.
	rlsConfig := dir + "/ratelimit-floodbench.yaml"
	if err := os.WriteFile(rlsConfig, []byte(ratelimitConfig), 0o600); err != nil {
		return err
	}
	var xdsAddr string
	if wanted["redis-xds"] {
		addr, stop, err := startXDS()
		if err != nil {
			return err
		}
		f.stopXDS, xdsAddr = stop, addr
	}
	for _, name := range []string{"noop", "redis", "redis-nopipe", "redis-2flushers", "redis-cluster", "redis-rls", "redis-xds", "memory", "ratelimit", "noop-http", "redis-http"} {
		if !wanted[name] {
			continue
		}
		addrs := []string{redisAddr}
		if name == "redis-cluster" {
			addrs = clusterAddrs
		}
		rls := rlsConfig
		if name == "redis-xds" {
			rls = xdsAddr
		}
		p, err := startServer(ctx, o, name, self, dir, addrs, rls)
		if err != nil {
			return err
		}
		f.procs = append(f.procs, p)
		f.servers[name] = p
		if name == "noop-http" || name == "redis-http" {
			if f.httpClients[name], err = dialHTTP(p.http); err != nil {
				return err
			}
			continue
		}
		if f.clients[name], err = dial(p.addr, o.Conns, o.Client); err != nil {
			return err
		}
	}
	return nil
}

// close closes the clients and stops the management server; Run stops
// the processes with its others.
func (f *fleet) close() {
	for _, c := range f.clients {
		c.close()
	}
	for _, c := range f.httpClients {
		c.close()
	}
	if f.stopXDS != nil {
		f.stopXDS()
	}
}

// startServer starts the server name of the run: the no-op server (self,
// run as floodbench noop), envoyproxy/ratelimit, or a floodgate instance
// (floodgateConfig) on the Redis servers at addrs, its files in dir.
func startServer(ctx context.Context, o Options, name, self, dir string, addrs []string, rls string) (*proc, error) {
	switch name {
	case "noop":
		return startServing(ctx, "floodbench noop", self, "noop", "--listen", "127.0.0.1:0", "--gogc", strconv.Itoa(o.gcPercent()))
	case "noop-http":
		return startServing(ctx, "floodbench noop-http", self, "noop-http", "--listen", "127.0.0.1:0", "--gogc", strconv.Itoa(o.gcPercent()))
	case "ratelimit":
		return startRatelimit(ctx, o.Ratelimit, dir, addrs[0])
	}
	cfg, err := floodgateConfig(name, addrs, o.gcPercent(), rls)
	if err != nil {
		return nil, err
	}
	path := dir + "/floodgate-" + name + ".yaml"
	if err = os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	args := []string{"serve", "--config", path}
	if o.ProfileDir != "" || o.TraceDir != "" {
		args = append(args, "--pprof", "127.0.0.1:0")
	}
	return startServing(ctx, "floodgate ("+name+")", o.Floodgate, args...)
}

// selectScenarios returns the scenarios o names, in order, each row's
// baseline ((a), or (a') for the rate limit API) before it and (a) first,
// and the servers they run on.
func selectScenarios(o Options) ([]scenario, map[string]bool, error) {
	var scs []scenario
	wanted := map[string]bool{"noop": true} // (a) is the baseline of every ratio: always measured
	ids := o.Scenarios
	if ids[0] != "a" {
		ids = append([]string{"a"}, ids...)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		sc, ok := scenarioByID(strings.TrimSpace(id))
		if !ok {
			return nil, nil, fmt.Errorf("unknown scenario %q", id)
		}
		if seen[sc.id] {
			continue
		}
		seen[sc.id] = true
		if sc.server == "redis-cluster" && o.RedisRTT > 0 {
			return nil, nil, fmt.Errorf("scenario %s with --redis-rtt: the cluster's nodes announce their own addresses, which the delaying proxy does not stand in for", sc.id)
		}
		if sc.isHTTP() && o.Ghz != "" {
			return nil, nil, fmt.Errorf("scenario %s speaks HTTP, and ghz gRPC: run it without --ghz", sc.id)
		}
		if sc.server == "ratelimit" && o.Ratelimit == "" {
			return nil, nil, fmt.Errorf("scenario %s needs --ratelimit, envoyproxy/ratelimit's service_cmd (make bench-tools installs it: go install github.com/envoyproxy/ratelimit/src/service_cmd@%s)", sc.id, ratelimitVersion)
		}
		if b := sc.baseID(); !seen[b] { // a row's baseline runs before it
			bsc, _ := scenarioByID(b)
			seen[b] = true
			scs = append(scs, bsc)
			wanted[bsc.server] = true
		}
		scs = append(scs, sc)
		wanted[sc.server] = true
	}
	return scs, wanted, nil
}

// measurer measures the cells of one run on the processes Run started.
type measurer struct {
	o       Options
	scs     []scenario
	servers map[string]*proc
	clients map[string]*client
	// httpClients drive the HTTP servers ((a-http), (b-http)).
	httpClients map[string]*httpClient
	direct      *directDriver
	ghz         *ghzDriver
	work        map[string]workload
	statsOf     func(server string) []*redis.Client // whose Redis counters a server's rows read
}

// measureAll measures every cell. Cells run concurrency-major, (a) first at
// each concurrency, and each cell's window is split into rounds that take
// turns with the other scenarios', so a change in the machine's background
// load during the run falls on every scenario alike rather than on one.
func (m *measurer) measureAll(ctx context.Context, stderr io.Writer) ([]row, steadiness, []tracedCell, error) {
	o, scs := m.o, m.scs
	var rows []row
	var steady steadiness
	var traced []tracedCell
	if m.ghz != nil {
		fmt.Fprintf(stderr, "floodbench: %d cells of %v in %d rounds, driven by %s\n", len(scs)*len(o.Conc), o.Cell, o.Rounds, m.ghz.version)
	} else {
		fmt.Fprintf(stderr, "floodbench: %d cells of %v in %d rounds (+%v warm-up each)\n", len(scs)*len(o.Conc), o.Cell, o.Rounds, o.Warmup)
	}
	labelWidth := 0 // the progress lines' labels line up
	for _, sc := range scs {
		labelWidth = max(labelWidth, utf8.RuneCountInString(sc.label))
	}
	for _, conc := range o.Conc {
		cells := make([]row, len(scs))
		for i, sc := range scs {
			cells[i] = row{sc: sc, conc: conc}
		}
		for rd := 0; rd < o.Rounds; rd++ {
			steady = append(steady, settleAndProbe(ctx))
			for i := range cells {
				if ctx.Err() != nil {
					return nil, nil, nil, ctx.Err()
				}
				tc, err := m.measureRound(ctx, &cells[i], rd == o.Rounds-1, stderr)
				if err != nil {
					return nil, nil, nil, err
				}
				if tc != nil {
					traced = append(traced, *tc)
				}
			}
		}
		for _, r := range cells {
			fmt.Fprintf(stderr, "  %-*s conc %-3d %9.0f/s\n", labelWidth, r.sc.label, conc, r.res.rate())
		}
		rows = append(rows, cells...)
	}
	return rows, steady, traced, nil
}

// measureRound measures one round of cell r and adds it to r's figures;
// in the last round it records the profiles and the trace --profile and
// --trace ask for, and returns the trace's cell.
func (m *measurer) measureRound(ctx context.Context, r *row, last bool, stderr io.Writer) (*tracedCell, error) {
	o, sc, conc := m.o, r.sc, r.conc
	round := o.Cell / time.Duration(o.Rounds)
	server := m.servers[sc.server]
	var before redisStats
	var serverBefore, clientBefore float64
	var rerr error
	var stopProfile func() error
	var stopTrace func() (string, error)
	atWindow := func() {
		before, rerr = readAllRedisStats(ctx, m.statsOf(sc.server))
		serverBefore, clientBefore = procCPU(server), selfCPU()
		if o.ProfileDir != "" && last && conc == o.Conc[len(o.Conc)-1] && slices.Contains(profileScenarios, sc.id) {
			stopProfile = startProfile(ctx, server, o.ProfileDir, "floodgate-"+sc.id, round)
		}
		if o.TraceDir != "" && last && slices.Contains(traceScenarios, sc.id) {
			stopTrace = startTrace(ctx, server, o.TraceDir, fmt.Sprintf("floodgate-%s-c%d", sc.id, conc), round)
		}
	}
	cl := cell{conc: conc, rate: r.rate, warmup: o.Warmup, window: round, maxCount: o.MaxCount, rpcTimeout: 5 * time.Second, atWindow: atWindow}
	var res result
	var serverCPU, clientCPU float64
	switch {
	case sc.server == redisDirect: // no server process: its CPU is the load generator's
		res = m.direct.drive(ctx, sc.id, cl)
		clientCPU = selfCPU() - clientBefore
	case m.ghz != nil:
		var err error
		res, clientCPU, err = m.ghz.drive(ctx, server.addr, sc.cache(o.Keys), m.work[sc.cache(o.Keys)], cl)
		if err != nil {
			return nil, fmt.Errorf("%s, concurrency %d: %w", sc.label, conc, err)
		}
		serverCPU = procCPU(server) - serverBefore
	case sc.isHTTP():
		res = m.httpClients[sc.server].drive(ctx, m.work[sc.cache(o.Keys)], cl)
		serverCPU, clientCPU = procCPU(server)-serverBefore, selfCPU()-clientBefore
	default:
		res = m.clients[sc.server].drive(ctx, m.work[sc.cache(o.Keys)], cl)
		serverCPU, clientCPU = procCPU(server)-serverBefore, selfCPU()-clientBefore
	}
	one := row{res: res, rerr: rerr, serverCPU: serverCPU, clientCPU: clientCPU}
	if rerr == nil {
		var after redisStats
		after, one.rerr = readAllRedisStats(ctx, m.statsOf(sc.server))
		one.redis = after.minus(before)
		r.redis = r.redis.plus(one.redis)
	}
	if one.rerr != nil && r.rerr == nil {
		r.rerr = one.rerr
	}
	r.rounds = append(r.rounds, one.costs())
	r.serverCPU += serverCPU
	r.clientCPU += clientCPU
	r.res.merge(res)
	if stopProfile != nil {
		if err := stopProfile(); err != nil {
			fmt.Fprintln(stderr, "floodbench: profile:", err)
		}
	}
	if stopTrace != nil {
		file, err := stopTrace()
		if err != nil {
			fmt.Fprintln(stderr, "floodbench: trace:", err)
			return nil, nil
		}
		return &tracedCell{sc: sc, conc: conc, file: file}, nil
	}
	return nil, nil
}

// profileScenarios are the scenarios --profile records, at the highest
// concurrency.
var profileScenarios = []string{"b", "e", "g", "b-rls"}

// costs is one row's CPU per decision, in µs: the serving process, Redis
// and the load generator. redisOK is false when Redis' counters could not
// be read; n is the decisions the figures divide by (0: none, no figures).
type costs struct {
	server, redis, client float64
	redisOK               bool
	n                     int64
	p50, p99              time.Duration // the latencies of the same calls
}

func (r row) costs() costs {
	c := costs{n: r.res.decisions, redisOK: r.rerr == nil, p50: r.res.p50, p99: r.res.p99}
	if c.n <= 0 {
		return costs{}
	}
	n := float64(c.n)
	c.server, c.client = r.serverCPU*1e6/n, r.clientCPU*1e6/n
	if c.redisOK {
		c.redis = math.Max(0, r.redis.cpu) * 1e6 / n
	}
	return c
}

// total is what a decision costs on the server side: the serving process
// and Redis.
func (c costs) total() float64 { return c.server + c.redis }

// ratios are a row's figures divided by its baseline's ((a), or (a') for
// (r)) at the same concurrency in the same run. total and server divide by
// the baseline server's CPU per Check: total is the headline, what an
// operator pays per decision on the server side (floodgate and Redis)
// against a Check that does nothing; it does not depend on the load
// generator's own cost. "" is a figure that cannot be computed.
type ratios struct{ total, server, rate, p99 string }

func rowRatios(r, base row) ratios {
	if r.sc.isBaseline() {
		return ratios{"1", "1", "1", "1"}
	}
	q := ratios{"?", "?", "?", "?"}
	c, b := r.costs(), base.costs()
	if r.sc.server == redisDirect { // no server process: no server CPU
		q.total, q.server = "-", "-"
	} else if c.n > 0 && b.n > 0 && b.server > 0 {
		q.server = fmt.Sprintf("%.2f", c.server/b.server)
		if c.redisOK {
			q.total = fmt.Sprintf("%.2f", c.total()/b.server)
		}
	}
	if br := base.res.rate(); br > 0 {
		q.rate = fmt.Sprintf("%.2f", r.res.rate()/br)
	}
	if base.res.p99 > 0 {
		q.p99 = fmt.Sprintf("%.2f", float64(r.res.p99)/float64(base.res.p99))
	}
	return q
}

// tableHeader is the table's columns. The first ratio is the headline.
var tableHeader = []string{"scenario", "conc", "decisions/s", "p50", "p99", "server+Redis ×(a)", "server ×(a)", "rate ×(a)", "p99 ×(a)",
	"Redis µs/dec", "server µs/dec", "server+Redis µs/dec", "client µs/dec", "scripts/dec", "dec/read", "errors"}

// cellID names a cell: a scenario at a concurrency.
type cellID struct {
	id   string
	conc int
}

// byCell indexes rows by cell, where each row finds its baseline
// (cellID{sc.baseID(), conc}).
func byCell(rows []row) map[cellID]row {
	m := make(map[cellID]row, len(rows))
	for _, r := range rows {
		m[cellID{r.sc.id, r.conc}] = r
	}
	return m
}

// tableRows is the table: one row per cell, grouped by scenario in table
// order, with its ratios to its baseline at the same concurrency.
func tableRows(rows []row) [][]string {
	base := byCell(rows)
	cells := [][]string{tableHeader}
	for _, sc := range scenarios { // table order
		for _, r := range rows {
			if r.sc.id != sc.id {
				continue
			}
			q := rowRatios(r, base[cellID{sc.baseID(), r.conc}]) // a baseline that did not run: "?"
			c := r.costs()
			cpu, scripts, perRead, server, total, client := "?", "?", "-", "?", "?", "?"
			if n := float64(c.n); n > 0 {
				if c.redisOK {
					cpu = fmt.Sprintf("%.1f", c.redis)
					total = fmt.Sprintf("%.1f", c.total())
					scripts = fmt.Sprintf("%.2f", float64(r.redis.scripts)/n)
					if r.redis.scripts > 0 && r.redis.reads > 0 {
						perRead = fmt.Sprintf("%.1f", n/float64(r.redis.reads))
					}
				}
				server = fmt.Sprintf("%.1f", c.server)
				client = fmt.Sprintf("%.0f", c.client)
				if r.sc.server == redisDirect {
					server, total = "-", "-"
				}
			}
			errs := "0"
			if n := r.res.unexpected + r.res.rpcErrors; n > 0 {
				errs = fmt.Sprintf("%d", n)
				if r.res.firstErr != nil && !errors.Is(r.res.firstErr, context.Canceled) {
					errs += " (" + shorten(r.res.firstErr.Error(), 40) + ")"
				}
			}
			cells = append(cells, []string{r.sc.label, strconv.Itoa(r.conc), fmt.Sprintf("%.0f", r.res.rate()),
				fmtDur(r.res.p50), fmtDur(r.res.p99), q.total, q.server, q.rate, q.p99, cpu, server, total, client, scripts, perRead, errs})
		}
	}
	return cells
}

// byRound is a line per cell of two rounds or more (and a baseline with as
// many): the lowest, highest and median of its headline and server ratios
// taken round by round, each round against its baseline's round at the same
// concurrency. Nil when no cell has such rounds.
func byRound(rows []row) []string {
	base := byCell(rows)
	var lines []string
	for _, sc := range scenarios { // table order
		for _, r := range rows {
			b, ok := base[cellID{sc.baseID(), r.conc}]
			if r.sc.id != sc.id || sc.isBaseline() || sc.server == redisDirect || !ok || len(r.rounds) < 2 || len(b.rounds) != len(r.rounds) {
				continue
			}
			var total, server []float64
			for i, c := range r.rounds {
				bc := b.rounds[i]
				if c.n == 0 || bc.n == 0 || bc.server <= 0 {
					continue
				}
				server = append(server, c.server/bc.server)
				if c.redisOK {
					total = append(total, c.total()/bc.server)
				}
			}
			if len(server) < 2 {
				continue
			}
			line := fmt.Sprintf("%s, conc %d, %d rounds: ", r.sc.label, r.conc, len(server))
			if len(total) == len(server) {
				line += "server+Redis ×(a) " + spread(total) + "; "
			}
			lines = append(lines, line+"server ×(a) "+spread(server))
		}
	}
	return lines
}

// clusterLines sets (g) against (b) at each concurrency where both ran:
// Redis CPU per decision, (g)'s summed over its masters, over (b)'s, over
// the whole cell and round by round. Nil when no concurrency has both.
func clusterLines(rows []row) []string {
	cells := byCell(rows)
	var lines []string
	for _, r := range rows {
		b, ok := cells[cellID{"b", r.conc}]
		if r.sc.id != "g" || !ok {
			continue
		}
		cg, cb := r.costs(), b.costs()
		if cg.n == 0 || cb.n == 0 || !cg.redisOK || !cb.redisOK || cb.redis <= 0 {
			lines = append(lines, fmt.Sprintf("conc %d: ?", r.conc))
			continue
		}
		line := fmt.Sprintf("conc %d: %.1f against %.1f µs, %.2f ×", r.conc, cg.redis, cb.redis, cg.redis/cb.redis)
		var byRound []float64
		for i, g := range r.rounds {
			if i < len(b.rounds) && g.redisOK && b.rounds[i].redisOK && g.n > 0 && b.rounds[i].n > 0 && b.rounds[i].redis > 0 {
				byRound = append(byRound, g.redis/b.rounds[i].redis)
			}
		}
		if len(byRound) >= 2 {
			line += "; by round " + spread(byRound)
		}
		lines = append(lines, line)
	}
	return lines
}

// spread is "lowest–highest (median)" of xs (at least one).
func spread(xs []float64) string {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	median := xs[n/2]
	if n%2 == 0 {
		median = (xs[n/2-1] + xs[n/2]) / 2
	}
	return fmt.Sprintf("%.2f–%.2f (%.2f)", xs[0], xs[n-1], median)
}

// peerRows sets floodgate's (b) against envoyproxy/ratelimit's (r) at each
// concurrency where both ran: Redis CPU per decision and everything on the
// server side (the service and Redis), and (b)'s over (r)'s. Nil when no
// concurrency has both.
func peerRows(rows []row) [][]string {
	byID := byCell(rows)
	cells := [][]string{{"conc", "Redis µs/dec (b)", "Redis µs/dec (r)", "Redis (b)/(r)", "server+Redis µs/dec (b)", "server+Redis µs/dec (r)", "server+Redis (b)/(r)"}}
	for _, b := range rows {
		r, ok := byID[cellID{"r", b.conc}]
		if b.sc.id != "b" || !ok {
			continue
		}
		conc := b.conc
		cb, cr := b.costs(), r.costs()
		if cb.n == 0 || cr.n == 0 || !cb.redisOK || !cr.redisOK {
			cells = append(cells, []string{strconv.Itoa(conc), "?", "?", "?", "?", "?", "?"})
			continue
		}
		ratio := func(x, y float64) string {
			if y <= 0 {
				return "?"
			}
			return fmt.Sprintf("%.2f", x/y)
		}
		cells = append(cells, []string{strconv.Itoa(conc),
			fmt.Sprintf("%.1f", cb.redis), fmt.Sprintf("%.1f", cr.redis), ratio(cb.redis, cr.redis),
			fmt.Sprintf("%.1f", cb.total()), fmt.Sprintf("%.1f", cr.total()), ratio(cb.total(), cr.total())})
	}
	if len(cells) == 1 {
		return nil
	}
	return cells
}

// The targets floodgate's rate limit service is held to (docs/performance.md,
// "The rate limit service"): server and Redis CPU per decision at most half
// envoyproxy/ratelimit's on the same requests, and at most 1.1 times its own
// Check path's.
const (
	rlsTargetOverPeer  = 0.5
	rlsTargetOverCheck = 1.1
)

// rlsRows sets floodgate's rate limit service (b-rls) against its own Check
// path (b) and against envoyproxy/ratelimit (r) at each concurrency where
// (b-rls) ran: server+Redis CPU per decision and the two ratios, each with
// whether it meets its target; "-" where the other scenario did not run.
// Nil when (b-rls) did not run.
func rlsRows(rows []row) [][]string {
	byID := byCell(rows)
	cells := [][]string{{"conc", "server+Redis µs/dec (b-rls)", "(b)", "(b-rls)/(b)", fmt.Sprintf("≤ %.1f?", rlsTargetOverCheck),
		"(r)", "(b-rls)/(r)", fmt.Sprintf("≤ %.1f?", rlsTargetOverPeer)}}
	for _, f := range rows {
		if f.sc.id != "b-rls" {
			continue
		}
		cf := f.costs()
		if cf.n == 0 || !cf.redisOK {
			cells = append(cells, []string{strconv.Itoa(f.conc), "?", "?", "?", "?", "?", "?", "?"})
			continue
		}
		line := []string{strconv.Itoa(f.conc), fmt.Sprintf("%.1f", cf.total())}
		for _, other := range []struct {
			id     string
			target float64
		}{{"b", rlsTargetOverCheck}, {"r", rlsTargetOverPeer}} {
			o, ok := byID[cellID{other.id, f.conc}]
			if !ok {
				line = append(line, "-", "-", "-")
				continue
			}
			co := o.costs()
			if co.n == 0 || !co.redisOK || co.total() <= 0 {
				line = append(line, "?", "?", "?")
				continue
			}
			ratio := cf.total() / co.total()
			met := "no"
			if ratio <= other.target {
				met = "yes"
			}
			line = append(line, fmt.Sprintf("%.1f", co.total()), fmt.Sprintf("%.2f", ratio), met)
		}
		cells = append(cells, line)
	}
	if len(cells) == 1 {
		return nil
	}
	return cells
}

// printTable prints the machine, the settings and one row per cell, grouped
// by scenario, with ratios to its baseline ((a), or (a') for (r)) at the same
// concurrency; then, when (r) ran, floodgate against it.
func printTable(w io.Writer, o Options, mach string, steady steadiness, rows []row) {
	fmt.Fprintf(w, "machine: %s\n", mach)
	fmt.Fprintf(w, "steadiness: %s\n", steady)
	requests := "pre-encoded Envoy-shaped CheckRequests (RateLimitRequests on the rate limit API)"
	if o.Client == ClientProto {
		requests = "Envoy-shaped CheckRequests decoded and marshalled by protobuf on every call, answers decoded whole (--client proto)"
	}
	client := fmt.Sprintf("each cell %v in %d rounds taking turns with the other scenarios, each after a %v warm-up (at most %d requests a round); load generator: %d gRPC connection(s), %s",
		o.Cell, o.Rounds, o.Warmup, o.MaxCount, o.Conns, requests)
	if o.Ghz != "" {
		client = fmt.Sprintf("each cell %v in %d rounds taking turns with the other scenarios; load generator: %s, 1 gRPC connection, Envoy-shaped CheckRequests as binary messages, its start-up CPU taken off; gRPC status checked, not the answers",
			o.Cell, o.Rounds, o.ghzVersion)
	}
	fmt.Fprintf(w, "run: %s; %s, %d distinct callers; everything on 127.0.0.1\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), client, o.Keys)
	fmt.Fprintf(w, "collector: floodgate and the no-op server both at %s\n", o.gcSetting())
	if o.RedisRTT > 0 {
		fmt.Fprintf(w, "Redis a hop away: behind floodbench's delaying proxy on 127.0.0.1, %v added to every round trip of floodgate's, envoyproxy/ratelimit's, (rt)'s and (naive)'s connections (Redis' counters read directly)\n", o.RedisRTT)
	}
	fmt.Fprintln(w, "ratios divide by (a) at the same concurrency, from this run ((r)'s and (b-rls)'s by (a'): the same no-op server answering the rate-limit API; (b-http)'s by (a-http), a no-op HTTP server).")
	fmt.Fprintln(w, "server+Redis ×(a) (the headline): the serving process' CPU plus Redis' per decision over the no-op server's CPU per Check; server ×(a): the serving process' alone.")
	fmt.Fprintln(w, "CPU per decision over the windows: Redis (INFO used_cpu_user+used_cpu_sys),")
	fmt.Fprintln(w, "the serving process (floodgate, or the no-op server for (a); /proc/PID/stat) and the load generator; scripts/dec: EVALSHA+EVAL calls per decision;")
	fmt.Fprintln(w, "dec/read: decisions per read event in Redis (INFO total_reads_processed), i.e. the pipelines' depth (a script call may carry several decisions)")
	fmt.Fprintln(w)
	writeMarkdown(w, tableRows(rows))
	if lines := byRound(rows); lines != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "by round: each round's ratio to (a)'s round at the same concurrency just before it, lowest–highest (median): how far the machine's noise moves the figures within this run")
		for _, l := range lines {
			fmt.Fprintln(w, "  "+l)
		}
	}
	if l := latencyRows(rows, o.RedisRTT); l != nil {
		fmt.Fprintln(w)
		targets := fmt.Sprintf("at concurrency 1 added p50 ≤ %.1f × (rt)'s p50 and added p99 ≤ %.1f × (rt)'s p99, at concurrency 16 added p50 ≤ %.1f × (rt)'s p50",
			addedP50TargetConc1, addedP99TargetConc1, addedP50TargetConc16)
		if o.RedisRTT > 0 {
			targets = fmt.Sprintf("Redis a hop away (%v added to each round trip, (rt) through the same proxy): at concurrency 1 and 16 added p50 ≤ %.1f × (rt)'s p50 and added p99 ≤ %.1f × (rt)'s p99",
				o.RedisRTT, addedP50TargetHop, addedP99TargetHop)
		}
		fmt.Fprintf(w, "latency added over the baseline ((a), or (a')) at the same concurrency, and that in multiples of one Redis round trip from the load generator (rt) at the same concurrency; by round: each round's added p50 over (rt)'s p50 in the same round, lowest–highest (median); targets for Floodgate on Redis: %s\n", targets)
		fmt.Fprintln(w)
		writeMarkdown(w, l)
	}
	if n := naiveRows(rows); n != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Redis CPU per decision of (b) and (c) against the naive script's per call (naive), the same redis-server in the same run; targets: (b) ≤ %.2f ×, (c) ≤ %.2f ×; by round: each round against (naive)'s round, lowest–highest (median)\n",
			naiveTargetDistinct, naiveTargetHot)
		fmt.Fprintln(w)
		writeMarkdown(w, n)
	}
	if lines := clusterLines(rows); lines != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Redis Cluster (g) against one server (b), the same callers: Redis CPU per decision summed over the %d masters over (b)'s (all rounds; each round against (b)'s, lowest–highest (median))\n", clusterMasters)
		for _, l := range lines {
			fmt.Fprintln(w, "  "+l)
		}
	}
	if peer := peerRows(rows); peer != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "floodgate (b) against envoyproxy/ratelimit (r), both on the same redis-server with the same callers: CPU per decision")
		fmt.Fprintln(w)
		writeMarkdown(w, peer)
	}
	if h := httpRows(rows); h != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, httpNote)
		fmt.Fprintln(w)
		writeMarkdown(w, h)
	}
	if r := rlsRows(rows); r != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "floodgate's rate limit service (b-rls) against its Check path (b) and against envoyproxy/ratelimit (r), the same redis-server and callers: server+Redis CPU per decision; targets: at most %.1f × (b), at most %.1f × (r)\n", rlsTargetOverCheck, rlsTargetOverPeer)
		fmt.Fprintln(w)
		writeMarkdown(w, r)
	}
}

// writeMarkdown prints cells as a Markdown table, padded to line up in a
// terminal: the first column left-aligned, the others right-aligned.
func writeMarkdown(w io.Writer, cells [][]string) {
	width := make([]int, len(cells[0]))
	for _, r := range cells {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(" " + c + pad + " |")
			} else {
				b.WriteString(" " + pad + c + " |")
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(cells[0])
	sep := make([]string, len(width))
	for i, n := range width {
		if i == 0 {
			sep[i] = strings.Repeat("-", n)
		} else {
			sep[i] = strings.Repeat("-", n-1) + ":"
		}
	}
	line(sep)
	for _, r := range cells[1:] {
		line(r)
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// fmtDur renders a latency in µs or ms with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}
