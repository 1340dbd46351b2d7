package extauthz

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/calendar"
	"github.com/floodgate/floodgate/limiter/respond"
)

// Policy is a compiled PolicySpec: what it matches, how it names a caller's
// bucket and the bucket's limit.
type Policy struct {
	Name   string
	Limit  limiter.Limit
	Shadow bool
	// Lease: the policy's buckets may be decided from a lease when hot
	// (lease: auto); never for a shadow policy.
	Lease bool
	// Quota is the policy's calendar quota (quota:), nil for a token
	// bucket; Limit is then the nominal bucket what knows no quotas reads
	// (capacity the quota's limit).
	Quota *limiter.Quota

	match      matcher
	keys       []keySource
	skipMissed bool // on_missing_key: skip
	cost       int64
	costHeader string
	maxCost    int64
	printHdrs  []string // fingerprint headers

	// Rendered once: the structured RateLimit-Policy member, the window and
	// the capacity as RateLimit-Limit carries it.
	policyMember string
	window       int64
	capacity     string
}

// policyName and headerName are what a policy's name and the header names
// it reads may be.
var policyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
var headerName = regexp.MustCompile("^:?[a-z0-9!#$%&'*+.^_`|~-]+$")

// compilePolicy checks one policy and builds it, reporting each problem at
// its path under at; nil when it has any. Each concern has its own step, in
// the order the keys are documented.
func compilePolicy(s *PolicySpec, at string, el *errorList) *Policy {
	n := len(el.errs)
	p := &Policy{Name: s.Name}
	if !policyName.MatchString(s.Name) {
		el.add(at+".name", "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit (got %q)", s.Name)
	}
	capacity := s.Capacity
	if s.Quota != nil {
		p.Limit, p.Quota = compileQuota(s, at, el)
		capacity = s.Quota.Limit
	} else {
		p.Limit = compileLimit(s, at, el)
	}
	p.Shadow, p.skipMissed = compileModes(s, at, el)
	p.Lease = s.Lease == "auto" && !p.Shadow
	p.cost, p.costHeader, p.maxCost = compileCost(s, capacity, at, el)
	p.match = compileMatch(&s.Match, at+".match", el)
	p.keys, p.printHdrs = compileKeys(s, at, el)
	if p.match.tcp {
		checkTCP(p, s, at, el)
	}
	if len(el.errs) > n {
		return nil
	}
	p.render()
	return p
}

// compileLimit reads capacity and refill_per_second into a Limit (zero
// when either is wrong).
func compileLimit(s *PolicySpec, at string, el *errorList) limiter.Limit {
	if s.Capacity <= 0 {
		el.add(at+".capacity", "must be a whole number > 0 (got %d)", s.Capacity)
	}
	rate, err := limiter.ParseRate(s.RefillPerSecond)
	switch {
	case s.RefillPerSecond == "":
		el.add(at+".refill_per_second", "is required: tokens per second, e.g. 10, 0.5 or 1/60")
	case errors.Is(err, limiter.ErrRateRange):
		el.add(at+".refill_per_second", "%v", err)
	case err != nil:
		el.add(at+".refill_per_second", "must be a number > 0 such as 10, 0.5 or 1/60 (got %q)", s.RefillPerSecond)
	case s.Capacity > 0:
		l, err := limiter.NewLimit(s.Capacity, rate)
		if errors.Is(err, limiter.ErrRateRange) {
			el.add(at+".refill_per_second", "%v", err)
		} else if err != nil {
			el.add(at+".capacity", "%v", err)
		}
		return l
	}
	return limiter.Limit{}
}

// compileQuota reads quota: into a Quota and its nominal Limit (zero when
// anything is wrong).
func compileQuota(s *PolicySpec, at string, el *errorList) (limiter.Limit, *limiter.Quota) {
	q, qat := s.Quota, at+".quota"
	n := len(el.errs)
	if s.Capacity != 0 {
		el.add(at+".capacity", "a policy with a quota has no capacity: quota.limit is its tokens per window")
	}
	if s.RefillPerSecond != "" {
		el.add(at+".refill_per_second", "a policy with a quota has no refill: its count starts afresh with each window")
	}
	if s.Lease == "auto" {
		el.add(at+".lease", "a quota cannot be leased (lease: auto is for token buckets): its windows are counted in the store, by the store's clock")
	}
	if q.Limit < 1 || q.Limit > limiter.MaxQuota {
		el.add(qat+".limit", "must be a whole number from 1 to %d (got %d)", int64(limiter.MaxQuota), q.Limit)
	}
	period, err := calendar.ParsePeriod(q.Period)
	if q.Period == "" {
		el.add(qat+".period", "is required: hour, day, week, month or year")
	} else if err != nil {
		el.add(qat+".period", "%v", err)
	}
	loc := time.UTC
	if q.Timezone != "" {
		loc, err = time.LoadLocation(q.Timezone)
		if err != nil || q.Timezone == "Local" {
			el.add(qat+".timezone", "must be an IANA time zone such as UTC or Europe/Berlin (got %q)", q.Timezone)
		}
	}
	var cal calendar.Calendar
	if len(el.errs) == n {
		cal, err = calendar.New(period, loc, q.AnchorDay)
		if err != nil {
			el.add(qat+".anchor_day", "%v", err)
		}
	}
	if len(el.errs) > n {
		return limiter.Limit{}, nil
	}
	// The nominal bucket: the quota's limit, at a token a second (a limit
	// NewLimit takes for every quota's limit).
	one, _ := limiter.PerSecond(1)
	l, err := limiter.NewLimit(q.Limit, one)
	if err != nil {
		el.add(qat+".limit", "%v", err)
		return limiter.Limit{}, nil
	}
	return l, &limiter.Quota{Limit: q.Limit, Windows: cal}
}

// compileModes reads mode and on_missing_key.
func compileModes(s *PolicySpec, at string, el *errorList) (shadow, skipMissed bool) {
	switch s.Mode {
	case "", "enforce":
	case "shadow":
		shadow = true
	default:
		el.add(at+".mode", "must be enforce or shadow (got %q)", s.Mode)
	}
	switch s.Lease {
	case "", "off", "auto":
	default:
		el.add(at+".lease", "must be off or auto (got %q)", s.Lease)
	}
	switch s.OnMissingKey {
	case "", "shared":
	case "skip":
		skipMissed = true
	default:
		el.add(at+".on_missing_key", "must be shared or skip (got %q)", s.OnMissingKey)
	}
	return shadow, skipMissed
}

// compileCost reads cost (default 1), cost_header and max_cost (default
// the capacity: the bucket's, or the quota's limit).
func compileCost(s *PolicySpec, capacity int64, at string, el *errorList) (cost int64, header string, maxCost int64) {
	cost, header, maxCost = s.Cost, strings.ToLower(s.CostHeader), s.MaxCost
	if cost == 0 {
		cost = 1
	} else if cost < 0 {
		el.add(at+".cost", "must be a whole number >= 1 (got %d)", s.Cost)
	} else if capacity > 0 && cost > capacity {
		el.add(at+".cost", "%d exceeds the capacity %d: no request could ever pass", s.Cost, capacity)
	}
	if header != "" && !headerName.MatchString(header) {
		el.add(at+".cost_header", "not a header name: %q", s.CostHeader)
	}
	if maxCost == 0 {
		maxCost = capacity
	} else if maxCost < 0 {
		el.add(at+".max_cost", "must be >= 1 (got %d)", s.MaxCost)
	}
	if s.MaxCost != 0 && s.CostHeader == "" {
		el.add(at+".max_cost", "only bounds cost_header, which is not set")
	}
	return cost, header, maxCost
}

// compileKeys reads the key sources and the headers a fingerprint hashes.
func compileKeys(s *PolicySpec, at string, el *errorList) (keys []keySource, printHdrs []string) {
	if len(s.Key) == 0 {
		el.add(at+".key", "is required: a list of sources such as [header:x-api-key, client_ip]")
	}
	for i, src := range s.Key {
		k, err := parseKeySource(src)
		if err != nil {
			el.add(fmt.Sprintf("%s.key[%d]", at, i), "%v", err)
			continue
		}
		keys = append(keys, k)
		if k.kind == srcFingerprint && len(s.FingerprintHeaders) == 0 {
			el.add(fmt.Sprintf("%s.key[%d]", at, i), "fingerprint needs fingerprint_headers (e.g. [user-agent, x-ja4])")
		}
	}
	for i, h := range s.FingerprintHeaders {
		h = strings.ToLower(strings.TrimSpace(h))
		if !headerName.MatchString(h) {
			el.add(fmt.Sprintf("%s.fingerprint_headers[%d]", at, i), "not a header name: %q", s.FingerprintHeaders[i])
		}
		printHdrs = append(printHdrs, h)
	}
	return keys, printHdrs
}

// checkTCP reports what a tcp policy cannot read: a check from Envoy's
// network filter carries the connection's address and no headers.
func checkTCP(p *Policy, s *PolicySpec, at string, el *errorList) {
	for i, k := range p.keys {
		if k.kind != srcClientIP {
			el.add(fmt.Sprintf("%s.key[%d]", at, i), "a tcp policy is keyed by the connection's address: use client_ip (got %q)", s.Key[i])
		}
	}
	if p.costHeader != "" {
		el.add(at+".cost_header", "a tcp check has no headers")
	}
}

// render fills what the response headers repeat for p: its capacity and
// window as text, and its RateLimit-Policy member (a quota's window changes
// length, a month's from 28 to 31 days: its member is rendered per answer).
func (p *Policy) render() {
	if p.Quota != nil {
		p.capacity = strconv.FormatInt(p.Quota.Limit, 10)
		return
	}
	p.window = respond.Window(p.Limit)
	p.capacity = strconv.FormatInt(p.Limit.Capacity, 10)
	p.policyMember = string(respond.AppendPolicy(nil, p.Name, p.Limit.Capacity, p.window))
}

// KeyedByClientIP reports whether p's key list names client_ip.
func (p *Policy) KeyedByClientIP() bool {
	for _, k := range p.keys {
		if k.kind == srcClientIP {
			return true
		}
	}
	return false
}

// costOf returns the tokens a request takes under p.
func (p *Policy) costOf(v *View) int64 {
	if p.costHeader == "" {
		return p.cost
	}
	s, ok := v.Header(p.costHeader)
	if !ok {
		return p.cost
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 1 {
		return p.cost
	}
	return min(n, p.maxCost)
}
