package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/doors"
)

// modelConfig exercises every rule the reference model checks: two enforced
// policies deciding together (one with cost_header and max_cost, keyed by
// an API key with client_ip as fallback), two shadow policies each
// deciding as if it were the only one (one skipping requests without a
// key), rational
// refill rates, and trusted_hops with X-Forwarded-For.
const modelConfig = `
store: {backend: memory}
client_ip: {trusted_hops: 1}
policies:
  - name: api
    match: {path_prefix: /api/}
    key: [header:x-api-key, client_ip]
    capacity: 5
    refill_per_second: 1/3
    cost_header: x-cost
    max_cost: 4
  - name: ip
    match: {methods: [GET, POST]}
    key: [client_ip]
    capacity: 4
    refill_per_second: 0.4
  - name: shadow-ip
    key: [client_ip]
    capacity: 3
    refill_per_second: 0.5
    mode: shadow
  - name: shadow-key
    key: [header:x-api-key]
    on_missing_key: skip
    capacity: 2
    refill_per_second: 1/5
    mode: shadow
`

// mpolicy is a policy as the reference model knows it, written out again
// from modelConfig rather than read from the compiled engine.
type mpolicy struct {
	name       string
	shadow     bool
	capacity   *big.Rat
	rate       *big.Rat
	matches    func(r *mreq) bool
	keys       []string // "header:x-api-key", "client_ip"
	skip       bool
	costHeader string
	maxCost    int64
}

var modelPolicies = []mpolicy{
	{name: "api", capacity: big.NewRat(5, 1), rate: big.NewRat(1, 3), keys: []string{"header:x-api-key", "client_ip"},
		costHeader: "x-cost", maxCost: 4, matches: func(r *mreq) bool { return strings.HasPrefix(pathOnly(r.path), "/api/") }},
	{name: "ip", capacity: big.NewRat(4, 1), rate: big.NewRat(2, 5), keys: []string{"client_ip"},
		matches: func(r *mreq) bool { return r.method == "GET" || r.method == "POST" }},
	{name: "shadow-ip", shadow: true, capacity: big.NewRat(3, 1), rate: big.NewRat(1, 2), keys: []string{"client_ip"},
		matches: func(*mreq) bool { return true }},
	{name: "shadow-key", shadow: true, capacity: big.NewRat(2, 1), rate: big.NewRat(1, 5), keys: []string{"header:x-api-key"}, skip: true,
		matches: func(*mreq) bool { return true }},
}

func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// mreq is one generated request.
type mreq struct {
	ms      int64 // start time, milliseconds since the Unix epoch
	method  string
	path    string
	source  string // downstream_remote_address
	headers map[string]*string
}

func (r *mreq) header(name string) (string, bool) {
	v, ok := r.headers[name]
	if !ok || v == nil {
		return "", false
	}
	return *v, true
}

// clientIP is Envoy's rule with xff_num_trusted_hops 1: the second entry
// from the right of X-Forwarded-For; when there is none or it is not an IP,
// the connection's address (source/common/http/utility.cc,
// Utility::getLastAddressFromXFF).
func (r *mreq) clientIP() string {
	xff, _ := r.header("x-forwarded-for")
	parts := strings.Split(xff, ",")
	if xff != "" && len(parts) >= 2 {
		if a, err := netip.ParseAddr(strings.TrimSpace(parts[len(parts)-2])); err == nil {
			return bucketOf(a)
		}
	}
	ap, err := netip.ParseAddrPort(r.source)
	if err != nil {
		return ""
	}
	return bucketOf(ap.Addr())
}

// bucketOf is the client's bucket: the address, or its /64 for IPv6.
func bucketOf(a netip.Addr) string {
	if a.Is6() {
		return netip.PrefixFrom(a, 64).Masked().String()
	}
	return a.String()
}

func (r *mreq) line() string {
	m := map[string]any{
		"start_time":                time.UnixMilli(r.ms).UTC().Format("2006-01-02T15:04:05.000Z"),
		"method":                    r.method,
		"path":                      r.path,
		"authority":                 "api.example.com",
		"downstream_remote_address": r.source,
		"request_headers":           r.headers,
		"response_code":             200, // other keys are ignored
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// generate makes n requests from a few callers at irregular times.
func generate(rng *rand.Rand, n int) []*mreq {
	keys := []string{"k1", "k2", "k3", "k4", " ", ""}
	ips := []string{"203.0.113.5", "203.0.113.6", "198.51.100.7", "2001:db8::1"}
	ms := int64(1_795_000_000_000)
	var out []*mreq
	for range n {
		ms += int64(rng.IntN(900))
		r := &mreq{ms: ms, method: []string{"GET", "GET", "POST", "DELETE"}[rng.IntN(4)],
			path:   []string{"/api/items?page=2", "/api/x", "/other", "/api"}[rng.IntN(4)],
			source: fmt.Sprintf("10.0.0.%d:4%04d", 1+rng.IntN(3), rng.IntN(10000)), headers: map[string]*string{}}
		str := func(s string) *string { return &s }
		switch k := keys[rng.IntN(len(keys)+2)%len(keys)]; {
		case k == "" && rng.IntN(2) == 0:
			r.headers["x-api-key"] = nil // Envoy's null for a missing header
		case k != "":
			r.headers["x-api-key"] = str(k)
		}
		ip := ips[rng.IntN(len(ips))]
		switch rng.IntN(5) {
		case 0:
			r.headers["x-forwarded-for"] = str(ip + ", 10.9.0.1")
		case 1:
			r.headers["x-forwarded-for"] = str("6.6.6.6, " + ip + ",10.9.0.1") // the leftmost entry is the client's to forge
		case 2:
			r.headers["x-forwarded-for"] = str("10.9.0.1") // too short: the source address decides
		case 3:
			r.headers["x-forwarded-for"] = str("unknown, 10.9.0.1") // not an IP: the source address decides
		case 4:
			r.headers["x-forwarded-for"] = nil
		}
		if rng.IntN(3) == 0 {
			r.headers["x-cost"] = str([]string{"2", "3", "9", "0", "abc", " 2 "}[rng.IntN(6)])
		}
		r.headers["user-agent"] = str([]string{"curl/8", "Mozilla/5.0", "app/1.2"}[rng.IntN(3)])
		out = append(out, r)
	}
	return out
}

// mline is one line of a generated log.
type mline struct {
	text string
	req  *mreq // nil for a malformed or blank line
	bad  bool  // malformed (reported on stderr)
}

// shuffle writes reqs as a log, each line displaced by less than window
// (as Envoy writes a request when it ends), with late lines (older than
// the window allows) and malformed and blank lines mixed in.
func shuffle(rng *rand.Rand, reqs []*mreq, window time.Duration) []mline {
	type keyed struct {
		k int64
		r *mreq
	}
	ks := make([]keyed, len(reqs))
	for i, r := range reqs {
		ks[i] = keyed{r.ms + rng.Int64N(window.Milliseconds()), r}
	}
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].k < ks[j].k })
	var out []mline
	maxMs := int64(0)
	for i, k := range ks {
		out = append(out, mline{text: k.r.line(), req: k.r})
		maxMs = max(maxMs, k.r.ms)
		if i%97 == 50 { // a late line: a copy from before the window (or, off 0, just inside it)
			late := *k.r
			off := []int64{0, 1, 1 + rng.Int64N(5000)}[rng.IntN(3)]
			late.ms = maxMs - window.Milliseconds() - off
			out = append(out, mline{text: late.line(), req: &late})
		}
		if i%211 == 7 {
			bad := []string{`garbage`, `{"start_time": 12}`, `{"method":"GET","path":"/api/x"}`,
				`{"start_time":"yesterday","method":"GET"}`, `[1,2]`,
				`{"start_time":"2026-11-30T12:00:00Z","method":"GET","request_headers":"x-api-key: k1"}`,
				`{"start_time":"2026-11-30T12:00:00Z","method":"GET","request_headers":{"x-api-key":7}}`}
			out = append(out, mline{text: bad[rng.IntN(len(bad))], bad: true})
		}
		if i%301 == 3 {
			out = append(out, mline{text: "   "})
		}
	}
	return out
}

// model is the reference: exact rational token buckets.
type model struct {
	window  int64 // ms
	buckets map[string]*mbucket
	stats   map[string]*mstats
	// decisions[i] is line i+1's decision, for decided lines.
	decisions map[int64]bool
	// agents and keys count the distinct user agents and API keys seen
	// behind each client address (by its caller name), on lines a
	// client_ip policy keyed by it.
	agents, keys                         map[string]map[string]bool
	lines, decided, skipped, late, ahead int64
	// shadowAlone counts lines on which one shadow policy was short and
	// another paid: each decides on its own (DESIGN.md).
	shadowAlone int64
}

type mbucket struct {
	tokens *big.Rat
	last   int64 // ms
}

type mcaller struct {
	requests, denied int64
	backlog, peak    *big.Rat
	last             int64
}

type mstats struct {
	requests, allowed, denied, byOther int64
	callers                            map[string]*mcaller
}

func newModel(window time.Duration) *model {
	m := &model{window: window.Milliseconds(), buckets: map[string]*mbucket{}, stats: map[string]*mstats{}, decisions: map[int64]bool{},
		agents: map[string]map[string]bool{}, keys: map[string]map[string]bool{}}
	for _, p := range modelPolicies {
		m.stats[p.name] = &mstats{callers: map[string]*mcaller{}}
	}
	return m
}

func seconds(ms int64) *big.Rat { return big.NewRat(ms, 1000) }

// tokensAt returns the bucket's tokens at ms: min(C, t + r·Δt), full when new.
func (m *model) tokensAt(p *mpolicy, id string, ms int64) *big.Rat {
	b := m.buckets[p.name+"\x00"+id]
	if b == nil {
		return new(big.Rat).Set(p.capacity)
	}
	t := new(big.Rat).Mul(p.rate, seconds(ms-b.last))
	t.Add(t, b.tokens)
	if t.Cmp(p.capacity) > 0 {
		t.Set(p.capacity)
	}
	return t
}

type mplan struct {
	p    *mpolicy
	id   string // the caller as the report shows it
	cost int64
}

func (m *model) plan(r *mreq) []mplan {
	var out []mplan
	for i := range modelPolicies {
		p := &modelPolicies[i]
		if !p.matches(r) {
			continue
		}
		id := ""
		for _, k := range p.keys {
			if k == "client_ip" {
				if ip := r.clientIP(); ip != "" {
					id = "client_ip " + ip
					break
				}
				continue
			}
			name := strings.TrimPrefix(k, "header:")
			if v, ok := r.header(name); ok && strings.TrimSpace(v) != "" {
				id = k + " " + strings.TrimSpace(v)
				break
			}
		}
		if id == "" {
			if p.skip {
				continue
			}
			id = "(no key: the shared bucket)"
		}
		cost := int64(1)
		if p.costHeader != "" {
			if v, ok := r.header(p.costHeader); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 1 {
					cost = min(n, p.maxCost)
				}
			}
		}
		out = append(out, mplan{p, id, cost})
	}
	return out
}

// run replays lines as the specification says, independently of the code.
func (m *model) run(lines []mline) {
	type item struct {
		line int64
		r    *mreq
	}
	var items []item
	var maxSeen int64
	seen := false
	admit := func(it item) {
		if !seen || it.r.ms > maxSeen {
			maxSeen, seen = it.r.ms, true
		}
		items = append(items, it)
	}
	// A line more than the window after every admitted line waits for the
	// next line: admitted when that one starts no earlier than the window
	// before it, set aside (ahead) otherwise, admitted at the end.
	var held *item
	for i, l := range lines {
		m.lines++
		if l.req == nil {
			m.skipped++
			continue
		}
		if seen && l.req.ms < maxSeen-m.window {
			m.late++
			continue
		}
		if held != nil {
			if l.req.ms >= held.r.ms-m.window {
				admit(*held)
			} else {
				m.ahead++
			}
			held = nil
		}
		if !seen || l.req.ms > maxSeen+m.window {
			held = &item{int64(i + 1), l.req}
			continue
		}
		admit(item{int64(i + 1), l.req})
	}
	if held != nil {
		admit(*held)
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].r.ms < items[j].r.ms })
	for _, it := range items {
		m.decided++
		plan := m.plan(it.r)
		for _, x := range plan {
			if slices.Contains(x.p.keys, "client_ip") && strings.HasPrefix(x.id, "client_ip ") {
				if m.agents[x.id] == nil {
					m.agents[x.id], m.keys[x.id] = map[string]bool{}, map[string]bool{}
				}
				if ua, ok := it.r.header("user-agent"); ok {
					m.agents[x.id][ua] = true
				}
				if k, ok := it.r.header("x-api-key"); ok && strings.TrimSpace(k) != "" {
					m.keys[x.id][strings.TrimSpace(k)] = true
				}
				break
			}
		}
		allowed := true
		short := make([]bool, len(plan))
		for _, shadow := range []bool{false, true} {
			fits := true
			for i, x := range plan {
				if x.p.shadow == shadow && m.tokensAt(x.p, x.id, it.r.ms).Cmp(big.NewRat(x.cost, 1)) < 0 {
					fits, short[i] = false, true
				}
			}
			paid, missed := false, false
			for i, x := range plan {
				if x.p.shadow != shadow {
					continue
				}
				// The enforced policies pay together or not at all; each
				// shadow policy pays when its own bucket holds its cost.
				pays := fits
				if shadow {
					pays = !short[i]
					paid, missed = paid || pays, missed || !pays
				}
				s, c := m.stats[x.p.name], m.stats[x.p.name].callers[x.id]
				if c == nil {
					c = &mcaller{backlog: new(big.Rat), peak: new(big.Rat), last: it.r.ms}
					s.callers[x.id] = c
				}
				s.requests++
				c.requests++
				switch {
				case pays:
					s.allowed++
				case short[i]:
					s.denied++
					c.denied++
				default:
					s.byOther++
				}
				// B ← max(0, B − r·Δt) + cost
				c.backlog.Sub(c.backlog, new(big.Rat).Mul(x.p.rate, seconds(it.r.ms-c.last)))
				if c.backlog.Sign() < 0 {
					c.backlog.SetInt64(0)
				}
				c.backlog.Add(c.backlog, big.NewRat(x.cost, 1))
				c.last = it.r.ms
				if c.backlog.Cmp(c.peak) > 0 {
					c.peak.Set(c.backlog)
				}
				if pays {
					t := m.tokensAt(x.p, x.id, it.r.ms)
					t.Sub(t, big.NewRat(x.cost, 1))
					m.buckets[x.p.name+"\x00"+x.id] = &mbucket{tokens: t, last: it.r.ms}
				}
			}
			if !shadow {
				allowed = fits
			} else if paid && missed {
				m.shadowAlone++
			}
		}
		m.decisions[it.line] = allowed
	}
}

func ceilRat(r *big.Rat) int64 {
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func nearestRank(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	// The smallest value with at least p% of the values at or below it.
	for i := range sorted {
		if 100*(i+1) >= p*len(sorted) {
			return sorted[i]
		}
	}
	return sorted[len(sorted)-1]
}

func (m *model) policy(p *mpolicy) PolicyResult {
	s := m.stats[p.name]
	mode := "enforce"
	if p.shadow {
		mode = "shadow"
	}
	pr := PolicyResult{Name: p.name, Mode: mode, Requests: s.requests, Allowed: s.allowed, Denied: s.denied,
		DeniedByOther: s.byOther, Callers: int64(len(s.callers)), TopDenied: []TopCaller{}}
	var needs []int64
	for id, c := range s.callers {
		needs = append(needs, ceilRat(c.peak))
		if c.denied > 0 {
			pr.CallersDenied++
			pr.TopDenied = append(pr.TopDenied, TopCaller{Caller: id, Requests: c.requests, Denied: c.denied, CapacityNeeded: ceilRat(c.peak)})
			if slices.Contains(p.keys, "client_ip") && strings.HasPrefix(id, "client_ip ") {
				pr.Collateral = append(pr.Collateral, Collateral{Caller: id, Requests: c.requests, Denied: c.denied,
					CapacityNeeded: ceilRat(c.peak), UserAgents: len(m.agents[id]), APIKeys: len(m.keys[id])})
			}
		}
	}
	slices.Sort(needs)
	pr.CapacityNeeded = Percentiles{P50: nearestRank(needs, 50), P90: nearestRank(needs, 90), P99: nearestRank(needs, 99)}
	if len(needs) > 0 {
		pr.CapacityNeeded.Max = needs[len(needs)-1]
	}
	return pr
}

func sortCallers(cs []TopCaller) {
	slices.SortFunc(cs, func(a, b TopCaller) int { return strings.Compare(a.Caller, b.Caller) })
}

// TestReplayMatchesTheRationalModel replays generated logs and checks every
// count, every capacity_needed percentile, every denied caller and every
// line's decision against an exact rational model written from the
// specification, not from the code.
func TestReplayMatchesTheRationalModel(t *testing.T) {
	const window = 5 * time.Second
	for _, tc := range []struct {
		seed    uint64
		n       int
		workers int
	}{{1, 3000, 1}, {2, 3000, 3}, {3, 5000, 2}} {
		t.Run(fmt.Sprintf("seed %d, %d workers", tc.seed, tc.workers), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(tc.seed, 99))
			lines := shuffle(rng, generate(rng, tc.n), window)
			bad := 0
			for _, l := range lines {
				if l.bad {
					bad++
				}
			}
			res, m := replayAgainstTheModel(t, lines, window, tc.workers)
			if m.late == 0 || bad == 0 || m.stats["api"].byOther == 0 || m.stats["ip"].byOther == 0 || m.shadowAlone == 0 {
				t.Fatalf("the generated log misses a case: late %d, malformed %d, denied by another: api %d, ip %d; a shadow policy paying beside a short one: %d",
					m.late, bad, m.stats["api"].byOther, m.stats["ip"].byOther, m.shadowAlone)
			}
			for _, g := range res.Policies {
				if g.Denied == 0 || g.Allowed == 0 {
					t.Errorf("%s: the log should both allow and deny (allowed %d, denied %d)", g.Name, g.Allowed, g.Denied)
				}
			}
		})
	}
}

// TestOneFarFutureLineDoesNotMoveTheWindow: a line dated an hour or a
// century after its neighbours (a wrong clock) near the top of a log is set
// aside and counted as ahead; every other line is decided as without it, as
// the model decides them.
func TestOneFarFutureLineDoesNotMoveTheWindow(t *testing.T) {
	const window = 5 * time.Second
	for _, tc := range []struct {
		name string
		at   int // the outlier's index among the lines
		ms   func(first int64) int64
	}{
		{"an hour ahead, third line", 2, func(first int64) int64 { return first + time.Hour.Milliseconds() }},
		{"year 9999, first line", 0, func(int64) int64 { return time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).UnixMilli() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 7))
			lines := shuffle(rng, generate(rng, 1500), window)
			without, _ := replayAgainstTheModel(t, lines, window, 2)

			outlier := *lines[5].req
			outlier.ms = tc.ms(lines[0].req.ms)
			lines = slices.Insert(lines, tc.at, mline{text: outlier.line(), req: &outlier})
			res, m := replayAgainstTheModel(t, lines, window, 2)
			if res.Ahead != 1 || m.ahead != 1 {
				t.Errorf("ahead = %d (model %d), want the one outlier", res.Ahead, m.ahead)
			}
			if res.Late != without.Late || res.Decided != without.Decided || res.Lines != without.Lines+1 {
				t.Errorf("with the outlier: %d lines, %d decided, %d late; without: %d, %d, %d",
					res.Lines, res.Decided, res.Late, without.Lines, without.Decided, without.Late)
			}
			for i, p := range res.Policies {
				if summary(p) != summary(without.Policies[i]) {
					t.Errorf("the outlier changed the report:\n with    %s\n without %s", summary(p), summary(without.Policies[i]))
				}
			}
			if err := res.Undecided(); err != nil {
				t.Errorf("one outlier refused the log: %v", err)
			}
		})
	}
}

// replayAgainstTheModel replays lines and checks the result against the
// model's: the counts, every line's decision, each policy's report.
func replayAgainstTheModel(t *testing.T, lines []mline, window time.Duration, workers int) (*Result, *model) {
	t.Helper()
	cfg, err := doors.Parse("model.yaml", []byte(modelConfig))
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	for _, l := range lines {
		log.WriteString(l.text + "\n")
	}
	m := newModel(window)
	m.run(lines)

	var stderr bytes.Buffer
	got := map[int64]bool{}
	res, err := Run(context.Background(), strings.NewReader(log.String()), Options{MaxLineBytes: DefaultMaxLineBytes, Engine: cfg.Engine, MaxBuckets: cfg.Store.Memory.MaxBuckets, ReorderWindow: window,
		Workers: workers, Malformed: &stderr, ShowMalformed: 3, OnDecision: func(line int64, allowed bool) {
			got[line] = allowed
		}})
	if err != nil {
		t.Fatal(err)
	}
	res.Report(ReportOptions{Top: 1 << 20})

	if res.Lines != m.lines || res.Decided != m.decided || res.Skipped != m.skipped || res.Late != m.late || res.Ahead != m.ahead {
		t.Errorf("lines/decided/skipped/late/ahead = %d/%d/%d/%d/%d, model %d/%d/%d/%d/%d",
			res.Lines, res.Decided, res.Skipped, res.Late, res.Ahead, m.lines, m.decided, m.skipped, m.late, m.ahead)
	}
	if n := strings.Count(stderr.String(), "\n"); n != 3 || !strings.HasPrefix(stderr.String(), "line ") {
		t.Errorf("stderr should name the first 3 malformed lines, got:\n%s", stderr.String())
	}
	if len(got) != len(m.decisions) {
		t.Errorf("%d lines decided, model %d", len(got), len(m.decisions))
	}
	wrong := 0
	for line, want := range m.decisions {
		if g, ok := got[line]; !ok || g != want {
			if wrong++; wrong <= 5 {
				t.Errorf("line %d: allowed = %v (decided: %v), model %v", line, g, ok, want)
			}
		}
	}
	for i := range modelPolicies {
		want := m.policy(&modelPolicies[i])
		g := res.Policies[i]
		sortCallers(want.TopDenied)
		sortCallers(g.TopDenied)
		if g.Name != want.Name || g.Mode != want.Mode || g.Requests != want.Requests || g.Allowed != want.Allowed ||
			g.Denied != want.Denied || g.DeniedByOther != want.DeniedByOther || g.Callers != want.Callers ||
			g.CallersDenied != want.CallersDenied || g.CapacityNeeded != want.CapacityNeeded {
			t.Errorf("%s:\n got   %+v\n model %+v", want.Name, summary(g), summary(want))
		}
		if !slices.Equal(g.TopDenied, want.TopDenied) {
			t.Errorf("%s: denied callers\n got   %v\n model %v", want.Name, g.TopDenied, want.TopDenied)
		}
		slices.SortFunc(g.Collateral, func(a, b Collateral) int { return strings.Compare(a.Caller, b.Caller) })
		slices.SortFunc(want.Collateral, func(a, b Collateral) int { return strings.Compare(a.Caller, b.Caller) })
		if !slices.Equal(g.Collateral, want.Collateral) {
			t.Errorf("%s: collateral\n got   %v\n model %v", want.Name, g.Collateral, want.Collateral)
		}
		if (want.Name == "ip" || want.Name == "shadow-ip") && len(want.Collateral) == 0 {
			t.Errorf("%s: no denied client address to check the collateral report on", want.Name)
		}
	}
	return res, m
}

func summary(p PolicyResult) string {
	return fmt.Sprintf("%s %s req %d allowed %d denied %d other %d callers %d denied-callers %d needed %+v",
		p.Name, p.Mode, p.Requests, p.Allowed, p.Denied, p.DeniedByOther, p.Callers, p.CallersDenied, p.CapacityNeeded)
}

// TestALogMostlyOutOfOrderIsRefused: a log joined from two files in the
// wrong order has half its lines late; Undecided refuses the result rather
// than let a table without them pass for the log's.
func TestALogMostlyOutOfOrderIsRefused(t *testing.T) {
	const window = 5 * time.Second
	rng := rand.New(rand.NewPCG(5, 5))
	lines := shuffle(rng, generate(rng, 1000), window)
	swapped := append(slices.Clone(lines[len(lines)/2:]), lines[:len(lines)/2]...)
	res, m := replayAgainstTheModel(t, swapped, window, 2)
	if m.late < int64(len(lines))/3 {
		t.Fatalf("the swapped log has only %d late lines", m.late)
	}
	err := res.Undecided()
	if err == nil || !strings.Contains(err.Error(), "--reorder-window") || !strings.Contains(err.Error(), fmt.Sprintf("%d late", res.Late)) {
		t.Errorf("Undecided() = %v, want a refusal naming the late lines and --reorder-window", err)
	}
	inOrder, _ := replayAgainstTheModel(t, lines, window, 2)
	if err := inOrder.Undecided(); err != nil {
		t.Errorf("the log in order (%d late of %d) is refused: %v", inOrder.Late, inOrder.Lines, err)
	}
}

// TestMaxCallersBoundsTheCallersHeldAndCountsWhatItLeavesOut: with
// MaxCallers the run holds no more callers than that, and every line it did
// not decide because of the bound is counted; a bound above the log's
// callers changes nothing.
func TestMaxCallersBoundsTheCallersHeldAndCountsWhatItLeavesOut(t *testing.T) {
	cfg, err := doors.Parse("model.yaml", []byte(modelConfig))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	var log strings.Builder
	for _, l := range shuffle(rng, generate(rng, 2000), 5*time.Second) {
		log.WriteString(l.text + "\n")
	}
	run := func(maxCallers int) *Result {
		res, err := Run(context.Background(), strings.NewReader(log.String()), Options{Workers: 2, MaxLineBytes: DefaultMaxLineBytes, Engine: cfg.Engine, MaxBuckets: cfg.Store.Memory.MaxBuckets,
			ReorderWindow: 5 * time.Second, MaxCallers: maxCallers})
		if err != nil {
			t.Fatal(err)
		}
		return res.Report(ReportOptions{Top: 10})
	}
	all := run(0)
	held := len(all.callers.names)
	if held < 8 {
		t.Fatalf("the log has only %d callers", held)
	}
	bounded := run(held / 2)
	if n := len(bounded.callers.names); n > held/2 || n == 0 {
		t.Errorf("--max-callers %d held %d callers", held/2, n)
	}
	if bounded.BeyondMaxCallers == 0 || bounded.Decided+bounded.BeyondMaxCallers != all.Decided || bounded.MaxCallers != held/2 {
		t.Errorf("bounded: %d decided + %d beyond the bound (of %d), want %d decided in all", bounded.Decided,
			bounded.BeyondMaxCallers, bounded.MaxCallers, all.Decided)
	}
	var table bytes.Buffer
	bounded.WriteTable(&table)
	if want := fmt.Sprintf("%d beyond --max-callers %d", bounded.BeyondMaxCallers, held/2); !strings.Contains(table.String(), want) {
		t.Errorf("the table does not say %q:\n%s", want, table.String())
	}
	roomy := run(held)
	if roomy.BeyondMaxCallers != 0 || !reflect.DeepEqual(roomy.Policies, all.Policies) {
		t.Errorf("a bound of the log's %d callers changed the report", held)
	}
}
