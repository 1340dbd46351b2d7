package rlqs

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/rlqs/allot"
	"github.com/floodgate/floodgate/limiter"
)

// The fleet, through the shared store. Every replica charges what its
// Envoys report into registers of the shared store, one set a window, and
// reads the last settled windows back: what every Envoy of a bucket asked
// for, what they admitted and how many report it, across replicas, with
// nothing but the store's Charge, Refund and Take (a look), so that Redis,
// Redis Cluster and the in-memory store all serve (the memory store, one
// replica).
//
// A window is a tenth of Envoy's report interval, and a replica reads the
// last spanWindows settled ones, one interval of reports: every Envoy's
// latest report, once, about a window and a fifth after it was sent. A
// replica reads at its own Envoys' reports and once a window besides
// (Run), so a shift of demand reported on one replica reaches the shares
// of the others' Envoys within about two windows, not at their next
// reports.
//
// A register is a bucket used as a counter: capacity regCap, refilled at a
// thousandth of the limit's rate (so a window's reading is off by at most
// a thousandth of the limit over the windows it is read across, and a
// register left alone empties from Redis as any bucket does, when full
// again), charged with each report's counts; what it was charged is the
// capacity less what it holds. Registers go round slots: a report charges
// window w's, resets (refunds whole, which deletes them) the coming
// windows' up to a span ahead, none of which anyone reads or writes yet,
// and reads the settled windows before w, which no replica writes any
// more. A window's slot is reset by every report of the span before it,
// so a replica whose Envoys report every interval never reads a slot left
// from slots windows before. A window is settled
// a fifth of a window after it ends, time enough for the reports sent in it
// to land. The registers of a bucket share its identity, so they and the
// bucket itself sit in one Redis Cluster slot: one script call.
//
// The bucket itself (the rate limit door's, of the same descriptor chain)
// is charged with what each Envoy allowed, as a stream-done hits_addend
// is: Envoy's rate limit service sees the requests Envoys admitted under
// their quotas, one limit for both APIs.

// The registers of a bucket.
const (
	regDemand  = iota // requests reported, allowed and denied
	regAllowed        // requests allowed
	regReports        // reports: one an Envoy a window
	nRegs
)

// spanWindows is how many windows make a report interval: the settled
// windows a replica reads.
const spanWindows = 10

// slots is how many windows the registers go round: the one charged, the
// span ahead (reset), and the span read, a window behind at most.
const slots = 2*spanWindows + 3

// regNames prefix the registers' bucket names (register, slot).
var regNames = func() (n [nRegs][slots]string) {
	for r, p := range [nRegs]string{"d", "a", "n"} {
		for s := range slots {
			n[r][s] = "rlqs/" + p + strconv.Itoa(s) + "/"
		}
	}
	return n
}()

type counts [nRegs]int64

// ledgerKey is a bucket's name and identity in the store.
type ledgerKey struct{ name, id string }

// ledger is what a replica knows of one bucket of the fleet: the store's
// last readings, what it charged itself, its Envoys' latest reports, the
// correction in force.
type ledger struct {
	key ledgerKey

	mu sync.Mutex
	q  door.Quota
	// domain, limit (requests a second), burst (seconds of a share an
	// Envoy may spend at once), and the registers' shape.
	domain  string
	limit   float64
	burst   float64
	reg     [nRegs]limiter.Limit
	read    map[int64]counts // settled windows, as the store said
	mine    map[int64]counts // what this replica charged, by window
	resetTo int64            // the last window whose slot this replica reset
	// elsewhere is the fleet on other replicas; fleet the whole fleet's
	// demand and admitted total (requests a second), contested whether
	// demand exceeds the limit: as of the last settled windows read.
	elsewhere         allot.Fleet
	fleet, admitted   float64
	fleetEnvoys       float64
	contested, known  bool
	storeFailedAt     time.Time
	envoys            map[*stream]*envoyShare
	lastUsed, created time.Time
	// charged is when this replica last charged the registers; divided
	// the fleet's demand and Envoys its Envoys' shares were last pushed
	// for.
	charged, readAt time.Time
	divided         allot.Fleet
}

// envoyShare is one stream's latest report of the bucket and its share.
type envoyShare struct {
	peer, key     string  // key: the stream's bucket
	demand, share float64 // demand -1: not known yet (the share assumed it)
	assumed       float64 // the demand the share was divided for
	tb            allot.TokenBucket
	seen          time.Time
}

// ledgers are a replica's ledgers, by bucket.
type ledgers struct {
	interval, window time.Duration
	mu               sync.Mutex
	m                map[ledgerKey]*ledger
	swept            time.Time
}

func newLedgers(interval time.Duration) *ledgers {
	return &ledgers{interval: interval, window: max(interval/spanWindows, time.Millisecond), m: map[ledgerKey]*ledger{}}
}

// of is the ledger of q's bucket, made or updated for q.
func (ls *ledgers) of(domain string, q door.Quota, now time.Time) *ledger {
	k := ledgerKey{q.Bucket.Name, q.Bucket.ID}
	ls.mu.Lock()
	l := ls.m[k]
	if l == nil {
		l = &ledger{key: k, read: map[int64]counts{}, mine: map[int64]counts{}, resetTo: -1,
			envoys: map[*stream]*envoyShare{}, created: now}
		ls.m[k] = l
	}
	ls.mu.Unlock()
	l.mu.Lock()
	if l.q.Bucket.Limit != q.Bucket.Limit || l.domain != domain {
		l.domain = domain
		l.limit = rateOf(q.Bucket.Limit)
		l.burst = min(float64(q.Bucket.Limit.Capacity)/l.limit, MaxBurst.Seconds())
		l.reg = registerLimits(q.Bucket.Limit, ls.window)
	}
	l.q = q
	l.lastUsed = now
	l.mu.Unlock()
	return l
}

// sweep forgets the ledgers no stream has reported for long (the
// registers' windows are gone by then), at most once a window.
func (ls *ledgers) sweep(now time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if now.Sub(ls.swept) < ls.window {
		return
	}
	ls.swept = now
	for k, l := range ls.m {
		l.mu.Lock()
		for st, e := range l.envoys {
			if now.Sub(e.seen) > staleAfter*ls.interval {
				delete(l.envoys, st)
			}
		}
		idle := len(l.envoys) == 0 && now.Sub(l.lastUsed) > slots*ls.window
		l.mu.Unlock()
		if idle {
			delete(ls.m, k)
		}
	}
}

// MaxBurst is the most of its share, in time, an Envoy may spend at once.
// Envoy makes a bucket anew, full, whenever its assignment changes
// (shouldReplaceTokenBucket): each change is a burst of max_tokens on top
// of the share, so the limit's own burst (its capacity) is not divided
// among the Envoys but cut to this.
const MaxBurst = 100 * time.Millisecond

// staleAfter is how many windows without a report make an Envoy's share
// of a bucket stale: it stopped reporting (Envoy reports every bucket it
// holds every interval), and its share goes back.
const staleAfter = 3

// all is every ledger, for the metrics and the debug page.
func (ls *ledgers) all() []*ledger {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := make([]*ledger, 0, len(ls.m))
	for _, l := range ls.m {
		out = append(out, l)
	}
	return out
}

// forget drops st's shares from every ledger it reported to.
func (ls *ledgers) forget(st *stream, of []*ledger) {
	for _, l := range of {
		l.mu.Lock()
		delete(l.envoys, st)
		l.mu.Unlock()
	}
}

// rateOf is a limit's refill, requests a second.
func rateOf(l limiter.Limit) float64 {
	num, den := l.Rate.Fraction()
	if den == 0 {
		return 0
	}
	return float64(num) / float64(den)
}

// regCapacity is the registers' capacity, at most: far more requests than
// a window of any bucket sees, within the store's exact arithmetic.
const regCapacity = 1 << 30

// reportScale is what one report charges the reports register.
const reportScale = 1000

// registerLimits are the registers' shapes for a bucket of limit l and
// windows of window: capacity as large as exact arithmetic allows up to
// regCapacity; the demand and allowed registers refilled at a thousandth
// of l's rate where that is exact, the reports register at a hundredth of
// a report a window.
func registerLimits(l limiter.Limit, window time.Duration) (out [nRegs]limiter.Limit) {
	num, den := l.Rate.Fraction()
	var rates []limiter.Rate
	for _, div := range []int64{1000, 100, 10, 1} {
		if r, err := limiter.NewRate(num, den*div); err == nil {
			rates = append(rates, r)
		}
	}
	counter := shapeOf(rates, l)
	out[regDemand], out[regAllowed] = counter, counter
	ms := max(window.Milliseconds(), 1)
	rep, err := limiter.NewRate(reportScale/100*1000, ms)
	if err != nil {
		rep = l.Rate
	}
	out[regReports] = shapeOf([]limiter.Rate{rep}, l)
	return out
}

// shapeOf is the largest register the first of rates that allows one can
// make, else fallback.
func shapeOf(rates []limiter.Rate, fallback limiter.Limit) limiter.Limit {
	for _, rate := range rates {
		for c := int64(regCapacity); c >= 1<<10; c >>= 1 {
			if lim, err := limiter.NewLimit(c, rate); err == nil {
				return lim
			}
		}
	}
	return fallback
}

// refilled is what a register of shape l refills in d, whole tokens.
func refilled(l limiter.Limit, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	num, den := l.Rate.Fraction()
	return int64(math.Round(float64(num) / float64(den) * d.Seconds()))
}

// window is the index of the window now is in.
func (ls *ledgers) windowOf(now time.Time) int64 {
	return now.UnixNano() / int64(ls.window)
}

// settled is the latest settled window at now: the previous one, once a
// fifth of the current one has passed, else the one before.
func (ls *ledgers) settled(now time.Time) int64 {
	w := ls.windowOf(now)
	if now.UnixNano()-w*int64(ls.window) >= int64(ls.window)/5 {
		return w - 1
	}
	return w - 2
}

// slot is window w's slot.
func slot(w int64) int { return int(((w % slots) + slots) % slots) }

// part is one bucket's share of a report's call to the store.
type part struct {
	l      *ledger
	w      int64
	charge counts
	// at indexes the call's requests: the charges (nRegs, then the
	// bucket's when allowed > 0), resets (nRegs each, through resetTo),
	// looks by window.
	charges, limitAt int
	resetTo          int64

	looks []look
}

type look struct {
	w  int64
	at int
}

// plan appends to reqs what one report of the bucket asks of the store:
// its counts (requests, the demand its share is divided for; allowed)
// charged at window w, the next window's slot reset once a
// window, the settled windows not read yet looked at.
func (l *ledger) plan(ls *ledgers, now time.Time, allowed, requests uint64, reqs []limiter.Request) ([]limiter.Request, part) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := ls.windowOf(now)
	p := part{l: l, w: w, charge: counts{int64(requests), int64(allowed), reportScale}, limitAt: -1, resetTo: -1}
	reg := func(r, s int, kind limiter.Kind, cost int64) limiter.Request {
		if kind == limiter.Refund {
			cost = l.reg[r].Capacity
		}
		return limiter.Request{Name: regNames[r][s] + l.key.name, ID: l.key.id, Limit: l.reg[r], Kind: kind, Cost: cost}
	}
	p.charges = len(reqs)
	for r := range nRegs {
		reqs = append(reqs, reg(r, slot(w), limiter.Charge, p.charge[r]))
	}
	if allowed > 0 {
		p.limitAt = len(reqs)
		reqs = append(reqs, limiter.Request{Name: l.key.name, ID: l.key.id, Limit: l.q.Bucket.Limit, Kind: limiter.Charge, Cost: int64(allowed)})
	}
	if ahead := w + spanWindows + 1; l.resetTo < ahead {
		for rw := max(l.resetTo+1, w+1); rw <= ahead; rw++ {
			for r := range nRegs {
				reqs = append(reqs, reg(r, slot(rw), limiter.Refund, 0))
			}
		}
		p.resetTo = ahead
	}
	reqs = l.looks(ls, now, reqs, &p)
	return reqs, p
}

// looks appends to reqs p's looks at the settled windows not read yet
// (l.mu held).
func (l *ledger) looks(ls *ledgers, now time.Time, reqs []limiter.Request, p *part) []limiter.Request {
	s := ls.settled(now)
	for sw := s; sw > s-spanWindows; sw-- {
		if _, ok := l.read[sw]; ok {
			continue
		}
		p.looks = append(p.looks, look{w: sw, at: len(reqs)})
		for r := range nRegs {
			reqs = append(reqs, limiter.Request{Name: regNames[r][slot(sw)] + l.key.name, ID: l.key.id, Limit: l.reg[r], Kind: limiter.Take})
		}
	}
	return reqs
}

// absorb takes the store's answer to p (res, the call's results; ok false
// when the store could not decide, or decided without the shared store):
// the windows read, what this replica charged, the fleet and correction
// they give.
func (p *part) absorb(ls *ledgers, now time.Time, res []limiter.Result, ok bool) {
	l := p.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok {
		l.storeFailedAt = now
		return
	}
	if p.charges >= 0 {
		c := l.mine[p.w]
		for r := range nRegs {
			c[r] += p.charge[r]
		}
		l.mine[p.w] = c
		l.charged = now
	}
	if p.resetTo > l.resetTo {
		l.resetTo = p.resetTo
	}
	for _, lk := range p.looks {
		var got counts
		// Charged through the window: refilled, on average, since its
		// middle.
		start := time.Unix(0, lk.w*int64(ls.window)+int64(ls.window)/2)
		for r := range nRegs {
			rr := res[lk.at+r]
			if !rr.InDebt && rr.Remaining >= l.reg[r].Capacity {
				continue // never charged, or refilled whole: nothing
			}
			got[r] = l.reg[r].Capacity - rr.Remaining + refilled(l.reg[r], now.Sub(start))
			if rr.InDebt {
				got[r] = l.reg[r].Capacity
			}
			got[r] = max(got[r], 0)
		}
		l.read[lk.w] = got
		l.readAt = now
	}
	for w := range l.read {
		if w < p.w-slots {
			delete(l.read, w)
		}
	}
	for w := range l.mine {
		if w < p.w-slots {
			delete(l.mine, w)
		}
	}
	l.update(ls, now)
}

// update derives the fleet from the settled windows read (l.mu held).
func (l *ledger) update(ls *ledgers, now time.Time) {
	s := ls.settled(now)
	var fleet, mine counts
	n := 0
	for w := s; w > s-spanWindows; w-- {
		got, ok := l.read[w]
		if !ok {
			continue
		}
		n++
		m := l.mine[w]
		for r := range nRegs {
			fleet[r] += got[r]
			mine[r] += min(m[r], got[r])
		}
	}
	if n == 0 {
		return
	}
	// Each Envoy reports once an interval: the windows read hold secs /
	// interval reports of each.
	secs := float64(n) * ls.window.Seconds()
	per := ls.interval.Seconds() / secs
	l.known = true
	l.elsewhere = allot.Fleet{Demand: float64(max(fleet[regDemand]-mine[regDemand], 0)) / secs,
		Envoys: float64(max(fleet[regReports]-mine[regReports], 0)) / reportScale * per}
	l.fleet = float64(fleet[regDemand]) / secs
	l.admitted = float64(fleet[regAllowed]) / secs
	l.fleetEnvoys = float64(fleet[regReports]) / reportScale * per
	l.contested = l.fleet > l.limit
}

// others are the demands the replica's Envoys of the bucket but st were
// last divided for (l.mu held).
func (l *ledger) others(st *stream, now time.Time, window time.Duration) []float64 {
	var ds []float64
	for o, e := range l.envoys {
		if o == st || now.Sub(e.seen) > staleAfter*window {
			continue
		}
		ds = append(ds, e.assumed)
	}
	return ds
}

// fleetOf is the fleet of the demands ds.
func fleetOf(ds []float64) allot.Fleet {
	f := allot.Fleet{Envoys: float64(len(ds))}
	for _, d := range ds {
		f.Demand += d
	}
	return f
}

// share divides the bucket for st's report of demand (-1: not known) and
// keeps it as st's: its share, requests a second, and the token bucket
// that gives it, prev when Envoy should keep the one it holds.
func (l *ledger) share(st *stream, key string, demand float64, prev allot.TokenBucket, tolerance float64, now time.Time, window time.Duration) (float64, allot.TokenBucket) {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := allot.Input{Limit: l.limit, Demand: demand, Elsewhere: l.elsewhere, Others: l.others(st, now, window)}
	s := allot.Share(in)
	tb := allot.Bucket(s, l.burst, prev, tolerance)
	e := l.envoys[st]
	if e == nil {
		e = &envoyShare{peer: st.peer, key: key}
		l.envoys[st] = e
	}
	e.demand, e.assumed, e.share, e.tb, e.seen = demand, allot.Assumed(in), s, tb, now
	return s, tb
}

// PushShift is how far the fleet's demand, or its count of Envoys, may
// move before the replica's Envoys of the bucket are pushed their shares
// anew, without waiting for their reports. A new share costs Envoy's
// bucket a refill (it starts full), about MaxBurst of the share: a move
// smaller than this gains less than that before the next report.
const PushShift = 0.1

// pushOthers has the replica's Envoys of the bucket but except send their
// shares anew, when the fleet they were divided for moved by PushShift or
// more (l.mu not held).
func (l *ledger) pushOthers(except *stream, now time.Time, interval time.Duration) {
	l.mu.Lock()
	mine := fleetOf(l.others(nil, now, interval))
	f := allot.Fleet{Demand: l.elsewhere.Demand + mine.Demand, Envoys: l.elsewhere.Envoys + mine.Envoys}
	moved := math.Abs(f.Demand-l.divided.Demand) > PushShift*l.divided.Demand ||
		math.Abs(f.Envoys-l.divided.Envoys) >= 0.5
	if !moved {
		l.mu.Unlock()
		return
	}
	l.divided = f
	var to []*stream
	var keys []string
	for st, e := range l.envoys {
		if st != except {
			to, keys = append(to, st), append(keys, e.key)
		}
	}
	l.mu.Unlock()
	for i, st := range to {
		st.mark(keys[i])
	}
}

// lookPlan appends to reqs the looks at the settled windows not read yet,
// when the replica's own charges keep the slots it would read reset (it
// charged within the last interval).
func (l *ledger) lookPlan(ls *ledgers, now time.Time, reqs []limiter.Request) ([]limiter.Request, part, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := part{l: l, w: ls.windowOf(now), charges: -1, limitAt: -1, resetTo: -1}
	if len(l.envoys) == 0 || now.Sub(l.charged) > ls.interval {
		return reqs, p, false
	}
	reqs = l.looks(ls, now, reqs, &p)
	return reqs, p, len(p.looks) > 0
}
