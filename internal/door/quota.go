package door

import (
	"sync"

	"github.com/floodgate/floodgate/limiter"
)

// Quotas: the rate limit door's limits, as another door reads them. Envoy's
// rate limit quota service (RLQS) divides the very limits Envoy's rate limit
// service (RLS) decides (docs/rlqs.md): the same files or xDS pushes, the
// same domains and descriptor trees. No door imports another, so the rate
// limit door publishes what its limits say of a descriptor chain here, on
// every reload and push, and the quota door reads it: a board shared by the
// doors of one Build, as the policies' server is (PolicyServer).

// Entry is one key/value of a descriptor chain.
type Entry struct{ Key, Value string }

// Quota is what the limits say of one descriptor chain in a domain: no
// limit, unlimited, never (a limit of 0), or a token bucket, which Bucket
// names as the rate limit door counts the chain in it, so that a door
// charging it charges the bucket Envoy's rate limit filter is decided by.
type Quota struct {
	Meets QuotaMeets
	// Name is the limit's name in reports and metrics (its `name`, else
	// its place in the tree: `edge.tenant`), "" for NoQuota.
	Name string
	// Report is the name its decisions are reported under in
	// /debug/limited (rls:DOMAIN/NAME), "" for NoQuota.
	Report string
	Shadow bool
	// RequestsPerUnit per UnitSeconds is the configured limit.
	RequestsPerUnit uint32
	UnitSeconds     int64
	// Bucket names the chain's token bucket (Name, ID: the entries hashed)
	// and its shape (Limit), for Bucketed; Cost and Kind are left to the
	// caller.
	Bucket limiter.Request
	// Key and Caller label the chain for an operator, as the rate limit
	// door labels a descriptor in /debug/limited: its keys, with the values
	// the configuration names, and the one value a client brings when it is
	// an address, else the hashed identity.
	Key, Caller string
}

// QuotaMeets is what a chain meets.
type QuotaMeets uint8

const (
	// NoQuota: no limit applies (an unknown domain, a chain outside the
	// tree or ending above or below a limit).
	NoQuota QuotaMeets = iota
	// Unlimited: the limit says unlimited: true.
	Unlimited
	// Never: a limit of 0 requests per unit, which nothing passes.
	Never
	// Bucketed: a token bucket (Quota.Bucket).
	Bucketed
)

// QuotaSource selects the quota of descriptor chains: one set of limits,
// immutable, as a reload or a push made it.
type QuotaSource interface {
	// Quota is what the limits say of chain in domain.
	Quota(domain string, chain []Entry) Quota
	// HasDomain reports whether domain is configured.
	HasDomain(domain string) bool
}

// QuotaBoard is where the rate limit door publishes its limits and the
// quota door reads them, shared by the doors of one Build (Env.Quotas).
type QuotaBoard struct {
	mu      sync.Mutex
	src     QuotaSource
	version uint64
	watch   []func()
}

// Publish swaps in src, then tells every watcher.
func (b *QuotaBoard) Publish(src QuotaSource) {
	b.mu.Lock()
	b.src = src
	b.version++
	watch := b.watch
	b.mu.Unlock()
	for _, fn := range watch {
		fn()
	}
}

// Current is the source last published and how many were, nil and 0
// before the first.
func (b *QuotaBoard) Current() (QuotaSource, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.src, b.version
}

// Watch registers fn, called after each Publish (on the publisher's
// goroutine: fn must not block).
func (b *QuotaBoard) Watch(fn func()) {
	b.mu.Lock()
	b.watch = append(b.watch, fn)
	b.mu.Unlock()
}
