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

// The fleet, through the shared store. Every replica keeps, in registers
// of the shared store, the rates its Envoys last reported for a bucket:
// their demand, what they allowed, and one for each Envoy, and the same
// two of those throttled (last assigned less than they ask), added up across
// replicas, one set of registers an epoch (a report interval), with
// nothing but the store's Charge, Refund and Take (a look), so that Redis,
// Redis Cluster and the in-memory store all serve (the memory store, one
// replica).
//
// An Envoy's report sets its rates in the current epoch's registers and
// the next two's (setEpochs), charging or refunding the difference from
// what it set there before. Envoy reports every interval, so every Envoy
// that reported within the last interval or two is in the current epoch's
// registers exactly once, whichever replica it talks to and whenever in
// the epoch it reported: one look at the current epoch is the fleet as of
// every Envoy's latest report. The second epoch ahead covers a report that
// comes late: a bucket's first report, which Envoy sends when the bucket
// is made, up to an interval before its report timer's first tick; a
// stalled Envoy. An Envoy that stops reporting drops out at the third
// epoch after its last report; one whose stream ends is taken out at once. A call the store answered with an error may have been applied
// or not; either way the registers are right again two epochs on.
//
// Registers go round slots. An epoch's are reset (refunded whole, which
// deletes them) three and four epochs ahead, when no replica sets rates in
// them (they are set in the current epoch and the next two only), so the
// replicas' clocks may disagree by most of an epoch. A replica reads, at
// its Envoys' reports and once a window (a tenth of an interval) besides
// (Run), so a move of demand reported on one replica reaches the shares
// of the others' Envoys within a window, not at their next reports.
//
// A register is a bucket used as a counter: capacity regCapacity, charged
// with rates in thousandths of a request a second (rateScale), refilled so
// slowly that what it refills over two epochs is below a thousandth of a
// request a second of the limit: what it holds is the capacity less the
// rates set in it. The registers of a bucket share its identity, so they
// and the bucket itself sit in one Redis Cluster slot: one script call.
//
// The bucket itself (the rate limit door's, of the same descriptor chain)
// is charged with what each Envoy allowed, as a stream-done hits_addend
// is: Envoy's rate limit service sees the requests Envoys admitted under
// their quotas, one limit for both APIs.

// The registers of a bucket.
const (
	regDemand          = iota // the demand each Envoy's share is divided for
	regAllowed                // what each Envoy allowed
	regEnvoys                 // one for each Envoy
	regThrottled              // one for each Envoy assigned less than it asks
	regThrottledDemand        // the demand of those
	nRegs
)

// rateScale is what a register counts a request a second (or an Envoy)
// as: rates are set in thousandths.
const rateScale = 1000

// spanWindows is how many windows make a report interval: how often a
// replica reads the fleet between its Envoys' reports.
const spanWindows = 10

// setEpochs is how many epochs a report sets its rates in: the current
// one and those after it.
const setEpochs = 3

// slots is how many epochs the registers go round: the one before (still
// looked at by a replica whose clock is behind), the ones set, the two
// after them (reset).
const slots = setEpochs + 3

// regNames prefix the registers' bucket names (register, slot).
var regNames = func() (n [nRegs][slots]string) {
	for r, p := range [nRegs]string{"d", "a", "n", "t", "u"} {
		for s := range slots {
			n[r][s] = "rlqs/" + p + strconv.Itoa(s) + "/"
		}
	}
	return n
}()

// counts are rates as the registers count them (rateScale).
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
	domain string
	limit  float64
	burst  float64
	reg    [nRegs]limiter.Limit
	// mine is what this replica's Envoys set, by epoch; read the
	// registers of the epoch last looked at, as the store said; resetTo
	// the last epoch whose slot this replica reset.
	mine      map[int64]counts
	read      counts
	readEpoch int64
	resetTo   int64
	// elsewhere is the fleet on other replicas; fleet the whole fleet's
	// demand and admitted total (requests a second), contested whether
	// demand exceeds the limit: as of the last look.
	elsewhere         allot.Fleet
	fleet, admitted   float64
	fleetEnvoys       float64
	contested, known  bool
	storeFailedAt     time.Time
	envoys            map[*stream]*envoyShare
	lastUsed, created time.Time
	// readAt is when the registers were last looked at.
	readAt time.Time
}

// envoyShare is one stream's latest report of the bucket and its share.
type envoyShare struct {
	peer, key     string  // key: the stream's bucket
	demand, share float64 // demand -1: not known yet (the share assumed it)
	assumed       float64 // the demand the share was divided for
	rose          bool    // its last report showed a rise (allot.Rose)
	tb            allot.TokenBucket
	seen          time.Time
	// set are the rates it set in epochs setAt to setAt+setEpochs-1
	// (setAt -1: none yet).
	set   counts
	setAt int64
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
		l = &ledger{key: k, mine: map[int64]counts{}, readEpoch: -1, resetTo: -1,
			envoys: map[*stream]*envoyShare{}, created: now}
		ls.m[k] = l
	}
	ls.mu.Unlock()
	l.mu.Lock()
	if l.q.Bucket.Limit != q.Bucket.Limit || l.domain != domain {
		l.domain = domain
		l.limit = rateOf(q.Bucket.Limit)
		l.burst = min(float64(q.Bucket.Limit.Capacity)/l.limit, MaxBurst.Seconds())
		l.reg = registerLimits(q.Bucket.Limit)
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
		idle := len(l.envoys) == 0 && now.Sub(l.lastUsed) > slots*ls.interval
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

// staleAfter is how many report intervals without a report make an Envoy's share
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

// forget drops st's shares from every ledger it reported to, and appends
// to reqs what takes its rates out of the registers; done is to be called
// with the store's answer.
func (ls *ledgers) forget(st *stream, of []*ledger, now time.Time, reqs []limiter.Request) ([]limiter.Request, func(ok bool)) {
	k := ls.epochOf(now)
	type out struct {
		l     *ledger
		taken map[int64]counts
	}
	var outs []out
	for _, l := range of {
		l.mu.Lock()
		e := l.envoys[st]
		delete(l.envoys, st)
		if e != nil && e.setAt >= 0 {
			o := out{l: l, taken: map[int64]counts{}}
			for ep := max(e.setAt, k); ep < e.setAt+setEpochs; ep++ {
				reqs = l.setIn(ep, e.set, counts{}, false, reqs)
				o.taken[ep] = e.set
			}
			outs = append(outs, o)
		}
		l.mu.Unlock()
	}
	return reqs, func(ok bool) {
		if !ok {
			return // still counted as this replica's until its epochs pass
		}
		for _, o := range outs {
			o.l.mu.Lock()
			for ep, c := range o.taken {
				m := o.l.mine[ep]
				for r := range nRegs {
					m[r] -= c[r]
				}
				o.l.mine[ep] = m
			}
			o.l.mu.Unlock()
		}
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

// regCapacity is the registers' capacity, at most: within the store's
// exact arithmetic, and far more than a bucket's fleet asks for (a
// million requests a second, in thousandths).
const regCapacity = 1 << 30

// registerLimits are the registers' shapes for a bucket of limit l: the
// largest capacity exact arithmetic allows up to regCapacity, refilled at
// a millionth of l's rate where that is exact (the rates are set in
// thousandths: a thousandth of a request a second of it over a thousand
// seconds), the Envoys' register at one every thousand seconds (a
// millionth of an Envoy a second).
func registerLimits(l limiter.Limit) (out [nRegs]limiter.Limit) {
	num, den := l.Rate.Fraction()
	var rates []limiter.Rate
	for _, div := range []int64{1_000_000, 1000, 100, 10, 1} {
		if r, err := limiter.NewRate(num, den*div); err == nil {
			rates = append(rates, r)
		}
	}
	counter := shapeOf(rates, l)
	out[regDemand], out[regAllowed], out[regThrottledDemand] = counter, counter, counter
	slow, err := limiter.NewRate(1, 1000)
	if err != nil {
		slow = l.Rate
	}
	out[regEnvoys] = shapeOf([]limiter.Rate{slow}, l)
	out[regThrottled] = out[regEnvoys]
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

// epochOf is the index of the epoch (report interval) now is in.
func (ls *ledgers) epochOf(now time.Time) int64 {
	return now.UnixNano() / int64(ls.interval)
}

// slot is epoch k's slot.
func slot(k int64) int { return int(((k % slots) + slots) % slots) }

// register is a request of register r in epoch k's slot (l.mu held).
func (l *ledger) register(r int, k int64, kind limiter.Kind, cost int64) limiter.Request {
	if kind == limiter.Refund && cost == 0 {
		cost = l.reg[r].Capacity // whole: a reset
	}
	return limiter.Request{Name: regNames[r][slot(k)] + l.key.name, ID: l.key.id, Limit: l.reg[r], Kind: kind, Cost: cost}
}

// setIn appends to reqs what moves the rates set in epoch k from had to
// to, and with look a look at each register left as it is, so that the
// answers to the nRegs requests appended say what the registers hold
// (l.mu held). A call names each bucket once: the look is the move's own
// answer.
func (l *ledger) setIn(k int64, had, to counts, look bool, reqs []limiter.Request) []limiter.Request {
	for r := range nRegs {
		switch d := to[r] - had[r]; {
		case d > 0:
			reqs = append(reqs, l.register(r, k, limiter.Charge, d))
		case d < 0:
			reqs = append(reqs, l.register(r, k, limiter.Refund, -d))
		case look:
			reqs = append(reqs, l.register(r, k, limiter.Take, 0))
		}
	}
	return reqs
}

// part is one bucket's share of a call to the store: the rates set for
// one Envoy (e nil: none, a look only), the resets, the look at epoch k.
type part struct {
	l       *ledger
	e       *envoyShare
	k       int64
	to      counts
	had     [setEpochs]counts // what e had set in epochs k, k+1...
	resetTo int64
	// lookAt indexes the call's requests: the look at epoch k's registers.
	lookAt int
}

// rates are the registers' counts of an Envoy's demand and allowed
// (requests a second), throttled or not.
func rates(demand, allowed float64, throttled bool) counts {
	scale := func(x float64) int64 { return int64(math.Round(math.Max(x, 0) * rateScale)) }
	c := counts{regDemand: scale(demand), regAllowed: scale(allowed), regEnvoys: rateScale}
	if throttled {
		c[regThrottled], c[regThrottledDemand] = rateScale, c[regDemand]
	}
	return c
}

// ThrottledShare is the part of its demand below which an Envoy's last
// share makes it count as throttled in the shared registers: an Envoy
// asking less than the level is assigned its demand, give or take the
// rounding.
const ThrottledShare = 0.98

// plan appends to reqs what one report of the bucket by st asks of the
// store: its rates (the demand its share is divided for, -1 when not
// known yet: the demand it is assumed to have; allowed requests over
// elapsed) set in the current epoch and the next ones, the current epoch's
// registers read in the same requests, the bucket charged with what it
// allowed, the slots ahead reset.
func (l *ledger) plan(ls *ledgers, st *stream, key string, now time.Time, demand float64, rose bool, allowed uint64, elapsed time.Duration, reqs []limiter.Request) ([]limiter.Request, part) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ls.epochOf(now)
	e := l.envoyOf(st, key)
	e.seen, e.rose = now, rose
	demand = l.assumed(e, allot.Input{Limit: l.limit, Demand: demand, Elsewhere: l.elsewhere, Others: l.others(st, now, ls.interval)})
	admitted := 0.0
	if elapsed > 0 {
		admitted = float64(allowed) / elapsed.Seconds()
	}
	// Throttled by the share it was last divided: the one this report
	// brings is divided after the store's answer.
	throttled := e.share > 0 && e.share < ThrottledShare*demand
	p := part{l: l, e: e, k: k, to: rates(demand, admitted, throttled), resetTo: -1}
	for i := range p.had {
		if ep := k + int64(i); e.setAt >= 0 && ep >= e.setAt && ep < e.setAt+setEpochs {
			p.had[i] = e.set
		}
	}
	p.lookAt = len(reqs)
	for i := range p.had {
		reqs = l.setIn(k+int64(i), p.had[i], p.to, i == 0, reqs)
	}
	if allowed > 0 {
		reqs = append(reqs, limiter.Request{Name: l.key.name, ID: l.key.id, Limit: l.q.Bucket.Limit, Kind: limiter.Charge, Cost: int64(allowed)})
	}
	reqs = l.resets(k, reqs, &p)
	return reqs, p
}

// resets appends to reqs the resets of the two epochs after the last one
// a report in epoch k sets that this replica has not reset yet (l.mu
// held).
func (l *ledger) resets(k int64, reqs []limiter.Request, p *part) []limiter.Request {
	last := k + setEpochs + 1
	if l.resetTo >= last {
		return reqs
	}
	for rk := max(l.resetTo+1, k+setEpochs); rk <= last; rk++ {
		for r := range nRegs {
			reqs = append(reqs, l.register(r, rk, limiter.Refund, 0))
		}
	}
	p.resetTo = last
	return reqs
}

// absorb takes the store's answer to p (res, the call's results; ok false
// when the store could not decide, or decided without the shared store):
// the rates set, the fleet the look gives.
func (p *part) absorb(ls *ledgers, now time.Time, res []limiter.Result, ok bool) {
	l := p.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok {
		l.storeFailedAt = now
		return
	}
	if p.e != nil {
		for i := range p.had {
			ep := p.k + int64(i)
			m := l.mine[ep]
			for r := range nRegs {
				m[r] += p.to[r] - p.had[i][r]
			}
			l.mine[ep] = m
		}
		p.e.set, p.e.setAt = p.to, p.k
	}
	if p.resetTo > l.resetTo {
		l.resetTo = p.resetTo
	}
	for r := range nRegs {
		rr := res[p.lookAt+r]
		switch {
		case rr.InDebt:
			l.read[r] = l.reg[r].Capacity
		default:
			l.read[r] = max(l.reg[r].Capacity-rr.Remaining, 0)
		}
	}
	l.readEpoch, l.readAt = p.k, now
	for ep := range l.mine {
		if ep < p.k-1 {
			delete(l.mine, ep)
		}
	}
	l.update()
}

// update derives the fleet from the registers last looked at (l.mu held).
func (l *ledger) update() {
	mine := l.mine[l.readEpoch]
	elsewhere := func(r int) float64 { return float64(max(l.read[r]-mine[r], 0)) / rateScale }
	l.known = true
	l.elsewhere = allot.Fleet{Demand: elsewhere(regDemand), Envoys: elsewhere(regEnvoys),
		Throttled: elsewhere(regThrottled), ThrottledDemand: elsewhere(regThrottledDemand)}
	l.fleet = float64(l.read[regDemand]) / rateScale
	l.admitted = float64(l.read[regAllowed]) / rateScale
	l.fleetEnvoys = float64(l.read[regEnvoys]) / rateScale
	l.contested = l.fleet > l.limit
}

// others are the demands the replica's Envoys of the bucket but st were
// last divided for (l.mu held).
func (l *ledger) others(st *stream, now time.Time, interval time.Duration) []float64 {
	var ds []float64
	for o, e := range l.envoys {
		if o == st || now.Sub(e.seen) > staleAfter*interval {
			continue
		}
		ds = append(ds, e.assumed)
	}
	return ds
}

// share divides the bucket for st's report of demand (-1: not known) and
// keeps it as st's: its share, requests a second, and the token bucket
// that gives it, prev when Envoy should keep the one it holds.
func (l *ledger) share(st *stream, key string, demand float64, prev allot.TokenBucket, tolerance float64, now time.Time, window time.Duration) (float64, allot.TokenBucket) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.envoyOf(st, key)
	in := allot.Input{Limit: l.limit, Demand: demand, Elsewhere: l.elsewhere, Others: l.others(st, now, window)}
	in.Demand = l.assumed(e, in)
	s := allot.Share(in)
	tb := allot.Bucket(s, l.burst, prev, tolerance)
	e.demand, e.assumed, e.share, e.tb, e.seen = demand, in.Demand, s, tb, now
	return s, tb
}

// assumed is the demand e's share is divided for, in.Demand its own
// (allot.Assumed), or, while its last report showed a rise (allot.Rose),
// at least what the others leave (allot.Leftover; l.mu held).
func (l *ledger) assumed(e *envoyShare, in allot.Input) float64 {
	d := allot.Assumed(in)
	if e.rose {
		d = math.Max(d, allot.Leftover(in))
	}
	return d
}

// envoyOf is st's share of the bucket, made when it has none (l.mu held).
func (l *ledger) envoyOf(st *stream, key string) *envoyShare {
	e := l.envoys[st]
	if e == nil {
		e = &envoyShare{peer: st.peer, key: key, demand: -1, setAt: -1}
		l.envoys[st] = e
	}
	return e
}

// PushShift is how far an Envoy's share may move, as a part of it,
// before the Envoy is pushed its share anew, without waiting for its
// report. A new share costs Envoy's bucket a refill (it starts full),
// about MaxBurst of the share: a move smaller than this gains less than
// that before the next report.
const PushShift = 0.1

// pushOthers has the replica's Envoys of the bucket but except send their
// shares anew, those whose share the fleet as now known moves by
// PushShift or more (l.mu not held).
func (l *ledger) pushOthers(except *stream, now time.Time, interval time.Duration) {
	l.mu.Lock()
	var sts []*stream
	var es []*envoyShare
	var ds []float64
	others := math.Max(l.elsewhere.Demand, 0) // what every Envoy but the risers asks
	for st, e := range l.envoys {
		if now.Sub(e.seen) > staleAfter*interval {
			continue
		}
		sts, es, ds = append(sts, st), append(es, e), append(ds, e.assumed)
		if !e.rose {
			others += math.Max(e.assumed, 0)
		}
	}
	for i, e := range es {
		if e.rose { // what the others leave now, as assumed does
			ds[i] = math.Max(e.demand, l.limit-others)
		}
	}
	shares := allot.Shares(l.limit, ds, l.elsewhere)
	var to []*stream
	var keys []string
	for i, st := range sts {
		if st != except && math.Abs(shares[i]-es[i].share) >= PushShift*es[i].share {
			to, keys = append(to, st), append(keys, es[i].key)
		}
	}
	l.mu.Unlock()
	for i, st := range to {
		st.mark(keys[i])
	}
}

// lookPlan appends to reqs a look at the current epoch's registers, and
// the resets due, while the replica has Envoys of the bucket and the store
// has not failed it within the last interval (the reports alone try it
// then).
func (l *ledger) lookPlan(ls *ledgers, now time.Time, reqs []limiter.Request) ([]limiter.Request, part, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ls.epochOf(now)
	p := part{l: l, k: k, resetTo: -1}
	if len(l.envoys) == 0 || (!l.storeFailedAt.IsZero() && now.Sub(l.storeFailedAt) < ls.interval) {
		return reqs, p, false
	}
	reqs = l.resets(k, reqs, &p)
	p.lookAt = len(reqs)
	reqs = l.setIn(k, counts{}, counts{}, true, reqs)
	return reqs, p, true
}
